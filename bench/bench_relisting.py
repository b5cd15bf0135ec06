"""What a change-driven pass pays to list a log directory again (issue 39): `Listing.read` (each
entry's name, inode, size, mtime and ctime, a stat each) against the bare scan of (name, inode)
it did before the inode-reuse fix, over a directory of BENCH_SEGMENTS (default 25) segments and
their indexes. Interleaved rounds (BENCH_ROUNDS, default 5), best of each, microseconds a
listing. A directory is listed again only when its mtime or ctime moved (a roll, a removal, a
connection's -wal) or it or an entry was under two seconds old; an idle log is not listed.
`.venv/bin/python bench/bench_relisting.py`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

from retention.deletion.log_keys import Listing


def _bare(path: str) -> int:
    with os.scandir(path) as listing:
        return hash(frozenset((e.name, e.inode()) for e in listing))


def _listing(path: str) -> int:
    return Listing().read(path, os.stat(path), time.time_ns())


def _best(func, path: str, calls: int = 2000) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        func(path)
    return (time.perf_counter() - started) / calls * 1e6


def main() -> None:
    segments = int(os.environ.get("BENCH_SEGMENTS", "25"))
    rounds = int(os.environ.get("BENCH_ROUNDS", "5"))
    path = tempfile.mkdtemp(prefix="bench-relisting-")
    try:
        for base in range(segments):
            for suffix in (".log", ".index"):
                with open(os.path.join(path, f"{base:020d}{suffix}"), "wb") as f:
                    f.write(b"\0" * 64)
        bare, listed = [], []
        for _ in range(rounds):
            bare.append(_best(_bare, path))
            listed.append(_best(_listing, path))
        print(f"{2 * segments} entries, best of {rounds} interleaved rounds: bare (name, inode) scan "
              f"{min(bare):.1f} us, Listing.read {min(listed):.1f} us, ratio {min(listed) / min(bare):.1f}")
        print(f"load average {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(path)


if __name__ == "__main__":
    main()
