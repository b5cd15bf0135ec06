"""Opening a file of a log directory without ever following a symbolic link.

Whoever can write a log directory could plant `<log>/.lock -> /etc/passwd`; every file the store
or the sidecar opens there goes through this module, which refuses such a link with
UnsafeLogFileError (naming the file) instead of reading, writing or truncating its target.

    open_file(path, flags)      os.open with O_NOFOLLOW | O_CLOEXEC: a link at `path` is refused,
                                and so is anything else that is not a regular file (a FIFO, a
                                device, a directory: opened with O_NONBLOCK, so a FIFO never blocks)
    open_read(path)             the same, read-only, with the file's fstat (one, not two)
    no_follow                   the same as an `opener` for open(): open(path, "rb", opener=no_follow)
    temporary(path, flags)      also an opener: a temporary whose name is ours (`*.tmp`, `*.cleaned`):
                                created with O_EXCL; a regular file left there is truncated (one
                                with other hard links unlinked first), a link refused and left
    connect_sqlite(path, ...)   sqlite3.connect, refusing a link at the database or its -wal/-shm

The log directory's own path may be a link (an operator's choice): only the last component is
checked. rename() and unlink() never follow a link, so they need nothing from here. Stateless.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sqlite3
import stat

from .errors import UnsafeLogFileError

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
_SQLITE_SIDE_FILES = ("", "-wal", "-shm", "-journal")


def open_file(path: str, flags: int, mode: int = 0o644) -> int:
    """`os.open(path, flags | O_NOFOLLOW | O_CLOEXEC, mode)`; UnsafeLogFileError when `path` is a
    symbolic link or anything else than a regular file, OSError as os.open raises it otherwise.
    Opened with O_NONBLOCK (a FIFO planted there would block the open until a writer or reader
    came), which is cleared again unless `flags` asked for it."""
    fd, _ = _open_regular(path, flags, mode)
    if not flags & os.O_NONBLOCK:
        try:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        except BaseException:
            os.close(fd)
            raise
    return fd


def open_read(path: str) -> tuple[int, os.stat_result]:
    """(a read-only, non-blocking descriptor of regular file `path`, its fstat): `open_file` with
    one fstat where the caller needs its own too (an idle pass reads thousands of segments' ends).
    Raises as open_file does; the descriptor is the caller's to close."""
    return _open_regular(path, os.O_RDONLY | os.O_NONBLOCK)


def _open_regular(path: str, flags: int, mode: int = 0o644) -> tuple[int, os.stat_result]:
    """`path` opened with O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK added to `flags`, and its fstat;
    UnsafeLogFileError (nothing left open) when it is a link or no regular file."""
    try:
        fd = os.open(path, flags | _NOFOLLOW | os.O_NONBLOCK, mode)
    except OSError as exc:
        _refuse(path, exc)
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeLogFileError(path, _kind(st.st_mode))
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _refuse(path: str, exc: OSError) -> None:
    """UnsafeLogFileError when the open of `path` failed with `exc` for what is there: a link, or
    anything else than a regular file."""
    if exc.errno in (errno.ELOOP, errno.EEXIST) and os.path.islink(path):
        raise UnsafeLogFileError(path) from None
    if exc.errno in (errno.ENXIO, errno.EISDIR, errno.ENODEV, errno.EWOULDBLOCK):
        with contextlib.suppress(OSError):
            found = os.lstat(path).st_mode
            if not stat.S_ISREG(found):
                raise UnsafeLogFileError(path, _kind(found)) from None


def no_follow(path: str, flags: int) -> int:
    """An `opener` for open(): the file is opened by open_file."""
    return open_file(path, flags)


def temporary(path: str, flags: int) -> int:
    """An `opener` for open() (mode "w"/"wb"): the temporary `path`, empty. Created exclusively;
    a regular file already there (a crash's leftover, or a concurrent writer's of the same bytes,
    as before) is truncated and reused, unless it has other hard links: that name is unlinked and
    the file created anew. A symbolic link, a directory or anything else is refused with
    UnsafeLogFileError and left in place."""
    flags &= ~(os.O_CREAT | os.O_EXCL | os.O_TRUNC)
    for _ in range(3):
        try:
            return open_file(path, flags | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            pass
        try:
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafeLogFileError(path, _kind(st.st_mode))
            fd = open_file(path, flags)
        except FileNotFoundError:
            continue
        found = os.fstat(fd)
        if found.st_ino == st.st_ino and found.st_nlink == 1:
            os.ftruncate(fd, 0)
            return fd
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)   # another name for someone's file: never written into
    raise UnsafeLogFileError(path, "recreated by someone else each time it was removed")


def check_not_link(path: str) -> None:
    """UnsafeLogFileError when `path` is a symbolic link (nothing when it is missing)."""
    if os.path.islink(path):
        raise UnsafeLogFileError(path)


def connect_sqlite(path: str, query: str = "", **kwargs) -> sqlite3.Connection:
    """`sqlite3.connect` to the database file `path` (a plain path; `query` such as
    "mode=ro&immutable=1" opens it as a URI). UnsafeLogFileError when the database, its -wal,
    -shm or -journal is a symbolic link. SQLite itself opens those side files with O_NOFOLLOW
    (3.40); the main file it would follow, so a link swapped in after the check is caught by
    comparing the file SQLite opened with the one meant."""
    for side in _SQLITE_SIDE_FILES:
        check_not_link(path + side)
    if query:
        uri = "file:" + path.replace("?", "%3f").replace("#", "%23") + "?" + query
        db = sqlite3.connect(uri, uri=True, **kwargs)
    else:
        db = sqlite3.connect(path, **kwargs)
    meant = os.path.join(os.path.realpath(os.path.dirname(path) or "."), os.path.basename(path))
    opened = db.execute("PRAGMA database_list").fetchone()[2]
    if opened and opened != meant:
        db.close()
        raise UnsafeLogFileError(path)
    return db


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"
