"""commitlog: a segmented commit log of fixed-size, preallocated, memory-mapped segment files.

Public API::

    from commitlog import CommitLog, Record, SegmentInfo, StoreFullError, OffsetOutOfRangeError, CorruptLogError

The layout of a log directory (`list_segments`, `is_log_directory`, the file suffixes) and the
defaults of `CommitLog.open()` (`DEFAULT_SEGMENT_SIZE`, `DEFAULT_REFUSE_WRITES_RATIO`, ...) are
exported for the layers above. Importing this package never imports pyspark; `commitlog.spark`
does, on demand.
"""

from .compaction import CompactionOutput, MarksSnapshot
from .diskusage import DiskUsage, disk_usage
from .errors import (CommitLogError, CorruptLogError, InvalidArgumentError, InvalidCommitError,
                     LogClosedError, LogLockedError, LogNotWritableError, NotALogError, OffsetOutOfRangeError,
                     OffsetRemovedError,
                     ReadOnlyLogError, RecordTooLargeError, SegmentSizeMismatchError,
                     StoreFullError)
from .layout import (DELETED_SUFFIX, META_FILE, SegmentFile, SegmentListing, is_log_directory,
                     list_segments, parse_segment_name, segment_name)
from .log import CommitLog
from .options import (DEFAULT_BLOCK_TIMEOUT, DEFAULT_FLUSH, DEFAULT_FLUSH_INTERVAL, DEFAULT_ON_FULL,
                      DEFAULT_REFUSE_WRITES_RATIO, DEFAULT_RESUME_RATIO, DEFAULT_SEGMENT_SIZE,
                      FLUSH_MODES, MAX_SEGMENT_SIZE, MIN_SEGMENT_SIZE, ON_FULL_MODES, LogOptions)
from .record import ATTR_CONTROL, ATTR_DEAD, ATTR_GAP, Record
from .removal import RemovalResult
from .segment import SegmentInfo

__all__ = [
    "ATTR_CONTROL", "ATTR_DEAD", "ATTR_GAP", "DEFAULT_BLOCK_TIMEOUT", "DEFAULT_FLUSH", "DEFAULT_FLUSH_INTERVAL",
    "DEFAULT_ON_FULL", "DEFAULT_REFUSE_WRITES_RATIO", "DEFAULT_RESUME_RATIO",
    "DEFAULT_SEGMENT_SIZE", "DELETED_SUFFIX", "FLUSH_MODES", "MAX_SEGMENT_SIZE", "META_FILE", "MIN_SEGMENT_SIZE",
    "ON_FULL_MODES",
    "CommitLog", "CommitLogError", "CompactionOutput", "MarksSnapshot", "CorruptLogError", "DiskUsage", "InvalidArgumentError",
    "InvalidCommitError", "LogClosedError", "LogLockedError", "LogNotWritableError", "LogOptions", "NotALogError",
    "OffsetOutOfRangeError", "OffsetRemovedError", "ReadOnlyLogError", "Record", "RecordTooLargeError",
    "RemovalResult", "SegmentFile", "SegmentInfo", "SegmentListing", "SegmentSizeMismatchError",
    "StoreFullError", "disk_usage", "is_log_directory", "list_segments", "parse_segment_name",
    "segment_name",
]
