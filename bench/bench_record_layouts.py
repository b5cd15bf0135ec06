"""Record layouts that carry their offsets, measured before choosing one (issue: compaction bounded
by what is live). Each layout's append and CRC-checked scan loops are written the way the store
writes its own (one slice assignment per record, the body head's CRC reused while the millisecond
does not change, batches framed in C-level joins), into a mapping already faulted in, and compared
in the same process with today's layout, written the same way:

- v1, today: [len u32][crc u32][attrs u8][ts i64][klen i32][key][value]; offsets are counted, so a
  compaction must leave a gap record for each removed run.
- v2, an offset delta per record: [len u32][crc u32][delta u32][attrs u8][ts i64][klen i32][key][value],
  the CRC over the body, then the delta (so the cached body-head CRC still serves).
- v3, Kafka-like batches: [len u32][crc u32][base delta u32][count u32][attrs u8][first ts i64], then per
  record [offset delta u32][ts delta i32][klen i32][vlen u32][key][value]; one CRC per batch. A single
  append is a batch of one; `append_batch` writes batches of up to 1,000 records.

Run: .venv/bin/python bench/bench_record_layouts.py [--records N] [--rounds R]
Prints each figure (records/s, best of interleaved rounds) and its ratio to v1's.
"""

from __future__ import annotations

import argparse
from array import array
import mmap
import struct
import time
import zlib

crc32 = zlib.crc32
FRAME = struct.Struct("<II")
HEAD1 = struct.Struct("<Bqi")                 # v1 and v2 body head
DELTA = struct.Struct("<I")
FRAME2 = struct.Struct("<III")
BATCH = struct.Struct("<IIIIBq")              # len, crc, base delta, count, attrs, first ts
REC3 = struct.Struct("<Iiii")                 # offset delta, ts delta, klen, vlen


def mapping(size: int) -> mmap.mmap:
    mm = mmap.mmap(-1, size)
    mm[:] = bytes(size)                       # faulted in, as the store's prepared segments are
    return mm


# --- appends, one record at a time ------------------------------------------------------------------
def append_v1(mm, values, ts):
    head = HEAD1.pack(0, ts, -1)
    head_crc = crc32(head)
    pos = 0
    pack = FRAME.pack
    for value in values:
        total = 21 + len(value)
        mm[pos:pos + total] = pack(total - 8, crc32(value, head_crc)) + head + value
        pos += total
    return pos


def append_v2(mm, values, ts):
    head = HEAD1.pack(0, ts, -1)
    head_crc = crc32(head)
    pos = 0
    pack = FRAME2.pack
    dpack = DELTA.pack
    for delta, value in enumerate(values):
        total = 25 + len(value)
        mm[pos:pos + total] = pack(total - 8, crc32(dpack(delta), crc32(value, head_crc)), delta) + head + value
        pos += total
    return pos


def append_v3(mm, values, ts):
    pos = 0
    bpack = BATCH.pack
    rpack = REC3.pack
    for delta, value in enumerate(values):
        body = bpack(0, 0, delta, 1, 0, ts)[8:] + rpack(0, 0, -1, len(value)) + value
        total = 8 + len(body)
        mm[pos:pos + total] = FRAME.pack(total - 8, crc32(body)) + body
        pos += total
    return pos


# --- appends, a batch of records -------------------------------------------------------------------
def batch_v1(mm, values, ts, per_chunk=4096):
    """The store's uniform-size path (ActiveSegment.write_uniform): a join with a constant frame as
    separator, then the CRCs dropped in with four strided slice assignments."""
    head = HEAD1.pack(0, ts, -1)
    head_crc = crc32(head)
    rsize = 21 + len(values[0])
    sep = bytearray(FRAME.pack(rsize - 8, 0) + head)
    pos = 0
    for start in range(0, len(values), per_chunk):
        chunk = values[start:start + per_chunk]
        crcs = array("I", [crc32(v, head_crc) for v in chunk]).tobytes()
        data = sep + sep.join(chunk)   # frame and head before each value, CRCs zero
        for b in range(4):
            data[4 + b::rsize] = crcs[b::4]
        mm[pos:pos + len(data)] = data
        pos += len(data)
    return pos


def batch_v2(mm, values, ts, per_chunk=4096):
    """As v1's uniform path, the deltas dropped in beside the CRCs."""
    head = HEAD1.pack(0, ts, -1)
    head_crc = crc32(head)
    rsize = 25 + len(values[0])
    sep = bytearray(FRAME2.pack(rsize - 8, 0, 0) + head)
    dpack = DELTA.pack
    pos = 0
    for start in range(0, len(values), per_chunk):
        chunk = values[start:start + per_chunk]
        deltas = array("I", range(start, start + len(chunk)))
        crcs = array("I", [crc32(dpack(d), crc32(v, head_crc)) for d, v in zip(deltas, chunk)]).tobytes()
        data = sep + sep.join(chunk)
        raw = deltas.tobytes()
        for b in range(4):
            data[4 + b::rsize] = crcs[b::4]
            data[8 + b::rsize] = raw[b::4]
        mm[pos:pos + len(data)] = data
        pos += len(data)
    return pos


