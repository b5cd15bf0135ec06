"""What this process may do with a log directory and the files around it, named with who it runs
as, so that a permission problem is reported as one: never as a log not created yet, nor as a
corrupt file.

    process_user()             "uid 65534 (nobody)": this process's effective user
    unreadable(path)           why this process cannot read the log directory `path`; None when it
                               can, or when nothing is there (a log not created yet)
    unwritable(path)           why it cannot change the log directory `path` (a read-only
                               filesystem, or no write permission on the directory or on a file
                               a removal or a consumer commit writes in place); None when it can
    cannot_append(path)        why it cannot append to the file `path`, created with its missing
                               directories when absent (an audit trail); None when it can
    on_readonly_filesystem(d)  whether `d` is on a filesystem mounted read-only
    LogGate(path, ...)         what an open log checks before it acts: open, and its files changeable

Permissions are asked of the kernel (faccessat with the effective ids), so ACLs count and root
passes everything but a read-only mount. Stateless; each call costs a few stat-like syscalls.
"""

from __future__ import annotations

import os
import pwd
import stat

from .errors import LogClosedError, LogNotWritableError
from .layout import meta_path, remove_lock_path, start_offset_path, state_path

__all__ = ["LogGate", "cannot_append", "on_readonly_filesystem", "process_user", "unreadable", "unwritable"]

_EFFECTIVE = os.access in os.supports_effective_ids


def process_user() -> str:
    """This process's effective user: "uid N (name)", or "uid N" when it has no name."""
    uid = os.geteuid()
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def on_readonly_filesystem(directory: str) -> bool:
    """Whether `directory` is on a filesystem mounted read-only (False when it does not exist)."""
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _may(path: str, mode: int) -> bool:
    return os.access(path, mode, effective_ids=_EFFECTIVE)


def _owned(st: os.stat_result) -> str:
    """"drwx------, owner uid 0 (root)": what the operator compares with the process's user."""
    try:
        name = f" ({pwd.getpwuid(st.st_uid).pw_name})"
    except KeyError:
        name = ""
    return f"{stat.filemode(st.st_mode)}, owner uid {st.st_uid}{name}"


def unreadable(path: str) -> str | None:
    """Why this process may not read the log directory `path` (a parent it may not pass, the
    directory, its meta.json or state.db); None when it may, or when there is no directory there."""
    try:
        st = os.stat(path)
    except PermissionError:
        return (f"permission denied: {process_user()} may not reach {path} (a directory above it "
                f"does not let it through)")
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return None
    if not _may(path, os.R_OK | os.X_OK):
        return f"permission denied: {process_user()} may not read the directory {path} ({_owned(st)})"
    for name in (meta_path(path), state_path(path)):
        try:
            file_st = os.stat(name)
        except OSError:
            continue
        if not _may(name, os.R_OK):
            return f"permission denied: {process_user()} may not read {name} ({_owned(file_st)})"
    return None


def unwritable(path: str, files: tuple[str, ...] | None = None) -> str | None:
    """Why this process may not change the log directory `path`: a read-only filesystem, or no
    write permission on the directory or on one of `files` that exists (default: what a removal
    or a consumer commit writes in place: state.db, start.offset, .remove.lock). None when it
    may, or when `path` is not a directory."""
    if not os.path.isdir(path):
        return None
    if on_readonly_filesystem(path):
        return "it is on a read-only filesystem"
    if files is None:
        files = (state_path(path), start_offset_path(path), remove_lock_path(path))
    for target in (path, *files):
        try:
            st = os.stat(target)
        except OSError:
            continue
        if not _may(target, os.W_OK | (os.X_OK if target == path else 0)):
            what = "the directory" if target == path else target
            return f"permission denied: {process_user()} may not write {what} ({_owned(st)})"
    return None


def cannot_append(path: str) -> str | None:
    """Why this process may not append to the file `path` (opened read-write), creating it and
    its missing directories when absent; None when it may."""
    try:
        st = os.stat(path)
    except PermissionError:
        return f"permission denied: {process_user()} may not reach it (a directory above it does not let it through)"
    except FileNotFoundError:
        st = None
    except OSError as exc:
        return exc.strerror or str(exc)
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            return "it is a directory"
        if on_readonly_filesystem(path):
            return "it is on a read-only filesystem"
        if not _may(path, os.R_OK | os.W_OK):
            return f"permission denied: {process_user()} may not write it ({_owned(st)})"
        return None
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):      # created by the first append: the nearest one decides
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"{parent} is not a directory"
    if on_readonly_filesystem(parent):
        return f"it cannot be created: {parent} is on a read-only filesystem"
    if not _may(parent, os.W_OK | os.X_OK):
        return (f"permission denied: {process_user()} may not create it in {parent} "
                f"({_owned(os.stat(parent))})")
    return None


class LogGate:
    """What an open log and the parts it holds ask before they act: that it is still open
    (`closed`, set by its close: LogClosedError), and that this process may change its files: not
    on a read-only mount (asked again while it is one: a long-lived reader outlives a remount
    read-write) and, for a read-only open (a writer's open checked already), nothing `unwritable`
    says. Thread-safe as the flag it reads."""

    def __init__(self, path: str, readonly: bool, media_readonly: bool) -> None:
        self.path = path
        self.readonly = readonly
        self.closed = False
        self._media_readonly = media_readonly

    def check_open(self) -> None:
        if self.closed:
            raise LogClosedError(f"log {self.path} is closed")

    def media_readonly(self) -> bool:
        if self._media_readonly:
            self._media_readonly = on_readonly_filesystem(self.path)
        return self._media_readonly

    def may_change(self) -> bool:
        """Whether a change could be made here now (a removal left by a crash could be finished)."""
        return not self.media_readonly() and not (self.readonly and unwritable(self.path) is not None)

    def check_change(self, what: str) -> None:
        """`check_open`, then LogNotWritableError naming the log and why it cannot `what`."""
        self.check_open()
        if self.media_readonly():
            raise LogNotWritableError(self.path, f"cannot {what}: it is on a read-only filesystem")
        if self.readonly and (why := unwritable(self.path)) is not None:
            raise LogNotWritableError(self.path, f"cannot {what}: {why}")
