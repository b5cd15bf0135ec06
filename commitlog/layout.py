"""A log directory's files: every name and suffix the store writes, and the one listing of them.

`LOG_DIRECTORY` is the table of a log directory's files and `CLUSTER_CACHE_DIRECTORY` that of a
cluster log's cache directory on a host (no log: a cache of its archive tier, written through
commitlog.spark.cluster). Anything else in a directory is the user's and never touched. Every name
in the tables is opened through commitlog.safeopen: a symbolic link there is refused, never
followed (`layout_names()` lists the names, an example of each pattern, for the tests that plant
links). Pure names and listings: this module opens nothing but the directory it lists. Thread-
and process-safe (no state).
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from operator import itemgetter
from typing import NamedTuple

from .errors import InvalidArgumentError

SEGMENT_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
INDEX_TMP_SUFFIX = ".index.tmp"
DELETED_SUFFIX = ".deleted"
PREALLOC_PREFIX = ".prepared-segment-"  # then a number and SEGMENT_SUFFIX or INDEX_SUFFIX
STALE_SUFFIX = ".stale"
TMP_SUFFIX = ".tmp"
META_FILE = "meta.json"
STATE_FILE = "state.db"
START_OFFSET_FILE = "start.offset"
LOCK_FILE = ".lock"
REMOVE_LOCK_FILE = ".remove.lock"
COMPACT_LOCK_FILE = ".compact.lock"
RETENTION_LOCK_FILE = ".retention.lock"
HUNG_FILE = ".retention-hung.json"
SPARK_LEDGER_FILE = "spark.db"
SPARK_TURN_FILE = ".spark-append.lock"
DATABASE_FILES = (STATE_FILE, SPARK_LEDGER_FILE)   # SQLite's, each with a -wal and -shm beside it (WAL mode)
MARKS_FILE = "marks"
TOMBSTONES_FILE = "tombstones"
COMPACTED_FILE = "compacted"
CLEANED_SUFFIX = ".cleaned"
ARCHIVE_MANIFEST_FILE = "archive-manifest.json"
DAMAGE_FILE = "damage.json"
DAMAGED_SUFFIX = ".damaged"
ARCHIVE_STATE_FILE = "archive-state.json"
CLUSTER_CACHE_MARKER = "cluster-cache.json"     # a cluster log's cache directory, not a log (second table)
CLUSTER_CACHE_DIR = "cache"
_NAME_DIGITS = 20

LOG_DIRECTORY = """\
    <log>/
        meta.json                       format and segment_size (a directory is a log if it has one)
        start.offset                    the start offset, two slots written in place (commitlog.startoffset)
        start.offset.tmp                start.offset being created
        state.db (-wal, -shm)           consumer commits; a log's start offset before start.offset
        .lock                           the writer's flock, naming its pid (commitlog.locks)
        marks                           offset ranges marked dead (commitlog.marks)
        marks.tmp                       marks being replaced
        tombstones                      when a compaction first saw each tombstone it kept
        compacted                       offset ranges compactions removed whole segments of (commitlog.gaps)
        compacted.tmp                   compacted being replaced
        .remove.lock                    serialises head removers of any process
        .compact.lock                   serialises compactions of any process
        .retention.lock                 the retention owner's flock, naming its pid (retention.deletion.owner)
        .retention-hung.json            segments held by readers, since when (retention.deletion.hung)
        .retention-hung.json.tmp        that file being replaced
        spark.db (-wal, -shm)           the Spark integration's ledger (commitlog.spark.ledger)
        .spark-append.lock              the Spark append turn, a flock (commitlog.spark.writing.append_lock)
        00000000000000000000.log        a segment, named by the 20-digit offset of its first record
        00000000000000000000.index      its sparse index (commitlog.segments.index)
        <segment>.index.tmp             an index being rebuilt (write_sealed's temporary)
        <segment or index>.deleted      renamed by a head removal, about to be unlinked
        .prepared-segment-N.log/.index  prepared ahead by the preallocator (hidden, counts as used)
        .prepared-segment-N.*.stale     a crash's prepared files, set aside at open
        meta.json.tmp                   meta.json being written
        <segment>.log.cleaned           a compaction's output being written (commitlog.cleanup.swap)
        <segment>.index.cleaned         its index; both removed at open when found
        archive-manifest.json           the archive tier's manifest of this log, as last seen (commitlog.archive)
        archive-manifest.json.tmp       that copy being replaced
        damage.json                     damage a writer's open found, and what it kept (commitlog.damage)
        damage.json.tmp                 that record being replaced
        <segment>.log.<byte>.damaged    bytes after damage that could not be given offsets, saved aside
        archive-state.json              the archive tier's identity and when it last confirmed (commitlog.archive.identity)
        archive-state.json.tmp          that state being replaced
"""
"""Every file the store or the sidecar writes in a log directory, one row each: its name (or
pattern) and what it holds. `layout_names()` reads this table."""

CLUSTER_CACHE_DIRECTORY = """\
    <cluster log>/
        cluster-cache.json              marks the directory a cache: the tier URL and the log's name on it
        cache/<key>                     a copy of the tier object `<name>/<key>` kept on this host (such as
                                        a segment a task staged here: cache/staged/<job>/<attempt>/<k>.log)
        cache/<key>.tmp                 that copy being written
"""
"""A cluster log's directory on a host: no log (no meta.json) but a cache of its archive tier."""


def layout_names(damaged_at: int = 0) -> tuple[str, ...]:
    """Every name of the `LOG_DIRECTORY` table, in its order, a pattern given by one example
    (base offset 0, prepared slot 0, byte `damaged_at`: by default the first record's): read from
    the table, so a row added there is listed."""
    rows = LOG_DIRECTORY.split("<log>/\n", 1)[1].splitlines()
    names: list[str] = []
    for row in rows:
        column = re.split(r"\s{2,}", row.strip())[0]
        side = re.fullmatch(r"(\S+) \((.+)\)", column)   # state.db (-wal, -shm)
        found = [side[1]] + [side[1] + s.strip() for s in side[2].split(",")] if side else [column]
        for pattern, examples in (("<segment or index>", (segment_name(0), _index_name(0))),
                                  ("<segment>", (segment_name(0)[:-len(SEGMENT_SUFFIX)],)),
                                  ("<byte>", (str(damaged_at),)), ("-N", ("-0",)),
                                  (".*.", (SEGMENT_SUFFIX + ".", INDEX_SUFFIX + "."))):
            found = [n for f in found for n in ([f.replace(pattern, e, 1) for e in examples]
                                                if pattern in f else [f])]
        for name in found:   # .prepared-segment-0.log/.index
            first, *others = name.split("/")
            names += [first] + [first[:first.rindex(".")] + other for other in others]
    return tuple(names)


def _index_name(base_offset: int) -> str:
    return f"{base_offset:020d}{INDEX_SUFFIX}"


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """The base offset a segment file name encodes, or None for any other name."""
    # Plain string checks: a directory listing of 100,000 segments parses every name each pass.
    if len(name) == 24 and name.endswith(SEGMENT_SUFFIX) and name[:20].isdigit() and name[:20].isascii():
        return int(name[:20])
    return None


def segment_path(directory: str, base_offset: int) -> str:
    return os.path.join(directory, segment_name(base_offset))


def index_path(segment_path: str) -> str:
    """The index beside a segment (`<base>.index` for `<base>.log`)."""
    return segment_path[: -len(SEGMENT_SUFFIX)] + INDEX_SUFFIX


def prepared_stem(directory: str, slot: int) -> str:
    """`<log>/.prepared-segment-N`; add SEGMENT_SUFFIX or INDEX_SUFFIX."""
    return os.path.join(directory, f"{PREALLOC_PREFIX}{slot}")


def archive_manifest_path(directory: str) -> str:
    return os.path.join(directory, ARCHIVE_MANIFEST_FILE)


def damage_path(directory: str) -> str:
    return os.path.join(directory, DAMAGE_FILE)


def damaged_path(segment_path: str, position: int) -> str:
    """`<base>.log.<position>.damaged`: bytes from `position` of a segment, saved aside."""
    return f"{segment_path}.{position}{DAMAGED_SUFFIX}"


def archive_state_path(directory: str) -> str:
    return os.path.join(directory, ARCHIVE_STATE_FILE)


def cluster_cache_file(directory: str) -> str:
    return os.path.join(directory, CLUSTER_CACHE_MARKER)


def cached_object_path(directory: str, key: str) -> str:
    """Where this host keeps its copy of tier object `<name>/<key>` (`key` relative to the log's
    folder, one or more safe path components)."""
    parts = key.split("/")
    if not key or any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts):
        raise InvalidArgumentError(f"no cache path for tier key {key!r}: not relative safe components")
    return os.path.join(directory, CLUSTER_CACHE_DIR, *parts)