def batch_v3(mm, values, ts, per_batch=1000):
    pos = 0
    rpack = REC3.pack
    for start in range(0, len(values), per_batch):
        chunk = values[start:start + per_batch]
        records = b"".join(part for d, v in enumerate(chunk) for part in (rpack(d, 0, -1, len(v)), v))
        head = BATCH.pack(0, 0, start, len(chunk), 0, ts)[8:]
        crc = crc32(records, crc32(head))
        total = 8 + len(head) + len(records)
        mm[pos:pos + total] = FRAME.pack(total - 8, crc) + head + records
        pos += total
    return pos


# --- scans, every CRC verified ---------------------------------------------------------------------
def scan_v1(mm, end, base=0):
    pos = 0
    n = 0
    unpack = FRAME.unpack_from
    head_unpack = HEAD1.unpack_from
    buf = memoryview(mm)
    while pos < end:
        length, crc = unpack(mm, pos)
        body = buf[pos + 8:pos + 8 + length]
        if crc32(body) != crc:
            raise ValueError(pos)
        _attrs, _ts, klen = head_unpack(mm, pos + 8)
        _offset = base + n
        _value = body[13 + max(klen, 0):]
        n += 1
        pos += 8 + length
    buf.release()
    return n


def scan_v2(mm, end, base=0):
    pos = 0
    n = 0
    unpack = FRAME2.unpack_from
    head_unpack = HEAD1.unpack_from
    dpack = DELTA.pack
    buf = memoryview(mm)
    while pos < end:
        length, crc, delta = unpack(mm, pos)
        body = buf[pos + 12:pos + 8 + length]
        if crc32(dpack(delta), crc32(body)) != crc:
            raise ValueError(pos)
        _attrs, _ts, klen = head_unpack(mm, pos + 12)
        _offset = base + delta
        _value = body[13 + max(klen, 0):]
        n += 1
        pos += 8 + length
    buf.release()
    return n


def scan_v3(mm, end, base=0):
    pos = 0
    n = 0
    unpack = FRAME.unpack_from
    rec_unpack = REC3.unpack_from
    buf = memoryview(mm)
    while pos < end:
        length, crc = unpack(mm, pos)
        if crc32(buf[pos + 8:pos + 8 + length]) != crc:
            raise ValueError(pos)
        _bl, _bc, base_delta, count, _attrs, _ts = BATCH.unpack_from(mm, pos)
        p = pos + BATCH.size
        for _ in range(count):
            delta, _tsd, klen, vlen = rec_unpack(mm, p)
            p += 16 + max(klen, 0)
            _offset = base + base_delta + delta
            _value = buf[p:p + vlen]
            p += vlen
            n += 1
        pos += 8 + length
    buf.release()
    return n


LAYOUTS = {"v1": (append_v1, batch_v1, scan_v1), "v2": (append_v2, batch_v2, scan_v2),
           "v3": (append_v3, batch_v3, scan_v3)}


def timed(fn, *args) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    values = [bytes([i % 251]) * 100 for i in range(args.records)]
    ts = int(time.time() * 1000)
    mm = mapping(args.records * 200)
    best: dict[tuple[str, str], float] = {}
    sizes: dict[str, int] = {}
    for round_ in range(args.rounds):
        for name, (append, batch, scan) in LAYOUTS.items():   # interleaved: every layout each round
            t, end = timed(append, mm, values, ts)
            best[name, "append"] = max(best.get((name, "append"), 0), args.records / t)
            t, count = timed(scan, mm, end)
            assert count == args.records, (name, count)
            best[name, "scan"] = max(best.get((name, "scan"), 0), args.records / t)
            t, end = timed(batch, mm, values, ts)
            best[name, "append_batch"] = max(best.get((name, "append_batch"), 0), args.records / t)
            t, count = timed(scan, mm, end)
            assert count == args.records, (name, count)
            best[name, "scan of batches"] = max(best.get((name, "scan of batches"), 0), args.records / t)
            sizes[name] = end
        print(f"round {round_ + 1}: " + ", ".join(f"{n} {op} {best[n, op] / 1e6:.2f}M/s" for n, op in best), flush=True)
    print(f"\n{args.records:,} records of 100 B, best of {args.rounds} interleaved rounds (records/s; ratio to v1)")
    for op in ("append", "append_batch", "scan", "scan of batches"):
        base = best["v1", op]
        print(f"  {op:16} " + "  ".join(f"{n} {best[n, op] / 1e6:5.2f} M/s ({best[n, op] / base:4.2f})" for n in LAYOUTS))
    print("  bytes of the batch-written log: " + ", ".join(f"{n} {sizes[n] / args.records:.1f} B/record" for n in LAYOUTS))


if __name__ == "__main__":
    main()
