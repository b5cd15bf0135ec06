"""Helpers of the credential probes (tests/adversary/test_credentials_*.py): fake AWS credentials
whose every part is recognisable in a log, and the fragments of them no log may hold."""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1] / "retention"))   # the sidecar helpers

ACCESS_KEY_ID = "ASIAPROBEKEYID7QXZ2M"
SECRET = "probeSecret/Do+Not+Log+Me+0123456789abcdefXYZ"
TOKEN = "FwoGZXIvYXdzEPROBESESSIONTOKEN//////////" + "tokenTAIL" * 30 + "=="
CREDENTIALS = {"AWS_ACCESS_KEY_ID": ACCESS_KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET,
               "AWS_SESSION_TOKEN": TOKEN, "AWS_DEFAULT_REGION": "us-east-1"}
_SIGNATURE = re.compile(r"Signature=(?!\[redacted\])[0-9a-f]{16,}", re.IGNORECASE)


def leaks(text: str) -> list[str]:
    """What of the credentials `text` holds: each secret whole, in part, or a request signature."""
    found = [name for name, value in (("access key id", ACCESS_KEY_ID), ("secret", SECRET),
                                      ("session token", TOKEN)) if value in text]
    found += [f"part of the {name}" for name, part in (("secret", SECRET[8:24]), ("session token", TOKEN[10:40]),
                                                         ("session token", "tokenTAILtokenTAIL"))
              if part in text]
    found += [f"signature {m.group(0)[:30]}" for m in _SIGNATURE.finditer(text)]
    return found
