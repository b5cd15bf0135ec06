"""Fixtures and markers of the adversary tests: hostile inputs generated from seeds.

The helpers of tests/retention (a real sidecar subprocess) are importable from here as well."""

from __future__ import annotations

import sys
from pathlib import Path

_RETENTION_TESTS = str(Path(__file__).resolve().parent.parent / "retention")
if _RETENTION_TESTS not in sys.path:
    sys.path.append(_RETENTION_TESTS)
