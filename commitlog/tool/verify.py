"""`commitlog verify PATH`: every record of every segment read and its CRC checked, and each
segment's index checked against the data it describes (its header's used bytes, record count and
timestamps, every entry pointing at the record of its offset, the base offset it records, its
CRC). The first problem of each file is named by file and byte; nothing is repaired or written.

The last segment is the active one unless its index is sealed (a time-based roll): bytes there
that do not verify with nothing verifying after them are a torn write (a crash cut it; the
writer's next open cuts it, commitlog.append.mending.torn_write), a note, not a problem; with a
writer appending, a record caught in flight is read again once. A sealed segment's index that
is missing or was never sealed is a note too: the store rebuilds it from the data.

Offsets missing between segments (or between the start offset and the first segment) are a
problem unless a compaction recorded removing them, and so is a segment whose name lies inside
the offsets of a full-size segment before it: the readers' rules (commitlog.gaps,
commitlog.segments.gapcheck). Anything but a regular file at a segment's or an index's name (a
directory, a FIFO, a symbolic link) is a problem, never opened or followed.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
import time
from typing import NamedTuple

from .. import damage, gaps
from .. import record as rec
from ..append.mending import torn_write
from ..errors import CommitLogError, CorruptLogError, UnsafeLogFileError
from ..layout import index_path, list_segments, segment_name, segment_path
from ..locks import writer_holder
from ..log import CommitLog
from ..meta import load_meta
from ..safeopen import open_file
from ..segments import index as ix

__all__ = ["render_verify", "verify_log"]

_IN_FLIGHT_WAIT = 0.2     # seconds before reading a writer's last record again
# Header fields checked against the data, in file order: (name, byte, struct format).
_FIELDS = (("used bytes", 8, "<Q"), ("record count", 16, "<Q"), ("first timestamp", 24, "<q"),
           ("last timestamp", 32, "<q"))


class _Walk(NamedTuple):
    """A segment read record by record: where it stopped (`position`, what decode_at found there),
    offsets spanned, records, first and last timestamps, and the first index entry that does not
    point at the record of its offset (its byte in the index file and why), if any."""

    position: int
    status: int
    count: int
    records: int
    first_ts: int
    last_ts: int
    entry_problem: tuple[int, str] | None


class _Index(NamedTuple):
    raw: bytes
    sealed: bool
    entries: list[tuple[int, int, int]]     # (byte in the index file, relative offset, position)


def verify_log(path: str) -> dict:
    """{"log", "segments", "records", "problems": [{"file", "byte", "detail"}], "notes": [...]}
    for the log directory `path` (checked by the caller to be one)."""
    problems: list[dict] = []
    notes: list[str] = []
    start, writer_held = _open_check(path, problems)
    try:
        segment_size = load_meta(path, None, create=False)
    except CommitLogError as exc:
        problems.append(_problem(getattr(exc, "path", path), getattr(exc, "position", None), str(exc)))
        return _result(path, 0, 0, problems, notes)
    listing = list_segments(path)
    problems += [_problem(p, None, f"{_kind(p)} at a segment's name, not a regular file (never read)")
                 for p in listing.foreign]
    bases = listing.bases
    checked = records = 0
    ends: dict[int, int | None] = {}   # base -> end offset when read whole, None when not
    full: set[int] = set()             # bases of full-size segments: never a compaction's output
    for i, base in enumerate(bases):
        if i + 1 < len(bases) and bases[i + 1] <= start:
            continue   # logically removed already, its files not yet unlinked
        ends[base] = None
        try:
            read, ends[base] = _check_segment(os.path.join(path, segment_name(base)), base,
                                              i + 1 == len(bases), writer_held, problems, notes)
            records += read
            checked += 1
            if os.lstat(os.path.join(path, segment_name(base))).st_size == segment_size:
                full.add(base)
        except FileNotFoundError:
            notes.append(f"{segment_name(base)} was removed while verifying")
    _gap_problems(path, ends, problems)
    _overlap_problems(path, ends, full, problems)
    notes += [f"{damage.DAMAGE_FILE}: {damage.describe(e)}" for e in damage.read_damage(path)]
    return _result(path, checked, records, problems, notes)


def _open_check(path: str, problems: list[dict]) -> tuple[int, bool]:
    """The log's start offset and whether a writer holds it, from a read-only open; what the open
    finds corrupt (its consumer state, a renamed segment) is a problem."""
    try:
        with CommitLog.open(path, readonly=True) as log:
            log.committed()
            start = log.start_offset
            log.retention_start_offset   # an unrecorded gap before the first segment: CorruptLogError
    except CorruptLogError as exc:
        problems.append(_problem(exc.path, exc.position, exc.reason))
        start = 0
    return start, writer_holder(path) is not None


def _gap_problems(path: str, ends: dict[int, int | None], problems: list[dict]) -> None:
    """Add a problem for each gap between the segments of `ends` (base -> end offset, None for a
    segment not read whole) that no compaction recorded removing, as a reader would refuse it."""
    try:
        ranges = gaps.read(path)
    except CommitLogError as exc:
        found = _problem(getattr(exc, "path", path), getattr(exc, "position", None), str(exc))
        if all(p["file"] != found["file"] for p in problems):
            problems.append(found)
        return
    reach = before = None
    for base, end in ends.items():
        missing = ranges.unrecorded(reach, base) if reach is not None else None
        if missing is not None:
            problems.append(_problem(segment_path(path, base), None, (
                f"offsets [{missing[0]}, {missing[1]}) are missing before this segment after "
                f"{segment_name(before)}: no compaction recorded removing them (a segment file "
                f"deleted or renamed outside the store?)")))
        # a compaction's output may reach past its swap's leftovers: the furthest end counts
        reach = None if end is None else end if reach is None else max(reach, end)
        before = base


def _overlap_problems(path: str, ends: dict[int, int | None], full: set[int],
                      problems: list[dict]) -> None:
    """Add a problem for each segment whose base lies below the end of a full-size segment before
    it, as a reader refuses it (commitlog.segments.gapcheck.overlap): only a compaction's shorter
    output may cover the files after it (its swap's leftovers)."""
    bases = list(ends)
    for before, after in zip(bases, bases[1:]):
        end = ends[before]
        if before in full and end is not None and end > after:
            problems.append(_problem(segment_path(path, after), None, (
                f"its name says offset {after}, but {segment_name(before)} (full size, not a "
                f"compaction's output) holds offsets up to {end}: a segment file renamed outside "
                f"the store?")))


def _kind(path: str) -> str:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "something removed since"
    return ("a directory" if stat.S_ISDIR(mode) else "a symbolic link" if stat.S_ISLNK(mode)
            else "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISBLK(mode) or stat.S_ISCHR(mode) else "a special file")


def _problem(file: str, byte: int | None, detail: str) -> dict:
    return {"file": os.path.basename(file), "byte": byte, "detail": detail}


def _result(path: str, checked: int, records: int, problems: list[dict], notes: list[str]) -> dict:
    return {"log": path, "segments": checked, "records": records, "ok": not problems,
            "problems": problems, "notes": notes}


def _check_segment(path: str, base: int, last: bool, writer_held: bool, problems: list[dict],
                   notes: list[str]) -> tuple[int, int | None]:
    """Check segment `path` and its index; add what is wrong; return the records read and the
    segment's end offset (None when it could not be read to its end)."""
    name = os.path.basename(path)
    ipath = index_path(path)
    foreign_index = False
    try:
        index = _read_index(ipath)
    except _NotRegular:
        foreign_index = True
        problems.append(_problem(ipath, None, f"{_kind(ipath)} at an index's name, not a regular file "
                                              f"(never read)"))
        index = None
    sealed = index is not None and index.sealed
    fd = open_file(path, os.O_RDONLY | os.O_NONBLOCK)   # a FIFO put there since the listing: no wait
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            problems.append(_problem(path, None, f"{_kind(path)} at a segment's name, not a regular file"))
            return 0, None
        mm = mmap.mmap(fd, st.st_size, access=mmap.ACCESS_READ) if st.st_size else b""
    finally:
        os.close(fd)
    try:
        entries = index.entries if index is not None else []
        walk = _walk(mm, st.st_size, entries)
        if walk.status == rec.BAD and last and not sealed and writer_held:
            time.sleep(_IN_FLIGHT_WAIT)    # a record being copied in: read it again once
            walk = _walk(mm, st.st_size, entries)
        if walk.status == rec.BAD:
            if last and not sealed and torn_write(mm, st.st_size, walk.position):
                notes.append(f"{name}: byte {walk.position}: a torn write after offset "
                             f"{base + walk.count - 1} (the writer's next open cuts it)")
            else:
                problems.append(_problem(path, walk.position, _bad_record(mm, st.st_size, walk.position,
                                                                          base + walk.count)))
                return walk.records, None
    finally:
        if isinstance(mm, mmap.mmap):
            mm.close()
    found = None if foreign_index else _index_problem(index, base, walk, st.st_ino, last)
    if isinstance(found, str):
        notes.append(f"{os.path.basename(ipath)}: {found}")
    elif found is not None:
        problems.append(_problem(ipath, *found))
    return walk.records, base + walk.count


def _bad_record(mm, size: int, pos: int, offset: int) -> str:
    length = rec.LENGTH.unpack_from(mm, pos)[0] if pos + rec.LENGTH_SIZE <= size else 0
    end = pos + rec.FRAME_SIZE + length
    if length < rec.BODY_HEAD_SIZE or end > size:
        return (f"the record of offset {offset} has a length field of {length}, out of bounds: no "
                f"record from here on can be read")
    return f"the record of offset {offset} (bytes {pos}-{end - 1}) does not verify: its CRC32 does not match"


def _walk(mm, size: int, entries: list[tuple[int, int, int]]) -> _Walk:
    """Read `mm[:size]` record by record from byte 0, as commitlog.segments.sealed.scan_segment
    counts offsets, checking `entries` on the way."""
    decode = rec.decode_at
    pos = count = records = first_ts = last_ts = 0
    ei, problem = 0, None
    while True:
        while ei < len(entries) and entries[ei][2] < pos:
            at, rel, epos = entries[ei]
            problem = problem or (at + 4, f"entry {ei} points at byte {epos}, inside a record, not at one")
            ei += 1
        r = decode(mm, pos, size)
        if r.status != rec.OK:
            break
        if ei < len(entries) and entries[ei][2] == pos:
            if entries[ei][1] != count and problem is None:
                problem = (entries[ei][0], f"entry {ei} says relative offset {entries[ei][1]} is at byte "
                           f"{pos}, where the data holds relative offset {count}")
            ei += 1
        if r.attributes & rec.ATTR_GAP:
            count += rec.gap_span(mm, r.value_start)
        else:
            if not records:
                first_ts = r.timestamp_ms
            last_ts = r.timestamp_ms
            records += 1
            count += r.delta + 1
        pos = r.next_position
    return _Walk(pos, r.status, count, records, first_ts, last_ts, problem)


class _NotRegular(Exception):
    """Something other than a regular file at an index's name."""


def _read_index(path: str) -> _Index | None:
    """The index file `path`; None when missing; _NotRegular for a FIFO, directory, device."""
    try:
        fd = open_file(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except (IsADirectoryError, UnsafeLogFileError):
        raise _NotRegular from None
    with open(fd, "rb", closefd=True) as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _NotRegular
        raw = f.read()
    sealed = len(raw) >= ix.HEADER_SIZE and raw[:4] == ix.MAGIC and \
        bool(struct.unpack_from("<H", raw, 6)[0] & ix.FLAG_SEALED)
    limit = len(raw)
    if sealed:
        limit = min(limit, ix.HEADER_SIZE + ix.ENTRY.size * struct.unpack_from("<I", raw, 48)[0])
    entries = []
    for at in range(ix.HEADER_SIZE, limit - ix.ENTRY.size + 1, ix.ENTRY.size):
        rel, pos = ix.ENTRY.unpack_from(raw, at)
        if pos == 0 and not sealed:
            break      # an active index's entries end at the first empty one
        entries.append((at, rel, pos))
    return _Index(raw, sealed, entries)


def _index_problem(index: _Index | None, base: int, walk: _Walk, ino: int, last: bool):
    """(byte, detail) of the first thing in the index that the data contradicts; a note (str) for
    an index the store would rebuild; None when it agrees."""
    if index is None:
        return None if last else "missing (the store rebuilds it from the segment when it reads it)"
    raw = index.raw
    if not index.sealed:
        head = raw[:ix.HEADER_SIZE]
        if not any(head):
            if last:   # the active segment's index: its checkpoints within the data must agree
                return _entry_problem(index, walk, sealed=False)
            return "never sealed (the store rebuilds it from the segment when it reads it)"
        first = next((i for i in range(min(6, len(head))) if head[i] != (ix.MAGIC + b"\x01\x00")[i]), 6)
        return first, "the header is damaged: " + ("its magic or version is wrong" if first < 6
                                                   else "its flags say it is not sealed")
    expected = {"used bytes": walk.position, "record count": walk.count,
                "first timestamp": walk.first_ts, "last timestamp": walk.last_ts}
    for name, at, fmt in _FIELDS:
        if name.endswith("timestamp") and not walk.records:
            continue
        want = struct.pack(fmt, expected[name])
        if raw[at:at + len(want)] != want:
            byte = at + next(i for i in range(len(want)) if raw[at + i] != want[i])
            return byte, f"its {name} reads {struct.unpack_from(fmt, raw, at)[0]}, the data says {expected[name]}"
    flags = struct.unpack_from("<H", raw, 6)[0]
    if flags & ix.FLAG_COMPACTED and ix.EXTRA.unpack_from(raw, ix.HEADER.size)[0] != ino & 0xFFFFFFFF:
        return ix.HEADER.size, "it names another data file (a compaction's swap interrupted?)"
    found = _entry_problem(index, walk, sealed=True)
    if found is not None:
        return found
    end = ix.HEADER_SIZE + ix.ENTRY.size * len(index.entries)
    if flags & ix.FLAG_BASE and raw[end:end + ix.BASE.size] != ix.BASE.pack(base):
        return end, f"it records base offset {ix.BASE.unpack_from(raw, end)[0] if len(raw) >= end + 8 else '?'}, " \
                    f"its name says {base}"
    if ix.parse_sealed(raw) is None:
        return ix.HEADER.size - 4, "its CRC32 does not match the header and entries it covers"
    return None


def _entry_problem(index: _Index, walk: _Walk, *, sealed: bool):
    if walk.entry_problem is not None:
        return walk.entry_problem
    beyond = [e for e in index.entries if e[2] >= walk.position]
    if sealed and beyond:
        return beyond[0][0], f"an entry points at byte {beyond[0][2]}, past the last record (byte {walk.position})"
    return None


def render_verify(data: dict) -> str:
    lines = [f"{data['log']}/{p['file']}: " + (f"byte {p['byte']}: " if p["byte"] is not None else "")
             + p["detail"] for p in data["problems"]]
    lines += [f"note: {note}" for note in data["notes"]]
    n = data["segments"]
    lines.append(f"log {data['log']}: {n} segment{'s' if n != 1 else ''}, {data['records']} records read: "
                 + ("every record's CRC and every index agree" if data["ok"]
                    else f"{len(data['problems'])} damaged file{'s' if len(data['problems']) != 1 else ''}"))
    return "\n".join(lines)
