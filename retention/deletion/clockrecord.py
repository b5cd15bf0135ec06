"""The clock record: where the sidecar's clock last was (`policies.ClockMark`: wall time, boot clock
seconds, kernel boot id), kept in one small JSON file beside the audit trail (`record_path`), so a
restart on the same boot knows exactly what time it should be however idle the logs were. While a
forward step is held the record says so (`step`, the seconds the wall clock was ahead of the trusted
time it holds), so a hold resumes at start whatever the audit trail still shows (rotated, or more
lines written after the step than its tail reads).

Written as a temporary of this process's own name (created O_EXCL | O_NOFOLLOW, never a link
followed) renamed over the record; not fsynced: it only needs to outlive the process (the page
cache does), and after a power loss it is a lower bound anyway (another boot). Read with
O_NOFOLLOW, at most `_MAX_BYTES`. Never raises: a record that cannot be read or written is a WARNING
(once until it works again) and the start-up look falls back to the newest time on disk.
Thread-safe: writes are serialised by a lock.
"""

from __future__ import annotations

import json
import math
import os
import threading

from loguru import logger

from commitlog.bootclock import boot_id
from commitlog.errors import CommitLogError
from commitlog.layout import TMP_SUFFIX
from commitlog.safeopen import no_follow, temporary
from policies import ClockMark

__all__ = ["ClockRecord", "boot_id", "record_path"]

_MAX_BYTES = 4096


def record_path(audit_path: str) -> str:
    """The clock record of the sidecar whose audit trail is `audit_path`: `<audit>.clock`."""
    return audit_path + ".clock"


class ClockRecord:
    """The record file at `path` (see the module docstring)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._failing = False          # a write failed and was said: say nothing until one works

    def read(self) -> ClockMark | None:
        """The mark the file holds; None (with a WARNING unless it is simply missing) otherwise."""
        try:
            with open(self.path, "rb", opener=no_follow) as f:
                data = f.read(_MAX_BYTES + 1)
        except FileNotFoundError:
            return None
        except (OSError, CommitLogError) as exc:
            logger.warning("clock record {} cannot be read ({}): the start-up look compares the clock with "
                           "the newest time on disk only", self.path, exc)
            return None
        mark = _parse(data)
        if mark is None:
            logger.warning("clock record {} is damaged: the start-up look compares the clock with the newest "
                           "time on disk only; it is rewritten at the next look", self.path)
        return mark

    def write(self, mark: ClockMark) -> bool:
        """Replace the record with `mark`; False (a WARNING the first time) when it cannot be."""
        fields = {"wall": mark.wall, "uptime": mark.uptime, "boot_id": mark.boot_id}
        if mark.step is not None:
            fields["step"] = mark.step
        data = json.dumps(fields).encode()
        tmp = f"{self.path}.{os.getpid()}{TMP_SUFFIX}"
        with self._lock:
            try:
                os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
                with open(tmp, "wb", opener=temporary) as f:
                    f.write(data)
                os.replace(tmp, self.path)
            except (OSError, CommitLogError) as exc:
                _discard(tmp)
                if not self._failing:
                    logger.warning("clock record {} cannot be written ({}): a restart will compare the clock "
                                   "with the newest time on disk only (an idle log may then raise "
                                   "clock-stepped)", self.path, exc)
                self._failing = True
                return False
            if self._failing:
                logger.info("clock record {} written again", self.path)
            self._failing = False
            return True


def _parse(data: bytes) -> ClockMark | None:
    if len(data) > _MAX_BYTES:
        return None
    try:
        raw = json.loads(data)
        wall, uptime, boot, step = raw["wall"], raw["uptime"], raw["boot_id"], raw.get("step")
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                  for v in (wall, uptime) + (() if step is None else (step,)))
    if not numbers or uptime < 0 or not isinstance(boot, str) or not 0 < len(boot) <= 64:
        return None
    return ClockMark(float(wall), float(uptime), boot, None if step is None else float(step))


def _discard(tmp: str) -> None:
    try:
        if os.path.isfile(tmp) and not os.path.islink(tmp):
            os.unlink(tmp)
    except OSError:
        pass
