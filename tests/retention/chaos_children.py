"""The writer and the tailing reader of the kill-and-restart run (test_kill_and_restart), as real
processes the run SIGKILLs:

    python chaos_children.py writer LOG ACKED FIRST_N
    python chaos_children.py reader LOG GROUP

The writer appends keyed batches and, once `append_batch` returned, appends `offset n` lines to
ACKED (one write per batch, so a kill leaves at most a torn last line): those records are
acknowledged. About one batch in three it then marks one of its records that has a key of its own
dead: `m OFFSET` goes to ACKED.marked before `mark_dead`, `d OFFSET` once it returned (readers must
never see that record again; a compaction may drop it). Record n has key `key_of(n)` and a value that spells n and a digest of it, so any
reader can tell a damaged or misplaced record. A full disk (StoreFullError) is waited out.

The reader follows the log from its group's committed offset, checks every record it reads, and
commits as it goes; a head removed under it (retention) moves it to the start offset. A record
that fails its check ends the reader with status 3 and a line saying which: the run counts any
death it did not cause as a failure.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys
import time

KEYS = 64


def key_of(n: int) -> bytes:
    """Three records in five share one of KEYS keys (a compaction drops the superseded ones); the
    others have a key of their own, so only retention may remove them."""
    return b"k%d" % (n % KEYS) if n % 5 < 3 else b"u%d" % n


def value_of(n: int) -> bytes:
    digest = hashlib.blake2b(str(n).encode(), digest_size=16).hexdigest().encode()
    return b"%d:" % n + digest * (1 + n % 12)


def n_of(key: bytes | None, value: bytes) -> int:
    """The n a record spells; ValueError when the record is not one the writer wrote."""
    n = int(bytes(value).split(b":", 1)[0])
    if bytes(value) != value_of(n) or key != key_of(n):
        raise ValueError(f"record of n={n} has key {key!r} and a value of {len(value)} bytes "
                         f"that is not its own")
    return n


def writer(log_path: str, acked_path: str, first_n: int) -> None:
    from commitlog import CommitLog, StoreFullError

    rng = random.Random(first_n)
    n = first_n
    ack = os.open(acked_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    marked = os.open(acked_path + ".marked", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    # roll_after: segments also roll by time, so SIGKILLs land in time rolls too.
    with CommitLog.open(log_path, segment_size=64 * 1024, flush="none", roll_after=0.3) as log:
        print("ready", flush=True)
        while True:
            count = rng.randint(1, 8)
            ns = list(range(n, n + count))
            try:
                first = log.append_batch([value_of(i) for i in ns], keys=[key_of(i) for i in ns])
            except StoreFullError:
                time.sleep(0.05)        # retention frees room; records of a cut batch are unacked
                n += count
                continue
            os.write(ack, b"".join(b"%d %d\n" % (first + j, i) for j, i in enumerate(ns)))
            own = [first + j for j, i in enumerate(ns) if not key_of(i).startswith(b"k")]
            if own and rng.random() < 0.35:
                victim = rng.choice(own)
                os.write(marked, b"m %d\n" % victim)
                try:
                    log.mark_dead([victim])
                    os.write(marked, b"d %d\n" % victim)
                except StoreFullError:
                    pass                # no room for the marks file to grow: not marked
            n += count
            time.sleep(rng.uniform(0.0005, 0.003))


def reader(log_path: str, group: str) -> None:
    from commitlog import CommitLog, NotALogError, OffsetOutOfRangeError, OffsetRemovedError

    print("ready", flush=True)
    while True:
        try:
            with CommitLog.open(log_path, readonly=True) as log:
                while True:
                    position = max(log.committed().get(group, 0), log.start_offset)
                    end = log.end_offset
                    try:
                        for record in log.scan(position, end):
                            n_of(record.key, record.value)
                            position = record.offset + 1
                    except ValueError as exc:
                        print(f"reader: damaged record: {exc}", file=sys.stderr, flush=True)
                        sys.exit(3)
                    except (OffsetRemovedError, OffsetOutOfRangeError):
                        pass            # the head went under us: the next round starts at start
                    if position > log.committed().get(group, -1):
                        log.commit(group, min(position, log.end_offset))
                    time.sleep(0.02)
        except NotALogError:
            time.sleep(0.05)            # not created yet


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    if role == "writer":
        writer(args[0], args[1], int(args[2]))
    elif role == "reader":
        reader(args[0], args[1])
    else:
        sys.exit(f"unknown role {role!r}")
