"""commitlog: a segmented commit log of fixed-size, preallocated, memory-mapped segment files.

Public API::

    from commitlog import CommitLog, Record, SegmentInfo, StoreFullError, OffsetOutOfRangeError, CorruptLogError

The layout of a log directory (`list_segments`, `is_log_directory`, the file suffixes) and the
defaults of `CommitLog.open()` (`DEFAULT_SEGMENT_SIZE`, `DEFAULT_REFUSE_WRITES_RATIO`, ...) are
exported for the layers above. Importing this package never imports pyspark; `commitlog.spark`
does, on demand.

Rooms: the base modules here (`log`, the `CommitLog` facade; `errors`, the error tree; `options`;
`arguments`; `layout`, every file name in a log directory; `record`, the record format; `locks`;
`marks`; `state` and `startoffset`, consumer commits and the start offset; `diskusage`;
`opening`; `timeroll`, the time-based roll of a log no writer has open), and the
sub-packages `segments` (segment files and reading), `append` (writing and recovery), `cleanup`
(removal, swaps, compaction's rewrite) and `spark` (the PySpark integration). Dependencies point
`cleanup`/`append` -> `segments` -> base.
"""

from .cleanup.marks_snapshot import MarksSnapshot
from .cleanup.rewrite import RewrittenRun
from .diskusage import DiskUsage, disk_usage
from .errors import (ArchiveCorruptError, ArchiveError, ArchiveMissingError, CommitLogError, CorruptLogError, InvalidArgumentError, InvalidCommitError,
                     LogClosedError, LogLockedError, LogNotReadableError, LogNotWritableError, NotALogError, OffsetOutOfRangeError,
                     OffsetRemovedError,
                     ReadOnlyLogError, RecordTooLargeError, SegmentSizeMismatchError,
                     StoreFullError, UnsafeLogFileError)
from .layout import (DELETED_SUFFIX, META_FILE, SegmentFile, SegmentListing, is_log_directory,
                     list_segments, parse_segment_name, segment_name)
from .log import CommitLog
from .options import (DEFAULT_BLOCK_TIMEOUT, DEFAULT_FLUSH, DEFAULT_FLUSH_INTERVAL, DEFAULT_ON_FULL,
                      DEFAULT_REFUSE_WRITES_RATIO, DEFAULT_RESUME_RATIO, DEFAULT_SEGMENT_SIZE,
                      FLUSH_MODES, MAX_SEGMENT_SIZE, MIN_SEGMENT_SIZE, ON_FULL_MODES, LogOptions)
from .record import ATTR_CONTROL, ATTR_DEAD, ATTR_GAP, Record
from .cleanup.removal import RemovalResult, shrink_doomed, unlink_doomed
from .timeroll import NOT_DUE, ROLLED, WRITER_OPEN, roll_idle
from .segments.segment import SegmentInfo
from .segments.last_segment_end import end_mark

# The public face: what `dir(commitlog)` shows and the Python API page documents. The other names
# imported above (record attribute bits, roll outcomes, removal and compaction helpers, layout
# names) are for the layers above (`retention`, `commitlog.spark`) and stay importable, unlisted.
__all__ = [
    "CommitLog", "LogOptions", "Record", "SegmentInfo", "SegmentFile", "SegmentListing", "DiskUsage",
    "disk_usage", "is_log_directory", "list_segments", "roll_idle",
    "DEFAULT_BLOCK_TIMEOUT", "DEFAULT_FLUSH", "DEFAULT_FLUSH_INTERVAL", "DEFAULT_ON_FULL",
    "DEFAULT_REFUSE_WRITES_RATIO", "DEFAULT_RESUME_RATIO", "DEFAULT_SEGMENT_SIZE", "FLUSH_MODES",
    "MAX_SEGMENT_SIZE", "MIN_SEGMENT_SIZE", "ON_FULL_MODES",
    "CommitLogError", "ArchiveCorruptError", "ArchiveError", "ArchiveMissingError", "CorruptLogError",
    "InvalidArgumentError", "InvalidCommitError", "LogClosedError", "LogLockedError", "LogNotReadableError",
    "LogNotWritableError", "NotALogError", "OffsetOutOfRangeError", "OffsetRemovedError", "ReadOnlyLogError",
    "RecordTooLargeError", "SegmentSizeMismatchError", "StoreFullError", "UnsafeLogFileError",
]


def __dir__() -> list[str]:
    """The public face (`__all__`) and the module's own dunders, not the submodules and internals
    the package also holds."""
    return sorted([*__all__, *(name for name in globals() if name.startswith("__"))])
