"""Find processes that keep deleted segment files alive.

A file unlinked while a process still has it open or mapped frees no space. This scans
`/proc/*/fd` and `/proc/*/maps` for deleted files under the given directories and reports each
holder by pid and command, with the bytes each deleted file still pins (counted once per file).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from commitlog import DELETED_SUFFIX

from . import owner

_DELETED = " (deleted)"


def _segment_path(path: str) -> str:
    # The store renames a segment to NAME.deleted before unlinking it; holders see that name.
    return path[: -len(DELETED_SUFFIX)] if path.endswith(DELETED_SUFFIX) else path


@dataclass(frozen=True)
class PinnedFile:
    """A deleted file still held open or mapped by a process. Immutable."""

    pid: int
    command: str
    path: str
    bytes: int
    how: str          # "open" or "mapped"


def _command(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            parts = f.read().split(b"\0")
        return " ".join(p.decode(errors="replace") for p in parts if p)[:200]
    except OSError:
        return "?"


def _pids() -> list[str]:
    try:
        return [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []


def _open_files(pid: str, skip: frozenset[str] = frozenset(), *, unlinked_only: bool = False):
    """(the fd's /proc link, the file it names) for each file descriptor of `pid` still readable,
    but those numbered in `skip`; `unlinked_only` (this process's own): only those whose file
    has no name left (an fstat, cheaper than the link's read, picks them first)."""
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return
    for fd in fds:
        if fd in skip:
            continue
        try:
            if unlinked_only and os.fstat(int(fd)).st_nlink:
                continue
            yield f"{fd_dir}/{fd}", os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue


def _mappings(pid: str) -> list[str]:
    """The lines of `/proc/PID/maps` (none when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return f.read().splitlines()
    except OSError:
        return []


class _Roots:
    """The directories, each ending in a separator, made only when a deleted file is met."""

    def __init__(self, directories: list[str]) -> None:
        self._directories = directories
        self._all: tuple[str, ...] | None = None

    @property
    def all(self) -> tuple[str, ...]:
        if self._all is None:
            self._all = tuple(os.path.join(os.path.abspath(d), "") for d in self._directories)
        return self._all


def find_pinned(directories: list[str]) -> list[PinnedFile]:
    """Every (process, deleted file) pair under `directories`, oldest pid first. This process's
    retention locks (one per owned log, `owner.held_fds`) are not looked at."""
    roots = _Roots(directories)
    found: dict[tuple[int, str], PinnedFile] = {}
    me = str(os.getpid())
    for pid in _pids():
        mine = pid == me          # a sidecar holds a few descriptors a log: 20,000 at 10,000 logs
        for link, target in _open_files(pid, owner.held_fds() if mine else frozenset(), unlinked_only=mine):
            if target.endswith(_DELETED) and target.startswith(roots.all):
                path = _segment_path(target[: -len(_DELETED)])
                try:
                    size = os.stat(link).st_blocks * 512
                except OSError:
                    size = 0
                found.setdefault((int(pid), path), PinnedFile(int(pid), "", path, size, "open"))
        for line in _mappings(pid):
            if not line.endswith(_DELETED):
                continue
            fields = line.split(None, 5)
            if len(fields) < 6 or not fields[5].startswith(roots.all):
                continue
            path = _segment_path(fields[5][: -len(_DELETED)])
            if (int(pid), path) in found:
                continue
            try:
                size = os.stat(f"/proc/{pid}/map_files/{fields[0]}").st_blocks * 512
            except OSError:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                size = end - start
            found[(int(pid), path)] = PinnedFile(int(pid), "", path, size, "mapped")
    commands: dict[int, str] = {}
    out = []
    for (pid, _), pin in sorted(found.items()):
        command = commands.setdefault(pid, _command(str(pid)))
        out.append(PinnedFile(pid, command, pin.path, pin.bytes, pin.how))
    return out


def pinned_bytes(pins: list[PinnedFile]) -> int:
    """Bytes still pinned, each deleted file counted once however many processes hold it."""
    per_file: dict[str, int] = {}
    for pin in pins:
        per_file[pin.path] = max(per_file.get(pin.path, 0), pin.bytes)
    return sum(per_file.values())


def held_by_any(path: str) -> bool:
    """True when some process has the file at `path` open or mapped under that name (a file
    renamed since shows its new name): a reader that takes no shared hold, such as the JVM one,
    mapping a segment retention is removing. Files that cannot be looked at count as not held."""
    mapped = " " + path
    return any(any(target == path for _, target in _open_files(pid))
               or any(line.endswith(mapped) for line in _mappings(pid)) for pid in _pids())
