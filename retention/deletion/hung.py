"""Segments a delete attempt found held by a reader, remembered across passes and restarts.

Kept per log in `<log>/.retention-hung.json` (written atomically), so `force_after` counts from the
first attempt even when the cleaner restarts in between, as RocketMQ's first-destroy timestamp does.
One `HungRegistry` per log; not thread-safe (the cleaner runs one pass per log at a time). A
damaged file (garbage bytes, wrong shape) is reported in one WARNING line naming it and ignored.
"""

from __future__ import annotations

import json
import os

from loguru import logger

from commitlog.layout import HUNG_FILE, TMP_SUFFIX
from commitlog.safeopen import no_follow, temporary
from policies import HungSegment


class HungRegistry:
    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, HUNG_FILE)
        self._segments: dict[int, HungSegment] = self._load()

    def _load(self) -> dict[int, HungSegment]:
        try:
            with open(self.path, "rb", opener=no_follow) as f:
                raw = json.loads(f.read())
            return {int(base): HungSegment(float(v["first_attempt_at"]), float(v["last_attempt_at"]))
                    for base, v in raw.items()}
        except FileNotFoundError:
            return {}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # A damaged file only costs the force_after clock: it restarts from the next attempt.
            logger.warning("{}: not a hung-segment registry ({}: {}); ignored, force_after counts "
                           "again from the next attempt, and the file is rewritten then",
                           self.path, type(exc).__name__, exc)
            return {}
        except OSError as exc:
            logger.warning("{}: cannot be read ({}); force_after counts again from the next attempt",
                           self.path, exc)
            return {}

    def snapshot(self) -> dict[int, HungSegment]:
        return dict(self._segments)

    def held(self, base_offset: int, at: float) -> HungSegment:
        """Record a delete attempt that found `base_offset` held at time `at`."""
        before = self._segments.get(base_offset)
        entry = HungSegment(before.first_attempt_at if before else at, at)
        self._segments[base_offset] = entry
        self._save()
        return entry

    def forget(self, *base_offsets: int) -> None:
        if any(self._segments.pop(b, None) is not None for b in base_offsets):
            self._save()

    def forget_below(self, start_offset: int) -> None:
        """Drop entries of segments that no longer exist."""
        gone = [b for b in self._segments if b < start_offset]
        if gone:
            self.forget(*gone)

    def _save(self) -> None:
        if not self._segments:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            return
        tmp = self.path + TMP_SUFFIX
        with open(tmp, "w", opener=temporary) as f:
            json.dump({str(b): {"first_attempt_at": h.first_attempt_at,
                                "last_attempt_at": h.last_attempt_at}
                       for b, h in sorted(self._segments.items())}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
