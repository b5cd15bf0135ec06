"""Errors of the Spark staging layer. All are `CommitLogError`s, so callers catching the store's
family catch these too; the ones about a bad argument are also `ValueError`s."""

from __future__ import annotations

from commitlog import CommitLogError


class StagingError(CommitLogError):
    """Base of the errors the Spark staging layer raises on purpose."""


class SchemaMismatchError(StagingError, ValueError):
    """A DataFrame whose schema cannot be appended to (or read as) the log's recorded schema."""


class NoSchemaError(StagingError):
    """The log has no recorded schema yet: nothing was ever staged through Spark."""


class OverwriteNotSupportedError(StagingError, ValueError):
    """mode("overwrite") on a log, which is append-only."""


class OptionError(StagingError, ValueError):
    """A missing or malformed data source option; names the option."""


class JobStateError(StagingError):
    """A job or writer is not in the state an operation needs (e.g. committing an abandoned job)."""


class WriterTurnTimeout(StagingError):
    """A task waited longer than `lockTimeout` for its turn to append to the log."""


class DataLossError(StagingError):
    """Offsets a stream still needed were removed by retention (`failOnDataLoss=true`)."""

    def __init__(self, path: str, lost_from: int, lost_to: int, group: str | None) -> None:
        who = f" (consumer group {group!r})" if group else ""
        super().__init__(
            f"offsets [{lost_from}, {lost_to}) of commit log {path} were removed by retention "
            f"before the stream{who} read them: {lost_to - lost_from} offset(s) lost; the log now "
            f"starts at offset {lost_to}. Set option failOnDataLoss=false to skip the lost range.")
        self.path = path
        self.lost_from = lost_from
        self.lost_to = lost_to
        self.group = group


# What lets a task on any host go on, by what it was doing (docs/spark-cluster.md, docs/archive.md).
_WAY_OUT = {
    "write": "To write from any host, give the option `archive` (an archive tier every host reaches: "
             "the log becomes a cluster log, see docs/spark-cluster.md)",
    "read": "To read from any host, give the option `archive` (its archived part, or a cluster "
            "log, is read from the tier: see docs/spark-cluster.md)",
}


class WrongHostError(StagingError):
    """A Spark task runs on another host than the driver that planned the read or write: the log
    lives on one host's disk, and a second log at the same path elsewhere would split it."""

    def __init__(self, path: str, planned_on: str, running_on: str, what: str) -> None:
        super().__init__(
            f"commit log {path} is on host {planned_on!r}, where this {what} was planned, but "
            f"this Spark task runs on host {running_on!r}: a log is read and written on its own "
            f"host only. {_WAY_OUT.get(what, _WAY_OUT['read'])}, or use Spark in local mode, or a "
            f"cluster whose single worker is that host")
        self.path = path
        self.planned_on = planned_on
        self.running_on = running_on


class ClusterCommitError(StagingError):
    """A cluster write's commit through the archive tier could not complete: a staged object is
    missing or differs, the job's commit deadline passed, or too many other commits won the race
    for the next manifest version. Nothing of the job is visible."""
