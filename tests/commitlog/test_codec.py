"""Record framing: round trips (hypothesis) and checksum detection of any flipped byte."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commitlog import CommitLog, CorruptLogError
from commitlog import record as rec
from commitlog.segments.reading import read_records

I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
KEYS = st.one_of(st.none(), st.just(b""), st.binary(max_size=64))
VALUES = st.one_of(st.just(b""), st.binary(max_size=300),
                   st.integers(min_value=60_000, max_value=200_000).map(lambda n: bytes([n % 251]) * n))
ATTRS = st.integers(min_value=0, max_value=255)


def _decoded(buf, r: rec.DecodeResult):
    key = None if r.key_start < 0 else bytes(buf[r.key_start:r.key_end])
    return r.timestamp_ms, key, bytes(buf[r.value_start:r.value_end]), r.attributes


DELTAS = st.one_of(st.just(0), st.integers(min_value=1, max_value=2**64 - 1))


@given(value=VALUES, key=KEYS, ts=I64, attrs=ATTRS.map(lambda a: a & ~rec.ATTR_RESERVED),
       delta=DELTAS)
@settings(max_examples=300, deadline=None)
def test_encode_decode_round_trips(value, key, ts, attrs, delta):
    data = rec.encode(value, key, ts, attrs, delta)
    assert len(data) == rec.encoded_size(len(value), len(key) if key else 0) + \
        (rec.DELTA_SIZE if delta else 0)
    r = rec.decode_at(data, 0, len(data))
    assert r.status == rec.OK
    assert r.next_position == len(data)
    assert r.delta == delta
    assert _decoded(data, r) == (ts, key, value, attrs | (rec.ATTR_DELTA if delta else 0))
    # The scan hot loop agrees with decode_at, including empty key versus no key; a record
    # written dead or a gap is passed, never returned; a delta moves the offset on and is not
    # one of the record's attributes.
    got, pos, current = read_records(data, 0, len(data), 7, 1 << 65, False)
    if attrs & rec.ATTR_DEAD:
        assert got == [] and (pos, current) == (len(data), 8 + delta)
    else:
        assert got == [(7 + delta, ts, key, value, attrs)] and (pos, current) == (len(data), 8 + delta)


@given(value=st.binary(max_size=300), key=KEYS, ts=I64, attrs=ATTRS.map(lambda a: a & ~rec.ATTR_RESERVED),
       delta=DELTAS, new_delta=DELTAS)
@settings(max_examples=200, deadline=None)
def test_reframing_gives_a_record_the_delta_asked_and_nothing_else(value, key, ts, attrs, delta,
                                                                   new_delta):
    framed = rec.encode(value, key, ts, attrs, delta)
    r = rec.decode_at(framed, 0, len(framed))
    rest = framed[r.value_start if r.key_start < 0 else r.key_start:]
    assert rec.reframed(r.attributes, ts, -1 if key is None else len(key), rest, new_delta) == \
        rec.encode(value, key, ts, attrs, new_delta)


@given(klen=st.integers(-1, 20), short=st.integers(1, 8))
@settings(max_examples=100, deadline=None)
def test_a_delta_record_too_short_for_its_delta_and_key_is_corrupt(klen, short):
    # A body claiming a delta, `short` bytes shorter than its delta and key need, checksummed
    # right: only its shape can tell.
    body = rec.BODY_HEAD.pack(rec.ATTR_DELTA, 0, klen) + bytes(rec.DELTA_SIZE + max(klen, 0) - short)
    data = rec.FRAME.pack(len(body), rec.crc32(body)) + body
    assert rec.decode_at(data, 0, len(data)).status == rec.BAD
    assert read_records(data, 0, len(data), 7, 1 << 62, False) == ([], 0, 7)


@given(value=st.binary(max_size=40), key=KEYS)
@settings(max_examples=100, deadline=None)
def test_a_gap_not_shaped_as_compaction_writes_it_is_corrupt(value, key):
    data = rec.encode(value, key, 0, rec.ATTR_GAP)
    ok = key is None and len(value) == 8
    assert (rec.decode_at(data, 0, len(data)).status == rec.OK) == ok
    got, pos, current = read_records(data, 0, len(data), 7, 1 << 62, False)
    assert got == [] and (pos, current) == ((len(data), 7 + rec.gap_span(data, 21)) if ok else (0, 7))


def test_gap_records_advance_offsets_by_their_span():
    data = rec.encode(b"a", None, 5) + rec.encode_gap(1000) + rec.encode(b"b", b"k", 6)
    got, pos, current = read_records(data, 0, len(data), 10, 1 << 62, False)
    assert [(r.offset, r.value) for r in got] == [(10, b"a"), (1011, b"b")]
    assert (pos, current) == (len(data), 1012)


@given(value=st.binary(max_size=200), key=KEYS, ts=I64, pad=st.integers(0, 40))
@settings(max_examples=200, deadline=None)
def test_decode_reports_empty_and_end_after_a_record(value, key, ts, pad):
    data = rec.encode(value, key, ts) + bytes(pad)
    r = rec.decode_at(data, 0, len(data))
    assert r.status == rec.OK
    assert rec.decode_at(data, r.next_position, len(data)).status == rec.EMPTY
    sealed = rec.encode(value, key, ts) + rec.END_MARKER.to_bytes(4, "little") + bytes(pad)
    assert rec.decode_at(sealed, r.next_position, len(sealed)).status == rec.END


@given(value=st.binary(max_size=120), key=KEYS, ts=I64, attrs=ATTRS,
       mask=st.integers(min_value=1, max_value=255), pad=st.sampled_from([0, 4, 64]),
       delta=st.sampled_from([0, 3, 2**40]))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_flipped_byte_is_detected(value, key, ts, attrs, mask, pad, delta):
    """Flip each byte of an encoded record (with an offset delta or without) in turn: decode
    never returns OK with other content (and the scan loop never yields it)."""
    if delta:
        attrs &= ~rec.ATTR_DELTA
    good = rec.encode(value, key, ts, attrs, delta)
    original = (ts, key, value, attrs | (rec.ATTR_DELTA if delta else 0))
    for i in range(len(good)):
        bad = bytearray(good + bytes(pad))
        bad[i] ^= mask
        r = rec.decode_at(bad, 0, len(bad))
        assert r.status != rec.OK or (_decoded(bad, r), r.delta) == (original, delta), \
            f"byte {i} flip undetected"
        for got in read_records(bad, 0, len(bad), 0, 1 << 62, False)[0]:
            assert got == (delta, ts, key, value, attrs), f"scan returned a record with byte {i} flipped"


def test_truncated_record_is_never_ok():
    data = rec.encode(b"v" * 50, b"key", 123)
    for cut in range(len(data)):
        r = rec.decode_at(data, 0, cut)
        assert r.status in (rec.EMPTY, rec.BAD)


@given(records=st.lists(st.tuples(VALUES, KEYS, I64,
                                  ATTRS.map(lambda a: a & ~(rec.ATTR_SKIP | rec.ATTR_RESERVED))),
                        min_size=1, max_size=6))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
def test_log_round_trips_through_append_read_and_scan(tmp_path_factory, records):
    path = str(tmp_path_factory.mktemp("codec") / "log")
    with CommitLog.open(path, segment_size=256 * 1024, flush="none") as log:
        offsets = [log.append(v, key=k, timestamp_ms=t, attributes=a) for v, k, t, a in records]
        assert offsets == list(range(len(records)))
        for off, (v, k, t, a) in zip(offsets, records):
            assert log.read(off) == (off, t, k, v, a)
        assert [tuple(r) for r in log.scan()] == [(o, t, k, v, a) for o, (v, k, t, a)
                                                   in zip(offsets, records)]
    with CommitLog.open(path, readonly=True) as log:  # and after reopening, from another handle
        assert [tuple(r) for r in log.scan()] == [(o, t, k, v, a) for o, (v, k, t, a)
                                                   in zip(offsets, records)]


def test_flipped_byte_in_a_stored_record_is_never_returned(tmp_log_dir):
    """Through the log: every single byte of a sealed segment's record, flipped on disk, makes
    read and scan raise CorruptLogError (never return other content)."""
    with CommitLog.open(tmp_log_dir, segment_size=4096, flush="none") as log:
        for i in range(60):
            log.append(b"%03d" % i * 20, key=b"k%d" % i, timestamp_ms=i)
        seg = log.segments()[0]
    target = 3
    with CommitLog.open(tmp_log_dir, readonly=True) as log:
        start = sum(len(rec.encode(b"%03d" % i * 20, b"k%d" % i, i)) for i in range(target))
        length = len(rec.encode(b"%03d" % target * 20, b"k%d" % target, target))
    with open(seg.path, "r+b") as f:
        original = f.read()
        for i in range(start, start + length):
            f.seek(i)
            f.write(bytes([original[i] ^ 0x5A]))
            f.flush()
            with CommitLog.open(tmp_log_dir, readonly=True) as log:
                with pytest.raises(CorruptLogError) as ei:
                    log.read(target)
                assert seg.path in str(ei.value)
                with pytest.raises(CorruptLogError):
                    for r in log.scan(0, 10):
                        assert r.offset < target
            f.seek(i)
            f.write(bytes([original[i]]))
            f.flush()
