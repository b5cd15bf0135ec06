"""The memory probe (`memprobe/sitecustomize.py`) from the test's side: the environment that loads
it into a sidecar, and its readings.

The probe's sidecar runs with PYTHONMALLOC=malloc, so every Python object is a malloc block, and
without glibc's per-thread caches (tcache: up to about 230 KB of freed blocks per thread that malloc
counts as in use, so each pool thread a loaded host adds would look like kept state), so malloc's
bytes in use (`live_heap`, read after a full collection) are the whole of what the process keeps on
its heap: what it retains for a deletion shows there, byte for byte, where the resident set
also moves with what the allocator keeps of freed memory (more when passes overlap on a loaded host).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

PROBE_PATH = Path(__file__).resolve().parent / "memprobe"


class HeapProbe:
    """Readings from the probe of one sidecar, through the directory `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def env(self) -> dict[str, str]:
        """The environment for `Sidecar(env=...)`: the probe loaded, Python objects on malloc, no tcache.
        MEMPROBE_TRACE, when set here, passes on (tracemalloc snapshots in the directory)."""
        path = os.environ.get("PYTHONPATH")
        return {"MEMPROBE_DIR": str(self.directory), "PYTHONMALLOC": "malloc",
                "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0",
                "PYTHONPATH": f"{PROBE_PATH}{os.pathsep}{path}" if path else str(PROBE_PATH)}

    def read(self, name: str, timeout: float = 60.0) -> dict:
        """The probe's answer to the request `name`: rss, malloc (mallinfo2 and arenas), threads,
        fds, maps, types (objects by type), big (containers of 256 items or more)."""
        answer = self.directory / f"{name}.json"
        (self.directory / f"{name}.req").touch()
        deadline = time.monotonic() + timeout
        while not answer.exists():
            if time.monotonic() > deadline:
                raise AssertionError(f"the sidecar's memory probe did not answer {name} in {timeout:.0f}s")
            time.sleep(0.05)
        return json.loads(answer.read_text())


def least(probe: HeapProbe, name: str, readings: int = 3, gap: float = 0.3) -> dict:
    """Of `readings` readings `gap` seconds apart, the one with the least live heap: what a pass
    running at that moment holds (a /proc listing read whole, a batch of decisions: up to 300 KB
    was seen) is gone in one of them, what is kept is in all."""
    taken = []
    for i in range(readings):
        if i:
            time.sleep(gap)
        taken.append(probe.read(f"{name}-{i}"))
    return min(taken, key=live_heap)


def live_heap(reading: dict) -> int:
    """Bytes malloc has handed out and not had back (its arenas' and its mmapped blocks')."""
    return reading["malloc"]["uordblks"] + reading["malloc"]["hblkhd"]
