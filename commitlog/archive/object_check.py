"""An archived data object is served only once it is the object its manifest entry describes.

Before the first record of a data object is served, the reader checks the object whole: its size
against the entry's `bytes`, its SHA-256 against the entry's `sha256` (fetched in windows, a few
ahead while one is hashed: commitlog.archive.read_ahead; the windows go to the reader's cache).
The hash runs once over the object, and its state is kept at every `PIECE` bytes (a `Chain`): a
range of the object fetched again later (evicted from the cache) is hashed on from the state at its
start and must reach the state kept at its end, so an object swapped on the tier after the check is
found too, at the cost of hashing what is fetched again. The index object is checked against
`index_bytes`/`index_sha256`, and what it records (the segment's bytes, its record count) against
`bytes` and `end_offset - base_offset` (commitlog.archive.remote). Anything else is an
ArchiveCorruptError naming the object and the manifest's field.

Thread-safe (a lock over the kept chains; two readers may check one object at once, both whole).
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..errors import ArchiveCorruptError
from .manifest import ArchivedSegment

PIECE = 1 << 20                      # bytes per state kept of a checked object (remote.CHUNK)
_KEPT = 1024                         # objects whose chains are kept (about 300 bytes per MiB each)


@dataclass(frozen=True)
class Chain:
    """The SHA-256 of a checked object as it ran: its state at the start of every PIECE, and the
    digest it reached at the end of each."""

    starts: tuple
    ends: tuple[bytes, ...]


class CheckedObjects:
    """The chains of the data objects checked whole, least recently used out first."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._kept: OrderedDict[tuple[str, str], Chain] = OrderedDict()

    def chain(self, key: str, segment: ArchivedSegment) -> Chain | None:
        with self._lock:
            found = self._kept.get((key, segment.sha256))
            if found is not None:
                self._kept.move_to_end((key, segment.sha256))
            return found

    def check_whole(self, key: str, segment: ArchivedSegment, size: int | None, unit: int,
                    windows: Callable[[list[int]], Iterator[bytes]],
                    keep: Callable[[int, bytes], None]) -> Chain:
        """Check object `key` (`size` bytes as the tier says, None: missing) against `segment`:
        `windows(sizes)` yields its windows of `unit` bytes (a multiple of PIECE) in order, `sizes`
        their lengths; `keep(n, data)` caches a window that passed its length check."""
        if size is None:
            raise ArchiveCorruptError(self.url, key, "missing, though the manifest lists it")
        if size != segment.bytes:
            raise ArchiveCorruptError(self.url, key, f"{size} bytes, the manifest's `bytes` says "
                                      f"{segment.bytes}")
        running, starts, ends = hashlib.sha256(), [], []
        sizes = [min(unit, size - first) for first in range(0, size, unit)]
        fetched = windows(sizes)
        try:
            for n, data in enumerate(fetched):
                if len(data) != sizes[n]:
                    raise ArchiveCorruptError(self.url, key, f"{len(data)} bytes at byte {n * unit}, "
                                              f"the manifest's `bytes` says {segment.bytes} in all")
                view = memoryview(data)
                for i in range(0, len(data), PIECE):
                    starts.append(running.copy())
                    running.update(view[i:i + PIECE])
                    ends.append(running.digest())
                keep(n, data)
        finally:
            close = getattr(fetched, "close", None)
            if close is not None:
                close()                  # the windows fetched ahead are let go of at once
        if running.hexdigest() != segment.sha256:
            raise ArchiveCorruptError(self.url, key, f"SHA-256 {running.hexdigest()}, the manifest's "
                                      f"`sha256` says {segment.sha256}: another object than archived")
        chain = Chain(tuple(starts), tuple(ends))
        with self._lock:
            self._kept[(key, segment.sha256)] = chain
            while len(self._kept) > _KEPT:
                self._kept.popitem(last=False)
        return chain

    def check_range(self, key: str, chain: Chain, first: int, data: bytes, expected: int) -> bytes:
        """`data`, fetched at byte `first` (a multiple of PIECE) for `expected` bytes, if it is what
        the whole object's check saw there."""
        ok = len(data) == expected
        view = memoryview(data)
        for i in range(0, len(data), PIECE) if ok else ():
            piece = (first + i) // PIECE
            running = chain.starts[piece].copy()
            running.update(view[i:i + PIECE])
            ok = ok and running.digest() == chain.ends[piece]
        if not ok:
            raise ArchiveCorruptError(self.url, key, f"bytes [{first}, {first + expected}) differ "
                                      f"from the object checked against the manifest's `sha256`: "
                                      f"replaced on the tier since")
        return data
