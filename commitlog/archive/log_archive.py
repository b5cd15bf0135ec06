"""One log's part of an archive tier: its objects' keys, its manifest, a sealed segment's upload.

Keys, under the tier's prefix: `<log>/<20-digit base>.log` (the segment's bytes up to its end
marker), `<log>/<20-digit base>.index` (its sealed index), `<log>/manifest.json` and
`<log>/tier-identity.json` (`identity`: the proof the tier is still the same). `<log>` is the
log directory's name unless given: two hosts archiving logs of one name to one prefix give each
its own name.

Thread-safe for reads; one uploader per log at a time (the retention owner's lock serialises
them across processes).
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import BinaryIO

from ..errors import ArchiveCorruptError, ArchiveMissingError, CorruptLogError
from ..layout import TMP_SUFFIX, archive_manifest_path, archive_state_path, index_path, segment_name
from ..safeopen import no_follow, temporary
from ..segments.index import without_base
from ..segments.segment import SegmentInfo
from . import identity, versions
from .manifest import MANIFEST_KEY, ArchivedSegment, Manifest
from .tiers import Tier
from .validation import log_name


class LogArchive:
    def __init__(self, tier: Tier, log_dir: str | None, name: str | None = None) -> None:
        """`log_dir` None: a reader with no local directory (no manifest cached); the name must be
        one safe key component (validation.log_name), else InvalidArgumentError."""
        self.tier = tier
        self.log_dir = log_dir
        self.name = log_name(name or os.path.basename(os.path.normpath(log_dir or "")))
        self._cache = None if log_dir is None else archive_manifest_path(log_dir)

    def key(self, file_name: str) -> str:
        return f"{self.name}/{file_name}"

    # ------------------------------------------------------------------ the manifest
    def manifest(self) -> Manifest:
        """The manifest on the tier (an empty one when there is none), as readers see it: a
        cluster log's newest version (commitlog.archive.versions), else `manifest.json`. The local
        copy eviction trusts is left alone: only a tier that proved its identity (`confirm`,
        `write_manifest`) writes it, never another tier reached at the same URL."""
        found = versions.newest(self.tier, self.name)
        if found is not None:
            return found[1]
        key = self.key(MANIFEST_KEY)
        data = self.tier.read(key)
        return Manifest(self.name) if data is None else Manifest.from_json(data, self.tier.url, key)

    def confirm(self) -> Manifest:
        """The manifest on the tier once the tier proved it is the one this log archived to
        (`identity`), writing its identity object at first use; the proof is remembered with the
        URL and the boot clock (eviction ages it on that clock). ArchiveMissingError (remembered
        too: eviction stops) when it cannot."""
        state, shown, data, found, why = self._proof()
        if why is not None:
            self._remember(replace(state, missing=why))
            raise ArchiveMissingError(self.tier.url, None, why)
        if shown is None:
            created = identity.new_identity()
            self.tier.put(self.key(identity.IDENTITY_KEY), io.BytesIO(created), len(created))
            shown = identity.parse_identity(created)
        if data is not None:
            self._write_cache(data)
        self._remember(identity.confirmed(state, shown, self.tier.url, _wall_ms(), identity.BootMark.now()))
        return found or Manifest(self.name)

    def doubt(self) -> str | None:
        """Why the tier is not the one this log archived to (`confirm`'s test), writing nothing;
        None when it is, or when it was never used."""
        return self._proof()[-1]

    def _proof(self) -> tuple:
        """The remembered state, the identity the tier shows, its manifest (bytes and parsed, None
        when there is none), and why they do not prove it is this log's tier (None: they do)."""
        state = identity.read_state(self.log_dir)
        shown = identity.parse_identity(self.tier.read(self.key(identity.IDENTITY_KEY)))
        key = self.key(MANIFEST_KEY)
        data = self.tier.read(key)
        found = None if data is None else Manifest.from_json(data, self.tier.url, key)
        return state, shown, data, found, identity.proven(state, shown, manifest_found=data is not None,
                                                           cached=self.cached_manifest(), found=found)

    def forget(self) -> bool:
        """Drop what this host remembers of the tier (its state and manifest copy), for a tier gone
        for good: the next `confirm` meets it as new. True when there was something to drop."""
        dropped = False
        for path in (archive_state_path(self.log_dir), self._cache):
            try:
                os.unlink(path)
                dropped = True
            except FileNotFoundError:
                pass
        return dropped

    def state(self) -> identity.ArchiveState:
        """What this host remembers of the tier (`identity.ArchiveState`)."""
        return identity.read_state(self.log_dir)

    def note(self, **changes) -> None:
        """Remember `changes` to the state (`unconfirmed`: listed segments found without their
        objects, passed over by eviction; `down`: the last upload run's failure, or None)."""
        state = identity.read_state(self.log_dir)
        if any(getattr(state, k) != v for k, v in changes.items()):
            self._remember(replace(state, **changes))

    def _remember(self, state: identity.ArchiveState) -> None:
        try:
            identity.write_state(self.log_dir, state)
        except OSError:
            pass    # a read-only log directory: nothing of it is evicted by this host anyway

    def cached_manifest(self) -> Manifest | None:
        """The manifest as last read or written here, without asking the tier."""
        return None if self.log_dir is None else cached_manifest(self.log_dir, self.name)

    def write_manifest(self, manifest: Manifest) -> None:
        """Replace the manifest on the tier, once the tier shows the identity this host knows
        (a mount gone since the last look must not take a manifest); the local copy follows."""
        state = identity.read_state(self.log_dir)
        if state.tier is not None:
            shown = identity.parse_identity(self.tier.read(self.key(identity.IDENTITY_KEY)))
            why = identity.proven(state, shown, manifest_found=True, cached=None)
            if why is not None:
                self._remember(replace(state, missing=why))
                raise ArchiveMissingError(self.tier.url, None, why)
        data = manifest.to_json()
        self.tier.put(self.key(MANIFEST_KEY), io.BytesIO(data), len(data))
        self._write_cache(data)
        if state.tier is not None:
            self._remember(identity.confirmed(state, state.tier, self.tier.url, _wall_ms(),
                                                identity.BootMark.now()))

    def _write_cache(self, data: bytes) -> None:
        if self._cache is None:
            return
        tmp = self._cache + TMP_SUFFIX
        try:
            with open(tmp, "wb", opener=temporary) as f:
                f.write(data)
            os.replace(tmp, self._cache)
        except OSError:
            pass    # a cache: a read-only log directory keeps reading the tier's

    # ------------------------------------------------------------------ segments
    def put_segment(self, info: SegmentInfo, now_ms: int,
                    pace: Callable[[BinaryIO], BinaryIO] = lambda f: f) -> ArchivedSegment:
        """Upload sealed segment `info`: its bytes up to its end marker, then its index, each
        verified by the tier, from files held open for the whole upload (a compaction's swap
        renames a new file in; the one read stays whole). FileNotFoundError when it is removed
        locally first."""
        with open(info.path, "rb", opener=no_follow) as data, \
                open(index_path(info.path), "rb", opener=no_follow) as index:
            if os.fstat(data.fileno()).st_size < info.used_bytes:
                raise CorruptLogError(info.path, None, f"shorter than its {info.used_bytes} "
                                                       f"used bytes")
            index_bytes = os.fstat(index.fileno()).st_size
            stored = self.tier.put(self.key(segment_name(info.base_offset)), pace(data),
                                   info.used_bytes)
            stored_index = self.tier.put(self.key(index_name(info.base_offset)), pace(index),
                                         index_bytes)
        return ArchivedSegment(info.base_offset, info.end_offset, info.used_bytes, stored.sha256,
                               index_bytes, stored_index.sha256, info.last_timestamp_ms, now_ms)

    def drop_objects(self, base_offset: int) -> None:
        """Delete the objects of the segment at `base_offset` (a missing one is no error)."""
        for name in (segment_name(base_offset), index_name(base_offset)):
            self.tier.delete(self.key(name))

    def absent(self, segment: ArchivedSegment) -> list[str]:
        """Cheap problems of `segment`'s objects on the tier: missing, or of another size than
        listed (no object is read: `verify` hashes)."""
        problems = []
        for name, size in ((segment.data_file, segment.bytes), (segment.index_file, segment.index_bytes)):
            found = self.tier.size(self.key(name))
            if found is None:
                problems.append(f"{self.key(name)}: missing")
            elif found != size:
                problems.append(f"{self.key(name)}: {found} bytes, listed {size}")
        return problems

    def verify(self, segment: ArchivedSegment) -> list[str]:
        """Problems of `segment`'s objects on the tier: missing, another size, another
        checksum (the tier's stored checksum, or the object hashed when it keeps none)."""
        problems = []
        for name, size, sha in ((segment.data_file, segment.bytes, segment.sha256),
                                (segment.index_file, segment.index_bytes, segment.index_sha256)):
            key = self.key(name)
            found = self.tier.head(key)
            if found is None:
                problems.append(f"{key}: missing")
            elif found.size != size:
                problems.append(f"{key}: {found.size} bytes, recorded {size}")
            elif found.sha256 != sha:
                problems.append(f"{key}: SHA-256 {found.sha256}, recorded {sha}")
        return problems


def cached_manifest(log_dir: str, name: str) -> Manifest | None:
    """The manifest of log `name` as last read from or written to its tier by this host (the copy
    in `log_dir`); None when there is none, it is unreadable, or it is another log's."""
    path = archive_manifest_path(log_dir)
    try:
        with open(path, "rb", opener=no_follow) as f:
            manifest = Manifest.from_json(f.read(), path, MANIFEST_KEY)
    except (FileNotFoundError, ArchiveCorruptError):
        return None
    return manifest if manifest.log == name else None


def _wall_ms() -> int:
    return int(time.time() * 1000)


def staged_index(path: str) -> bytes | None:
    """The sealed index file at `path` as an object readable at any base a manifest gives its
    segment (the base it records dropped: commitlog.segments.index.without_base); None when it
    is no sealed index."""
    with open(path, "rb", opener=no_follow) as f:
        return without_base(f.read())


def index_name(base_offset: int) -> str:
    return os.path.basename(index_path(segment_name(base_offset)))
