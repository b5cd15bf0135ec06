"""Reserving disk space for a new file: segments and their indexes are created at their full size
with posix_fallocate, so that writing through a mapping never meets a full disk (no SIGBUS)."""

from __future__ import annotations

import contextlib
import errno
import os

from ..errors import StoreFullError
from ..safeopen import open_file


def allocate_file(path: str, size: int, *, exclusive: bool) -> int:
    """Create `path` with `size` bytes really reserved and return its descriptor (read-write);
    ENOSPC becomes StoreFullError, and a file that could not be reserved is removed."""
    fd = open_file(path, os.O_RDWR | os.O_CREAT | (os.O_EXCL if exclusive else 0))
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StoreFullError(f"no space left to allocate {size} bytes for {path}") from exc
        raise
    return fd
