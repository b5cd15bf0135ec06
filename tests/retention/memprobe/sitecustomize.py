"""A memory probe for a sidecar under test, loaded only when a test puts this directory first on
the child's PYTHONPATH and names a directory in MEMPROBE_DIR (nothing of it ships).

A thread polls MEMPROBE_DIR for `NAME.req`; for each it writes `NAME.json` (objects counted by
type after a full collection, the containers of 256 items or more, open fds and mappings, malloc's
own figures with its arenas counted, the resident set) and, with MEMPROBE_TRACE=N (tracemalloc
started N frames deep by the first request, so start-up runs at full speed), `NAME.snap` (a
tracemalloc snapshot of what was allocated since and is still live), then removes the request.
`heap_probe` is its other side."""

import os

_DIR = os.environ.get("MEMPROBE_DIR")


def _mallinfo() -> dict:
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                     "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    info = libc.mallinfo2()
    out = {name: getattr(info, name) for name, _ in MallInfo2._fields_}
    libc.fopen.restype = ctypes.c_void_p
    path = os.path.join(_DIR, f"malloc-info-{os.getpid()}.xml")
    f = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(f))
    libc.fclose(ctypes.c_void_p(f))
    with open(path) as xml:
        out["arenas"] = xml.read().count("<heap nr=")
    os.unlink(path)
    return out


def _big_containers(objects) -> dict:
    """{id: [type, len, the type of one holder]} of every container of 256 or more items, those the
    collector does not track (a dict of ints, say) found through what holds them."""
    import gc
    from collections import deque
    kinds = (dict, list, set, frozenset, deque, bytearray)
    big = {}
    for holder in objects:
        for o in [holder, *gc.get_referents(holder)]:
            if isinstance(o, kinds) and len(o) >= 256 and id(o) not in big:
                big[id(o)] = [type(o).__qualname__, len(o), type(holder).__qualname__]
    return big


def _answer(name: str) -> None:
    import gc
    import json
    import sys
    import threading
    import tracemalloc
    from collections import Counter

    if os.environ.get("MEMPROBE_TRACE") and not tracemalloc.is_tracing():
        tracemalloc.start(int(os.environ["MEMPROBE_TRACE"]))
    gc.collect()
    malloc = _mallinfo()                # before the lists below take their share
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    objects = gc.get_objects()
    counts = Counter(type(o).__qualname__ for o in objects)
    with open("/proc/self/maps") as f:
        maps = len(f.readlines())
    out = {"rss": rss, "malloc": malloc, "threads": threading.active_count(),
           "fds": len(os.listdir("/proc/self/fd")), "maps": maps, "blocks": sys.getallocatedblocks(),
           "types": dict(counts), "big": _big_containers(objects)}
    if tracemalloc.is_tracing():
        out["traced"] = tracemalloc.get_traced_memory()
        tracemalloc.take_snapshot().dump(os.path.join(_DIR, name + ".snap"))
    tmp = os.path.join(_DIR, name + ".json.tmp")
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, os.path.join(_DIR, name + ".json"))


def _poll() -> None:
    import time
    while True:
        for entry in sorted(os.listdir(_DIR)):
            if entry.endswith(".req"):
                _answer(entry[:-4])
                os.unlink(os.path.join(_DIR, entry))
        time.sleep(0.1)


if _DIR:
    import threading
    threading.Thread(target=_poll, name="memprobe", daemon=True).start()
