"""retention: executes retention plans on commit logs, one-shot (`retention plan|clean|compact|check`) or
as a long-running sidecar (`retention serve`), or embedded (`RetentionScheduler`).

Never imports pyspark.
"""

from policies import DELETED, FAILED, HUNG

from .audit import AuditTrail, read_audit, read_events
from .deletion.cleaner import Cleaner
from .compaction.summary import CompactionResult, LogCompaction, OutputResult
from .compaction.compactor import Compactor, Pending
from .deletion.results import LogPassResult, PassResult
from .deletion.pinned import PinnedFile, find_pinned, pinned_bytes
from .deletion.watched import WatchedLog, disk_snapshot

__all__ = [
    "AuditTrail", "Cleaner", "CompactionResult", "Compactor", "DELETED", "FAILED", "HUNG", "LogCompaction",
    "LogPassResult", "OutputResult", "Pending", "PassResult", "PassRunningError", "PinnedFile", "RetentionScheduler", "WatchedLog", "disk_snapshot", "find_pinned",
    "pinned_bytes", "read_audit", "read_events",
]


def __getattr__(name: str):
    # Imported on first use, so `retention plan|clean|check` do not load APScheduler.
    if name in ("RetentionScheduler", "PassRunningError"):
        from .scheduling import scheduler
        return getattr(scheduler, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
