"""Compaction's rewrite and swap (commitlog.cleanup.rewrite, commitlog.cleanup.swap): same records at the same
offsets, gaps, refusals, crash safety at every file-system step, readers in other processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from cl_helpers import child_env, value_for
from cx_helpers import assert_one_file_per_offset, key_of, keyed_decide, marked_by_writer

from commitlog import (CommitLog, CorruptLogError, InvalidArgumentError, OffsetOutOfRangeError,
                       OffsetRemovedError, StoreFullError)
from commitlog import record as rec
from commitlog.record import ATTR_DEAD
from commitlog.layout import CLEANED_SUFFIX

SEG = 16 * 1024


def fill(log: CommitLog, n: int) -> None:
    for o in range(log.end_offset, log.end_offset + n):
        log.append(value_for(o, 300), key=key_of(o), timestamp_ms=1_600_000_000_000 + o)


def expected_live(end: int, marked) -> dict[int, tuple]:
    """Offset -> (key, value) of every record the keyed rule must keep."""
    newest: dict[bytes, int] = {}
    for o in range(end):
        if key_of(o) is not None and o not in marked:
            newest[key_of(o)] = o
    return {o: (key_of(o), value_for(o, 300)) for o in range(end)
            if o not in marked and (key_of(o) is None or newest[key_of(o)] == o)}


def check_no_overlap(path: str) -> None:
    with CommitLog.open(path, readonly=True) as log:
        assert_one_file_per_offset(log)


def test_compaction_keeps_the_same_records_at_the_same_offsets(tmp_path):
    path = str(tmp_path / "log")
    with CommitLog.open(path, segment_size=SEG) as log:
        fill(log, 600)
        marked = {o for o in range(600) if o % 7 == 0}
        assert log.mark_dead(sorted(marked)) == len(marked)
        before = {r.offset: r for r in log.scan()}
        sealed = [s.base_offset for s in log.segments()[:-1]]
        marks, decide = keyed_decide(log)
        outs = log.compact([sealed[:3], sealed[3:4]], decide, marks=marks)
        assert [o.inputs for o in outs] == [tuple(sealed[:3]), (sealed[3],)]
        assert all(o.bytes_after < o.bytes_before for o in outs)
        # bytes_after is the output file's size, its end marker included
        assert [o.bytes_after for o in outs] == [os.path.getsize(s.path) for s in log.segments()[:2]]
        assert sum(o.dropped["dead"] for o in outs) == len([m for m in marked if m < sealed[4]])
        after = {r.offset: r for r in log.scan()}
        live = expected_live(log.end_offset, marked)
        assert set(live) <= set(after) <= set(before)
        assert all(after[o] == before[o] for o in after)  # timestamps, keys, values, attributes
        assert {o for o in after if o < sealed[4]} == {o for o in live if o < sealed[4]}
        infos = log.segments()
        assert infos[0].base_offset == sealed[0] and infos[0].end_offset == sealed[3]
        assert infos[0].size < SEG and infos[0].live_bytes == infos[0].used_bytes
        for o in range(sealed[0], sealed[4]):
            if o in after:
                assert log.read(o) == after[o]
            else:
                with pytest.raises(OffsetRemovedError) as err:
                    log.read(o)
                assert err.value.next_offset == min(x for x in after if x > o)
        assert list(log.scan(sealed[0] + 1, sealed[0] + 40)) == \
            [after[o] for o in sorted(after) if sealed[0] + 1 <= o < sealed[0] + 40]
    check_no_overlap(path)
    with CommitLog.open(path) as log:  # reopened: the compacted files are legitimate
        assert {r.offset: r for r in log.scan()} == after
        fill(log, 10)


def test_a_run_with_nothing_live_disappears_and_leaves_a_gap(tmp_path):
    path = str(tmp_path / "log")
    with CommitLog.open(path, segment_size=SEG) as log:
        fill(log, 300)
        segs = log.segments()
        doomed = segs[1]
        log.mark_dead(range(doomed.base_offset, doomed.end_offset))
        out, = log.compact([[doomed.base_offset]], lambda o, k, t, m: "dead" if m else None)
        assert out.segment is None and out.bytes_after == 0 and out.kept == 0
        assert not os.path.exists(doomed.path)
        offsets = [r.offset for r in log.scan()]
        assert offsets == [o for o in range(300) if not doomed.base_offset <= o < doomed.end_offset]
        with pytest.raises(OffsetRemovedError, match=f"next offset that still exists is {doomed.end_offset}"):
            log.read(doomed.base_offset + 3)
    with CommitLog.open(path) as log:
        assert [r.offset for r in log.scan()] == offsets


def test_compaction_refuses_the_active_segment_and_runs_not_consecutive(tmp_path):
    with CommitLog.open(str(tmp_path / "log"), segment_size=SEG) as log:
        fill(log, 300)
        bases = [s.base_offset for s in log.segments()]
        keep = lambda o, k, t, m: None  # noqa: E731
        for runs, what in (([[bases[-1]]], "active"), ([[bases[0], bases[2]]], "consecutive"),
                           ([[bases[0] + 1]], "not a segment"), ([[]], "at least one")):
            with pytest.raises(InvalidArgumentError, match=what):
                log.compact(runs, keep)
        assert [s.base_offset for s in log.segments()] == bases


def test_compaction_refuses_to_start_without_room_for_output_and_a_segment(small_fs):
    path = os.path.join(small_fs, "log")
    seg = 1 << 20
    with CommitLog.open(path, segment_size=seg, refuse_writes_ratio=None) as log:
        while len(log.segments()) < 4:
            fill(log, 500)
        free = lambda: os.statvfs(small_fs).f_bavail * os.statvfs(small_fs).f_frsize  # noqa: E731
        with open(os.path.join(small_fs, "ballast"), "wb") as f:
            while free() > seg:  # the preparing thread takes its share meanwhile: step by step
                f.write(bytes(64 * 1024))
                f.flush()
        bases = [s.base_offset for s in log.segments()]
        with pytest.raises(StoreFullError, match="no room to compact"):
            log.compact([bases[:2]], lambda o, k, t, m: None)
        assert [s.base_offset for s in log.segments()] == bases
        assert not [n for n in os.listdir(path) if n.endswith(CLEANED_SUFFIX)]


def crash_fixture_log(path: str) -> tuple[set[int], dict]:
    """900 records; every keyed record but its key's newest marked dead, and one segment marked
    whole: compactions merge (little is live) and one output is empty (inputs unlinked)."""
    with CommitLog.open(path, segment_size=SEG) as log:
        fill(log, 900)
        newest = {key_of(o): o for o in range(900) if key_of(o) is not None}
        marked = {o for o in range(900) if key_of(o) is not None and newest[key_of(o)] != o}
        third = log.segments()[2]
        marked |= set(range(third.base_offset, third.end_offset))
        log.mark_dead(sorted(marked))
        return marked, {r.offset: r for r in log.scan()}


CRASH_STEPS = 66  # file-system calls of the first round of cx_compactor on crash_fixture_log (5: creating `compacted`)


def test_the_crash_fixture_makes_that_many_steps_with_merges_and_an_empty_output(tmp_path):
    path = str(tmp_path / "log")
    crash_fixture_log(path)
    code = ("import os, cx_helpers\n"
            "calls = []\n"
            "for name in ('rename', 'unlink', 'fsync', 'write', 'replace', 'utime'):\n"
            "    f = getattr(os, name)\n"
            "    setattr(os, name, lambda *a, _f=f, _n=name, **k: (calls.append(_n), _f(*a, **k))[1])\n"
            f"cx_helpers.cx_compactor({path!r}, rounds=1, fill=0.9)\n"
            "print(calls)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True,
                          text=True, timeout=60)
    calls = eval(proc.stdout.splitlines()[-1])
    assert len(calls) == CRASH_STEPS and "unlink" in calls and calls.count("rename") > 2


@pytest.mark.parametrize("kill_at", range(1, CRASH_STEPS + 1))
def test_a_compaction_killed_at_any_step_leaves_old_or_new_for_every_offset(tmp_path, kill_at):
    """The compactor SIGKILLs itself at its Nth rename/unlink/fsync/write/utime call; the next
    open serves every live record, from exactly one file."""
    path = str(tmp_path / "log")
    marked, before = crash_fixture_log(path)
    code = f"import cx_helpers; cx_helpers.cx_compactor({path!r}, kill_at={kill_at}, fill=0.9)"
    proc = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True,
                          timeout=60)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    with CommitLog.open(path) as log:
        after = {r.offset: r for r in log.scan()}
        assert set(expected_live(900, marked)) <= set(after) <= set(before)
        assert all(after[o] == before[o] for o in after)
    check_no_overlap(path)


def test_a_reader_in_another_process_finishes_a_segment_replaced_under_it(tmp_path):
    path = str(tmp_path / "log")
    with CommitLog.open(path, segment_size=SEG) as log:
        fill(log, 600)
        want = [[r.offset, r.key.decode() if r.key else None, bytes(r.value).hex()] for r in log.scan()]
        first = log.segments()[0]
    code = ("import sys, json; from commitlog import CommitLog\n"
            f"log = CommitLog.open({path!r}, readonly=True)\n"
            "it = iter(log.scan())\n"
            "got = [next(it)]\n"
            "print('inside', flush=True); sys.stdin.readline()\n"
            "got += list(it)\n"
            "print(json.dumps([[r.offset, r.key.decode() if r.key else None, bytes(r.value).hex()] for r in got]))\n")
    proc = subprocess.Popen([sys.executable, "-c", code], env=child_env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "inside"
        with CommitLog.open(path, readonly=True) as log:
            bases = [s.base_offset for s in log.segments()[:-1]]
            marks, decide = keyed_decide(log)
            out, = log.compact([bases[:2]], decide, marks=marks)
            assert out.segment == first.base_offset
            assert os.stat(first.path).st_size < SEG  # replaced while the child holds the old file
        proc.stdin.write("\n")
        proc.stdin.flush()
        got = json.loads(proc.stdout.readline())
        assert proc.wait(30) == 0
    finally:
        proc.kill()
    # Inside the replaced segment it read the old file to its end, then went on.
    assert got[:len([w for w in want if w[0] < bases[1]])] == [w for w in want if w[0] < bases[1]]
    assert got[-1] == want[-1]
    with CommitLog.open(path, readonly=True) as log:  # a reader starting now sees the new file
        offsets = [r.offset for r in log.scan()]
        assert offsets == sorted(set(offsets)) and len(offsets) < len(want)


def test_read_of_an_offset_below_every_segment_after_compaction_is_out_of_range(tmp_path):
    with CommitLog.open(str(tmp_path / "log"), segment_size=SEG) as log:
        fill(log, 300)
        first = log.segments()[0]
        log.mark_dead(range(first.base_offset, first.end_offset))
        log.compact([[first.base_offset]], lambda o, k, t, m: "dead" if m else None)
        assert log.start_offset == first.end_offset
        with pytest.raises(OffsetOutOfRangeError):
            log.read(0)


def test_a_handle_that_knew_the_merged_inputs_finds_their_records_in_the_output(tmp_path):
    path = str(tmp_path / "log")
    with CommitLog.open(path, segment_size=SEG) as writer:
        fill(writer, 600)
        infos = writer.segments()
        kept = infos[1].base_offset + 5  # a record of the second input
        assert writer.read(kept).offset == kept  # the writer's handle caches both inputs
        with CommitLog.open(path, readonly=True) as other:
            marks, decide = keyed_decide(other)
            other.compact([[infos[0].base_offset, infos[1].base_offset]],
                          lambda o, k, t, m: None if o == kept else "dead", marks=marks)
        assert not os.path.exists(infos[1].path)
        assert writer.read(kept).offset == kept
        assert [r.offset for r in writer.scan(0, infos[2].base_offset)] == [kept]
        with pytest.raises(OffsetRemovedError, match=f"next offset that still exists is {kept}"):
            writer.read(infos[0].base_offset)
        fill(writer, 10)


def test_offsets_before_the_first_segment_after_the_head_was_compacted_away(tmp_path):
    path = str(tmp_path / "log")
    value = b"v" * 979                                   # 1000 bytes framed: four records a segment
    with CommitLog.open(path, segment_size=4096, flush="none") as log:
        for _ in range(14):
            log.append(value)                            # segments 0, 4, 8, active 12
        superseded = {0, 1, 2, 3, 4}                     # the head vanishes, 4 dropped unmarked
        outs = log.compact([[0], [4]], lambda o, k, t, m: "superseded" if o in superseded else None)
        assert [o.segment for o in outs] == [None, 4]
        assert log.start_offset == 4
        for offset in (0, 2, 4):
            with pytest.raises(OffsetRemovedError, match="removed by a compaction.*next offset that "
                                                         "still exists is 5") as ei:
                log.read(offset)
            assert (ei.value.offset, ei.value.next_offset) == (offset, 5)
        # A consumer committed inside the vanished head resumes at the next record, no error.
        assert [r.offset for r in log.scan(2, 7)] == [5, 6]
        assert log.remove_head().new_start_offset == 8       # retention removes 4: its start now
        for offset in (2, 5):
            with pytest.raises(OffsetOutOfRangeError, match="removed by retention; the log now starts "
                                                            "at offset 8") as ei:
                log.read(offset)
            assert not isinstance(ei.value, OffsetRemovedError)
            with pytest.raises(OffsetOutOfRangeError, match="now starts at offset 8"):
                next(iter(log.scan(offset)))


def _facts_by_decode_at(log: CommitLog, marks, lo: int, hi: int) -> list[tuple]:
    """record_facts as record.decode_at and the marks snapshot define it: the reference."""
    out = []
    for info in log.segments():
        data = open(info.path, "rb").read()
        pos, current = 0, info.base_offset
        while True:
            r = rec.decode_at(data, pos, info.used_bytes)
            if r.status != rec.OK:
                break
            if r.attributes & rec.ATTR_GAP:
                current += rec.gap_span(data, r.value_start)
            else:
                current += r.delta
                if lo <= current < hi:
                    key = None if r.key_start < 0 else data[r.key_start:r.key_end]
                    out.append((current, key, r.value_start == r.value_end,
                                bool(r.attributes & rec.ATTR_DEAD) or marks.is_marked(current)))
                current += 1
            pos = r.next_position
    return out


def test_record_facts_walk_agrees_with_decode_at_over_deltas_gaps_dead_records_and_bounds(tmp_path):
    """record_facts walks segments inline (the keyed pass's index is built from it): the same
    facts as decode_at gives, over records written dead, marked ones, tombstones, keyless ones,
    offset deltas and gap-ended outputs, whatever the bounds; a damaged sealed record is
    CorruptLogError naming the file."""
    path = str(tmp_path / "log")
    with CommitLog.open(path, segment_size=SEG) as log:
        for o in range(700):
            value = b"" if o % 13 == 0 else value_for(o, 300)
            log.append(value, key=key_of(o), timestamp_ms=o, attributes=ATTR_DEAD if o % 17 == 5 else 0)
        log.mark_dead([o for o in range(700) if o % 7 in (1, 2) or 300 <= o < 340])
        sealed = [s.base_offset for s in log.segments()[:-1]]
        log.compact([sealed[1:3], sealed[4:5]], lambda o, k, t, m: "dead" if m or o % 2 == 0 else None)
        marks = log.marks_snapshot()
        log.mark_dead([o for o in range(0, 700, 9)])       # after the snapshot: not in the facts
        end = log.end_offset
        assert any(d for s in log.segments() for _, d in _walk_deltas(s.path))
        for lo, hi in ((None, None), (0, end), (sealed[1] + 3, sealed[4] + 2), (sealed[2], sealed[2] + 1),
                       (end - 5, end + 10), (sealed[3], sealed[3])):
            expected = _facts_by_decode_at(log, marks, log.start_offset if lo is None else lo,
                                           1 << 63 if hi is None else hi)
            assert list(log.record_facts(marks, lo, hi)) == expected, (lo, hi)
        victim = log.segments()[3]
    with open(victim.path, "r+b") as f:
        f.seek(victim.used_bytes // 2)
        byte = f.read(1)
        f.seek(victim.used_bytes // 2)
        f.write(bytes([byte[0] ^ 0x10]))
    with CommitLog.open(path) as log:
        with pytest.raises(CorruptLogError, match=re.escape(victim.path)):
            list(log.record_facts(log.marks_snapshot()))


def _walk_deltas(path: str) -> list[tuple[int, int]]:
    data = open(path, "rb").read()
    out, pos = [], 0
    while (r := rec.decode_at(data, pos, len(data))).status == rec.OK:
        out.append((r.attributes, r.delta))
        pos = r.next_position
    return out
