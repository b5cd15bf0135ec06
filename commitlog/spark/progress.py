"""Progress exact to the batch: a listener commits a consumer group once the sink committed a batch.

Spark calls a source's `commit(end)` only when it plans the *next* micro-batch, so the last batch of
a run (`availableNow`, `once`, a stopped query) would never be committed. But Spark posts a
`QueryProgressEvent` after a batch is in the query's commit log (`runBatch` ends with
`markMicroBatchEnd`, then `finishTrigger` posts the event), and the event carries each source's end
offset, which for this source names its log and group (see `reading.stream.position`), and for a
cluster log its tier, where the group's commits go (`commitlog.archive.groups`: the same from every
host). `ProgressListener` commits exactly that offset: what the sink has committed, never more. A driver killed between the
sink's commit and the listener's leaves the group behind (retention keeps more, never less); the
restarted query catches it up (its source commits the start of the first batch it plans, see
`reading.stream`), even with nothing new to read.

The listener runs in the driver's Python process on Spark's single listener-bus thread (through
Py4J), shared by every listener of the application: it does one small commit per changed offset and
never raises (a failure is logged; the query goes on). Thread-safe.
"""

from __future__ import annotations

import json
import logging
import threading
import time

from pyspark.sql.streaming import StreamingQueryListener

from commitlog import CommitLog

from . import tier_log

log = logging.getLogger("commitlog.spark")

_ATTR = "_commitlog_progress_listener"
_lock = threading.Lock()
_installed = 0                                  # sessions with a listener, in this process
_terminated: set[str] = set()                   # run ids whose termination event was handled
_terminated_changed = threading.Condition()


def group_offsets(progress_json: str) -> list[tuple[str, str, int, dict]]:
    """(log path, group, offset, tier fields) for every source of a progress event (its JSON)
    that is a commitlog stream with a group; the tier fields (`tier_log.tier_fields`) are empty
    but for a cluster log. Other sources, and offsets without a group, are ignored."""
    found = []
    for source in json.loads(progress_json).get("sources") or ():
        end = source.get("endOffset")
        if isinstance(end, str):       # Spark gives the offset's JSON as an object or a string
            try:
                end = json.loads(end)
            except ValueError:
                continue
        if isinstance(end, dict) and "commitlog" in end and end.get("group"):
            found.append((str(end["commitlog"]), str(end["group"]), int(end["offset"]),
                          {k: v for k, v in end.items() if k in tier_log.TIER_KEYS}))
    return found


def commit_group(path: str, group: str, offset: int, tier: dict | None = None) -> None:
    """Record `offset` as `group`'s committed offset in the log at `path`, or on its tier when
    `tier` names one (a cluster log)."""
    if tier:
        tier_log.commit_group(tier_log.tier_options(path, tier), group, offset)
        return
    with CommitLog.open(path, readonly=True) as clog:
        clog.commit(group, offset)


class ProgressListener(StreamingQueryListener):
    """Commits each commitlog source's group at the end offset of every batch the sink committed.
    Installed once per session by `register(spark)`."""

    def __init__(self) -> None:
        self._done: dict[tuple[str, str], int] = {}   # last offset committed per (log, group)

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        try:
            self.handle(event.progress.json)
        except Exception:   # noqa: BLE001 - a listener must never break the query or the bus
            log.warning("commitlog progress listener: could not read a progress event",
                        exc_info=True)

    def onQueryTerminated(self, event) -> None:
        with _terminated_changed:
            _terminated.add(str(event.runId))
            _terminated_changed.notify_all()

    def handle(self, progress_json: str) -> None:
        """Commit the groups of one progress event (its JSON); log, never raise, on failure."""
        for path, group, offset, tier in group_offsets(progress_json):
            if self._done.get((path, group)) == offset:
                continue     # idle triggers repeat the same end offset
            try:
                commit_group(path, group, offset, tier)
            except Exception:   # noqa: BLE001 - logged; the next event or restart catches up
                log.warning("commitlog progress listener: could not commit offset %d for "
                            "consumer group %r of %s", offset, group, path, exc_info=True)
                continue
            self._done[(path, group)] = offset
            log.info("consumer group %s of %s committed offset %d (sink committed)", group,
                     path, offset)


def install(spark) -> ProgressListener:
    """The session's listener, added to `spark.streams` on the first call."""
    with _lock:
        listener = getattr(spark, _ATTR, None)
        if listener is None:
            global _installed
            listener = ProgressListener()
            spark.streams.addListener(listener)
            setattr(spark, _ATTR, listener)
            _installed += 1
        return listener


def await_termination(query, timeout: float | None = None, *, settle: float = 10.0) -> bool:
    """`query.awaitTermination(timeout)`, then wait (up to `settle` seconds) until the progress
    listener has committed the query's last batch: Spark delivers listener events asynchronously,
    so a program that exits right after `awaitTermination` could otherwise leave its last batch
    uncommitted. Returns whether the query terminated; re-raises its failure."""
    try:
        done = query.awaitTermination(timeout) if timeout is not None else \
            (query.awaitTermination() or True)
    finally:
        if _installed and not query.isActive and not _wait_terminated(str(query.runId), settle):
            log.warning("commitlog progress listener: query %s terminated but its last events "
                        "were not delivered within %gs", query.runId, settle)
    return bool(done)


def _wait_terminated(run_id: str, timeout: float) -> bool:
    """Wait until the termination event of query run `run_id` was handled (Spark delivers every
    progress event of the run before it); False on timeout."""
    deadline = time.monotonic() + timeout
    with _terminated_changed:
        while run_id not in _terminated:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            _terminated_changed.wait(left)
        return True
