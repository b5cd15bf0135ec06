"""A hypothesis state machine over compaction: random appends (keys, tombstones, records written
dead), marks, consumer commits, compactions decided by policies.liveness and reopenings; after
each step `scan` equals a naive model (the live records in offset order) and each key reads its
newest value."""

from __future__ import annotations

import shutil
import tempfile
from datetime import datetime, timezone

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cx_helpers import merge_runs

from commitlog import ATTR_DEAD, CommitLog, InvalidArgumentError, OffsetOutOfRangeError, Record
from policies.config import CompactionConfig
from policies.liveness import KeyIndex, LivenessRule

SEG = 4096
KEYS = st.sampled_from([None, b"a", b"b", b"c", b"d"])
VALUES = st.one_of(st.just(b""), st.binary(min_size=60, max_size=300))


class CompactionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="cx-model-")
        self.log = CommitLog.open(self.dir, segment_size=SEG)
        self.model: dict[int, Record] = {}   # what scan must return
        self.marked: set[int] = set()         # marked, or written dead
        self.groups: dict[str, int] = {}
        self.ts = 1_600_000_000_000

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(records=st.lists(st.tuples(KEYS, VALUES, st.booleans()), min_size=5, max_size=40))
    def append(self, records):
        for key, value, dead in records:
            self.ts += 1
            attrs = ATTR_DEAD if dead and key is None else 0
            off = self.log.append(value, key=key, timestamp_ms=self.ts, attributes=attrs)
            if attrs:
                self.marked.add(off)
            else:
                self.model[off] = Record(off, self.ts, key, value, 0)

    @precondition(lambda self: self.log.end_offset > 0)
    @rule(data=st.data())
    def mark(self, data):
        end = self.log.end_offset
        offsets = data.draw(st.lists(st.integers(0, end - 1), max_size=10))
        self.log.mark_dead(offsets)
        for o in offsets:
            self.model.pop(o, None)
        if data.draw(st.booleans()):  # now and then a whole segment, so that runs merge
            seg = data.draw(st.sampled_from(self.log.segments()))
            self.log.mark_dead(range(seg.base_offset, seg.end_offset))
            offsets = list(range(seg.base_offset, seg.end_offset))
        for o in offsets:
            self.model.pop(o, None)
            self.marked.add(o)

    @precondition(lambda self: self.log.end_offset > 0)
    @rule(group=st.sampled_from(["g1", "g2"]), data=st.data())
    def commit(self, group, data):
        offset = data.draw(st.integers(0, self.log.end_offset))
        self.log.commit(group, offset)
        self.groups[group] = offset

    @precondition(lambda self: len(self.log.segments()) > 1)
    @rule(data=st.data(), keys=st.booleans())
    def compact(self, data, keys):
        runs = merge_runs(self.log, data.draw(st.sampled_from([0.0, 0.5, 0.9])))
        run = runs[data.draw(st.integers(0, len(runs) - 1))]
        j = [s.base_offset for s in self.log.segments()].index(run[-1]) + 1
        marks = self.log.marks_snapshot()
        index = KeyIndex()
        for offset, key, _, marked in self.log.record_facts(marks):
            index.note(offset, key, marked)
        rule_ = LivenessRule(CompactionConfig(keys=keys, tombstone_retention="0s"),
                             datetime.now(timezone.utc), newest=index.newest,
                             committed=dict(self.groups))
        lo = run[0]
        hi = self.log.segments()[j].base_offset
        try:
            self.log.compact([run], rule_.cause, marks=marks)
        except InvalidArgumentError as exc:
            assert "do not fit" in str(exc)
            return
        for o in [o for o in self.model if lo <= o < hi]:
            r = self.model[o]
            if rule_.cause(o, r.key, r.value == b"", False) is not None:
                del self.model[o]

    @rule()
    def reopen(self):
        self.log.close()
        self.log = CommitLog.open(self.dir)

    @invariant()
    def scan_equals_the_model(self):
        got = [Record(r.offset, r.timestamp_ms, r.key, r.value, r.attributes) for r in self.log.scan()]
        assert got == [self.model[o] for o in sorted(self.model)]

    @invariant()
    def each_key_reads_its_newest_value(self):
        newest: dict[bytes, int] = {}
        for o, r in self.model.items():
            if r.key is not None:
                newest[r.key] = max(o, newest.get(r.key, o))
        for key, o in newest.items():
            assert self.log.read(o) == self.model[o]
        for o in range(self.log.end_offset):
            if o not in self.model and o % 7 == 0:
                try:
                    self.log.read(o)
                except OffsetOutOfRangeError:
                    continue
                raise AssertionError(f"offset {o} is dead or removed but read returned it")


TestCompactionMachine = CompactionMachine.TestCase
TestCompactionMachine.settings = settings(max_examples=40, stateful_step_count=40, deadline=None,
                                          suppress_health_check=[HealthCheck.too_slow])
