"""commitlog: a segmented commit log of fixed-size, preallocated, memory-mapped segment files.

Public API::

    from commitlog import CommitLog, Record, SegmentInfo, StoreFullError, OffsetOutOfRangeError, CorruptLogError

Importing this package never imports pyspark; `commitlog.spark` does, on demand.
"""

from .diskusage import DiskUsage, disk_usage
from .errors import (CommitLogError, CorruptLogError, InvalidCommitError, LogClosedError,
                     LogLockedError, OffsetOutOfRangeError, ReadOnlyLogError, RecordTooLargeError,
                     SegmentSizeMismatchError, StoreFullError)
from .log import DEFAULT_SEGMENT_SIZE, CommitLog, RemovalResult
from .record import ATTR_CONTROL, ATTR_DEAD, Record
from .segment import DELETED_SUFFIX, SegmentInfo, parse_segment_name, segment_name

__all__ = [
    "ATTR_CONTROL", "ATTR_DEAD", "DEFAULT_SEGMENT_SIZE", "DELETED_SUFFIX",
    "CommitLog", "CommitLogError", "CorruptLogError", "DiskUsage", "InvalidCommitError",
    "LogClosedError", "LogLockedError", "OffsetOutOfRangeError", "ReadOnlyLogError", "Record",
    "RecordTooLargeError", "RemovalResult", "SegmentInfo", "SegmentSizeMismatchError",
    "StoreFullError", "disk_usage", "parse_segment_name", "segment_name",
]