def meta_path(directory: str) -> str:
    return os.path.join(directory, META_FILE)


def state_path(directory: str) -> str:
    return os.path.join(directory, STATE_FILE)


def start_offset_path(directory: str) -> str:
    return os.path.join(directory, START_OFFSET_FILE)


def tombstones_path(directory: str) -> str:
    return os.path.join(directory, TOMBSTONES_FILE)


def compacted_path(directory: str) -> str:
    return os.path.join(directory, COMPACTED_FILE)


def compact_lock_path(directory: str) -> str:
    return os.path.join(directory, COMPACT_LOCK_FILE)


def marks_path(directory: str) -> str:
    return os.path.join(directory, MARKS_FILE)


def cleaned_path(path: str) -> str:
    """`<base>.log.cleaned` or `<base>.index.cleaned`: a compaction's output before its swap."""
    return path + CLEANED_SUFFIX


def lock_path(directory: str) -> str:
    return os.path.join(directory, LOCK_FILE)


def remove_lock_path(directory: str) -> str:
    return os.path.join(directory, REMOVE_LOCK_FILE)


def is_log_directory(path: str | os.PathLike) -> bool:
    """True when `path` is a directory holding a log (its meta.json)."""
    return os.path.isfile(meta_path(os.fspath(path)))


# What the store, retention or Spark may create in a log directory before its meta.json: the locks
# taken before the first open writes it, and the meta.json it was writing when a crash came.
_BEFORE_META = frozenset({LOCK_FILE, REMOVE_LOCK_FILE, COMPACT_LOCK_FILE, RETENTION_LOCK_FILE, HUNG_FILE,
                          HUNG_FILE + TMP_SUFFIX, META_FILE + TMP_SUFFIX, SPARK_TURN_FILE, SPARK_LEDGER_FILE,
                          SPARK_LEDGER_FILE + "-wal", SPARK_LEDGER_FILE + "-shm"})


