"""Record framing: how one record is laid out in a segment, and the only home of its numbers.

    length u32 LE (0: nothing written yet, 0xFFFFFFFF: end marker) | CRC32 of the body u32 |
    attributes u8 (ATTR_*) | timestamp ms i64 | key length i32 (-1: no key) |
    offset delta u64 (only with ATTR_DELTA) | key | value

A record's offset is counted: the segment's base for its first record, one more than the record
before for the next, plus the offset delta of a record that carries one (only a compaction writes
one; format-1 segments hold ATTR_GAP records instead, which readers still follow). A reader trusts
no length without the CRC over the bytes it covers, so a record in flight reads as EMPTY or BAD,
never as data. Other modules name these numbers (FRAME_SIZE, BODY_HEAD_SIZE, HEADER_SIZE,
END_MARKER); hot loops bind them to locals. Why the layout is so: docs, Concepts, "Record format".
Pure functions and constants: thread-safe.
"""

from __future__ import annotations

import struct
import threading
import zlib
from typing import NamedTuple

FRAME = struct.Struct("<II")
BODY_HEAD = struct.Struct("<Bqi")
HEADER = struct.Struct("<IIBqi")
HEADER_SIZE = HEADER.size            # 21: where the key (or the value, without a key) starts
BODY_HEAD_SIZE = BODY_HEAD.size      # 13: the smallest body (no key, empty value)
FRAME_SIZE = FRAME.size              # 8: length and CRC, before the body the CRC covers
LENGTH = struct.Struct("<I")         # the length field alone; END_MARKER written in it ends a
LENGTH_SIZE = LENGTH.size            # sealed segment after its last record
END_MARKER = 0xFFFFFFFF
MAX_BODY = 0xFFFFFFFE

ATTR_NONE = 0
# A record made dead by its producer (an aborted job): readers that honour it skip it, and a
# later compaction drops it.
ATTR_DEAD = 0x01
# Control records carry metadata for layers above the store (for example a job commit marker).
ATTR_CONTROL = 0x02
# Written by compaction only: not a record but the offsets a compaction removed. Its value is the
# span (u64 little endian) the reader's offset advances by; it keeps a compacted segment's data
# self-describing (records carry no offsets), so its index can always be rebuilt from it.
ATTR_GAP = 0x80
# Written by compaction only: an offset delta (u64) follows the body head, the offsets removed
# just before this record.
ATTR_DELTA = 0x40
# What readers never return: a record written dead, or a gap.
ATTR_SKIP = ATTR_DEAD | ATTR_GAP
# What the store alone writes; a caller's attributes may not hold these bits.
ATTR_RESERVED = ATTR_GAP | ATTR_DELTA
SPAN = struct.Struct("<Q")
DELTA = struct.Struct("<Q")
DELTA_SIZE = DELTA.size
_DELTA_HEAD = struct.Struct("<BqiQ")        # a body head and its offset delta


def encode_gap(span: int) -> bytes:
    """The framed gap record standing for `span` removed offsets."""
    return encode(SPAN.pack(span), None, 0, ATTR_GAP)


def gap_span(buf, value_start: int) -> int:
    return SPAN.unpack_from(buf, value_start)[0]


def removed_run_bytes(*, ends_input: bool) -> int:
    """What a run of removed offsets costs in a format-2 compaction's output: the offset delta of
    the record kept after it, or the gap record saying where the input ends when the run ends an
    input that keeps a record (commitlog.cleanup.rewrite writes them)."""
    return HEADER_SIZE + SPAN.size if ends_input else DELTA_SIZE

crc32 = zlib.crc32