def foreign_names(directory: str) -> list[str]:
    """The names in `directory` that no log writes before its meta.json (a user's files), sorted;
    empty for a directory that is missing, empty, or holds only such leftovers."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(name for name in names if name not in _BEFORE_META)


def _deleted_leftover(name: str) -> bool:
    """`<base>.log.deleted` or `<base>.index.deleted`."""
    if not name.endswith(DELETED_SUFFIX):
        return False
    stem = name[: -len(DELETED_SUFFIX)]
    if stem.endswith(INDEX_SUFFIX):
        stem = stem[: -len(INDEX_SUFFIX)] + SEGMENT_SUFFIX
    return parse_segment_name(stem) is not None


def _index_temporary(name: str) -> bool:
    return name.endswith(INDEX_TMP_SUFFIX) and \
        parse_segment_name(name[: -len(INDEX_TMP_SUFFIX)] + SEGMENT_SUFFIX) is not None


class SegmentFile(NamedTuple):
    """One segment file of a listing. `size` and `mtime` are filled only for the segments the
    caller asked to stat (None otherwise). Immutable (a tuple: 100,000 of them are cheap)."""

    base_offset: int
    path: str
    size: int | None = None
    mtime: float | None = None


@dataclass(frozen=True)
class SegmentListing:
    """One scan of a log directory, oldest segment first. Immutable.

    bases: the base offsets of the regular files named like segments (symlinks and directories
    are never segments). statted: the segments the caller asked to stat (the head, the last), with
    size and mtime. segments: every segment as a SegmentFile, built on first use (a pass over
    100,000 segments needs only `bases` and `statted`).
    foreign: segment-named entries that are not regular files: reported, never read or deleted.
    deleted: `.deleted` leftovers of a removal a crash interrupted.
    temporaries: `<base>.index.tmp` of an interrupted index rebuild.
    below_start: with a start offset given, the segments logically removed already (their
    successor starts at or below it) whose files a removal has not unlinked yet; never statted.

    `interrupted` says whether a removal is left to finish (`.deleted` files or below_start)."""

    path: str
    found: tuple = field(repr=False, compare=False)  # (base, os.DirEntry), oldest first
    statted: tuple[SegmentFile, ...] = ()
    foreign: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    temporaries: tuple[str, ...] = ()
    below_start: tuple[SegmentFile, ...] = ()

    @property
    def interrupted(self) -> bool:
        return bool(self.deleted or self.below_start)

    @cached_property
    def bases(self) -> tuple[int, ...]:
        return tuple(map(_first, self.found))

    @cached_property
    def segments(self) -> tuple[SegmentFile, ...]:
        known = {s.base_offset: s for s in self.statted}
        return tuple(known.get(base) or _new(SegmentFile, (base, entry.path, None, None))
                     for base, entry in self.found)

    def live(self, start_offset: int) -> tuple[SegmentFile, ...]:
        """The segments not yet logically removed: a segment whose successor starts at or below
        `start_offset` holds nothing the log still keeps (its files are about to go)."""
        bases = self.bases
        i = 0
        while i + 1 < len(bases) and bases[i + 1] <= start_offset:
            i += 1
        return self.segments[i:]


_new = tuple.__new__
_first = itemgetter(0)


def list_segments(path: str | os.PathLike, *, stat_head: int | None = None,
                  stat_last: bool = False, start_offset: int | None = None) -> SegmentListing:
    """List the log directory `path` in one scandir, statting only what the caller needs.

    stat_head: stat the oldest `stat_head` segments (None: every segment); stat_last: stat the
    last (active) one as well. A pass that can delete at most N files asks for stat_head=N,
    stat_last=True: N+1 stats whatever the log's length, as Kafka's walker does. start_offset
    (the log's, from its state): segments logically removed already go to `below_start`, and the
    head counted by stat_head starts after them. A segment removed by another process between
    the scan and its stat is left out of the listing. FileNotFoundError when `path` does not
    exist."""
    directory = os.fspath(path)
    found: list[tuple[int, os.DirEntry]] = []
    foreign: list[str] = []
    deleted: list[str] = []
    temporaries: list[str] = []
    with os.scandir(directory) as it:
        for entry in it:
            name = entry.name
            base = parse_segment_name(name)
            if base is None:  # endswith first: every segment's index passes here
                if name.endswith(DELETED_SUFFIX):
                    if _deleted_leftover(name) and entry.is_file(follow_symlinks=False):
                        deleted.append(entry.path)
                elif name.endswith(INDEX_TMP_SUFFIX) and _index_temporary(name) and \
                        entry.is_file(follow_symlinks=False):
                    temporaries.append(entry.path)
                continue
            if entry.is_file(follow_symlinks=False):  # False for a symlink too
                found.append((base, entry))
            else:
                foreign.append(entry.path)  # reported and left alone, never read or deleted
    found.sort(key=_first)
    below: list[SegmentFile] = []
    if start_offset is not None:
        i = 0
        while i + 1 < len(found) and found[i + 1][0] <= start_offset:
            i += 1
        below = [_new(SegmentFile, (base, entry.path, None, None)) for base, entry in found[:i]]
        del found[:i]
    n = len(found)
    head = n if stat_head is None else min(n, max(0, stat_head))
    wanted = list(range(head))
    if stat_last and n > head:
        wanted.append(n - 1)
    statted: list[SegmentFile] = []
    gone: list[int] = []
    for i in wanted:  # only these: a listing of 100,000 segments stats a handful
        base, entry = found[i]
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            gone.append(i)  # removed by another process since the scan
            continue
        statted.append(_new(SegmentFile, (base, entry.path, st.st_size, st.st_mtime)))
    for i in reversed(gone):
        del found[i]
    return SegmentListing(directory, tuple(found), tuple(statted), tuple(foreign), tuple(deleted),
                          tuple(temporaries), tuple(below))


def touch_directory(directory: str) -> None:
    """Move the directory's mtime to now, for a file changed in place there that readers key by
    the directory's times (a sealed segment cut short: retention's change-driven passes look at
    the log again). Best effort: a directory this process may not touch stays as it is."""
    with contextlib.suppress(OSError):
        os.utime(directory, follow_symlinks=False)


def fsync_directory(directory: str) -> None:
    """Make the directory's entries (a rename, a new name, an unlink) survive a power loss."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