class Record(NamedTuple):
    """One record as returned by reads and scans. Immutable."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    attributes: int = 0


def body_length(record_size: int) -> int:
    """The length field of a record `record_size` bytes long in all."""
    return record_size - FRAME_SIZE


def encoded_size(value_len: int, key_len: int) -> int:
    return HEADER_SIZE + key_len + value_len


def encode(value: bytes, key: bytes | None, timestamp_ms: int, attributes: int = 0,
           delta: int = 0) -> bytes:
    """Return the framed bytes of one record; with `delta`, carrying that offset delta."""
    klen = -1 if key is None else len(key)
    head = BODY_HEAD.pack(attributes | ATTR_DELTA, timestamp_ms, klen) + DELTA.pack(delta) \
        if delta else BODY_HEAD.pack(attributes, timestamp_ms, klen)
    crc = crc32(head)
    if key:
        crc = crc32(key, crc)
        body_len = len(head) + klen + len(value)
        return b"".join((FRAME.pack(body_len, crc32(value, crc)), head, key, value))
    body_len = len(head) + len(value)
    return b"".join((FRAME.pack(body_len, crc32(value, crc)), head, value))


def reframed(attributes: int, timestamp_ms: int, klen: int, rest, delta: int,
             crc: int | None = None, head_crc: int = 0) -> bytes:
    """The framed bytes of a record whose body head holds `attributes` (its ATTR_DELTA bit
    ignored), `timestamp_ms` and key length `klen`, and `rest` its key then value, carrying offset
    delta `delta` (none when 0): how a compaction moves a record past a removed run. With `crc`
    (the record's verified CRC) and `head_crc` (the CRC of its old body head), the new CRC is
    derived from them, not computed over `rest` again (worth it from COMBINE_MIN bytes)."""
    head = _DELTA_HEAD.pack(attributes | ATTR_DELTA, timestamp_ms, klen, delta) if delta \
        else BODY_HEAD.pack(attributes & ~ATTR_DELTA, timestamp_ms, klen)
    if crc is None:
        crc = crc32(rest, crc32(head))
    else:  # crc(H || R) = shift(crc(H), len R) ^ crc(R): only the head's part changes
        crc ^= crc32_shift(head_crc ^ crc32(head), len(rest))
    return b"".join((FRAME.pack(len(head) + len(rest), crc), head, rest))


# CRC-32 arithmetic (zlib's polynomial, bit-reflected: bit 31 is x^0). The CRC of A || B is the
# CRC of A shifted by len(B) bytes (multiplied by x^(8 len B) modulo the polynomial) xor the CRC of
# B; a shift is a linear map of 32 bits, applied with four 256-entry tables per power of two bytes
# (built on first use, at most one per bit of a length).
_POLY = 0xEDB88320
_SHIFT_TABLES: list[tuple[list[int], list[int], list[int], list[int]]] = []
_BUILDING = threading.Lock()
# From this many bytes after the head, a shift (at most one lookup per bit of the length) is
# faster than zlib over the bytes again, whatever the length (bench_compaction_keys.py --crc).
COMBINE_MIN = 8192


def _gf2_mul(a: int, b: int) -> int:
    """a * b modulo the CRC polynomial, both bit-reflected."""
    product = 0
    for _ in range(32):
        if b & 0x80000000:
            product ^= a
        b = (b << 1) & 0xFFFFFFFF
        a = (a >> 1) ^ _POLY if a & 1 else a >> 1
    return product


def _build_tables(bits: int) -> None:
    """The tables of shifts by 2**k bytes for every k below `bits`; under a lock, so that each
    is appended once, at its own index, whichever thread builds it."""
    with _BUILDING:
        while len(_SHIFT_TABLES) < bits:
            factor = 0x00800000                         # x^8: a shift by one byte
            for _ in range(len(_SHIFT_TABLES)):
                factor = _gf2_mul(factor, factor)
            columns = [_gf2_mul(1 << bit, factor) for bit in range(32)]
            lanes = []
            for lane in range(4):
                table = [0] * 256
                for i in range(1, 256):
                    low = i & -i
                    table[i] = table[i ^ low] ^ columns[lane * 8 + low.bit_length() - 1]
                lanes.append(table)
            _SHIFT_TABLES.append(tuple(lanes))


def crc32_shift(crc: int, n: int) -> int:
    """`crc` shifted by `n` zero bytes of message, without its pre- and post-conditioning: what
    the CRC of A contributes to the CRC of A || B when B is `n` bytes long. Costs one table
    lookup of four per bit set in `n`."""
    if n.bit_length() > len(_SHIFT_TABLES):
        _build_tables(n.bit_length())
    tables = _SHIFT_TABLES
    while n:
        low = n & -n
        t0, t1, t2, t3 = tables[low.bit_length() - 1]
        crc = t0[crc & 255] ^ t1[crc >> 8 & 255] ^ t2[crc >> 16 & 255] ^ t3[crc >> 24]
        n ^= low
    return crc


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """zlib's crc32_combine: the CRC-32 of A || B from crc1 of A, crc2 of B and len2 = len(B)."""
    return crc32_shift(crc1, len2) ^ crc2


class DecodeResult(NamedTuple):
    status: int          # OK, EMPTY, END, BAD
    next_position: int
    timestamp_ms: int
    key_start: int       # -1 when there is no key
    key_end: int
    value_start: int
    value_end: int
    attributes: int
    delta: int = 0       # the offsets removed just before this record (ATTR_DELTA)


OK, EMPTY, END, BAD = 0, 1, 2, 3
_EMPTY = DecodeResult(EMPTY, 0, 0, -1, -1, 0, 0, 0)
_END = DecodeResult(END, 0, 0, -1, -1, 0, 0, 0)


def decode_at(buf, position: int, limit: int) -> DecodeResult:
    """Decode the record at `position` of `buf` (bytes-like, valid up to `limit`).

    EMPTY: no record written there; END: the sealed segment's end marker; BAD: a torn or corrupt
    record (length out of bounds, bad key length, or CRC mismatch)."""
    if position + LENGTH_SIZE > limit:
        return _EMPTY
    # The length alone first: an end marker may be the last bytes of a file cut short.
    length = LENGTH.unpack_from(buf, position)[0]
    if length == 0:
        return _EMPTY
    if length == END_MARKER:
        return _END
    if position + HEADER_SIZE > limit:
        return DecodeResult(BAD, position, 0, -1, -1, 0, 0, 0)
    _, crc, attrs, ts, klen = HEADER.unpack_from(buf, position)
    end = position + FRAME_SIZE + length
    if length < BODY_HEAD_SIZE or end > limit or klen < -1 or klen > length - BODY_HEAD_SIZE:
        return DecodeResult(BAD, position, 0, -1, -1, 0, 0, 0)
    if crc32(memoryview(buf)[position + FRAME_SIZE:end]) != crc or \
            (attrs & ATTR_GAP and (klen != -1 or length != BODY_HEAD_SIZE + SPAN.size
                                   or attrs & ATTR_DELTA)):
        return DecodeResult(BAD, position, 0, -1, -1, 0, 0, 0)
    key_start = position + HEADER_SIZE
    delta = 0
    if attrs & ATTR_DELTA:
        if length < BODY_HEAD_SIZE + DELTA_SIZE or klen > length - BODY_HEAD_SIZE - DELTA_SIZE:
            return DecodeResult(BAD, position, 0, -1, -1, 0, 0, 0)
        delta = DELTA.unpack_from(buf, key_start)[0]
        key_start += DELTA_SIZE
    if klen < 0:
        return DecodeResult(OK, end, ts, -1, -1, key_start, end, attrs, delta)
    return DecodeResult(OK, end, ts, key_start, key_start + klen, key_start + klen, end, attrs,
                        delta)
