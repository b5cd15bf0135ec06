"""Whether a log's archive tier is still the tier it archived to, and what this host may trust of it.

A tier proves itself with an identity object, `<log>/tier-identity.json` (a random id written at
first use), that this host remembers in the log directory (layout.ARCHIVE_STATE_FILE) with the time
the tier last confirmed its manifest. An unmounted `file://` directory or an S3 bucket recreated
empty cannot show the id it was given: such a tier is *missing* (`ArchiveMissingError`), and so is
a tier whose manifest is gone while this host's copy lists segments. A missing tier is never taken
for an empty one: nothing is reset, uploads stop, and local eviction trusts nothing it lists until
the tier proves itself again (remounted, the bucket restored).

The local state, `{"tier", "url", "confirmed_at_ms", "missing", "unconfirmed", "down"}`: `missing`
says why the tier is not trusted now (None: it is); `unconfirmed` lists the base offsets of listed
segments whose objects the tier was found without (or of another size); `down`, the last upload
run's failure. Eviction uses `trusted_manifest`; a disk force asks `ArchiveState.up`.

Process-safe as its files are (each replaced whole); one uploader per log writes it.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass, replace

from ..layout import TMP_SUFFIX, archive_state_path
from ..safeopen import no_follow, temporary
from .manifest import Manifest

IDENTITY_KEY = "tier-identity.json"


@dataclass(frozen=True)
class ArchiveState:
    tier: str | None = None            # the id the tier proved; None before first use
    url: str | None = None
    confirmed_at_ms: int | None = None  # when the tier last showed its id and its manifest
    missing: str | None = None         # why the tier is not trusted now
    unconfirmed: tuple[int, ...] = ()  # listed segments whose objects the tier was found without
    down: str | None = None            # the last upload run's failure; None after a good one

    def up(self, now_ms: int, within_s: float) -> bool:
        """Trusted and its last upload run did not fail: it can take what the disk cannot keep."""
        return self.down is None and self.trusted(now_ms, within_s) is None

    def trusted(self, now_ms: int, within_s: float) -> str | None:
        """None when the tier's word may be acted on at `now_ms`; else why not."""
        if self.missing is not None:
            return self.missing
        if self.confirmed_at_ms is None:
            return "the tier has not confirmed its manifest to this host yet"
        age = (now_ms - self.confirmed_at_ms) / 1000
        if age > within_s:
            return f"the tier last confirmed its manifest {age:.0f}s ago (more than {within_s:g}s)"
        if age < -within_s:          # the clock stepped back: a time that cannot be aged is no proof
            return f"the tier's last confirmation is {-age:.0f}s ahead of this host's clock"
        return None


def read_state(log_dir: str) -> ArchiveState:
    """The log's archive state as this host keeps it (a fresh one when there is none or it is
    unreadable: nothing confirmed, so nothing evicted on it)."""
    try:
        with open(archive_state_path(log_dir), "rb", opener=no_follow) as f:
            body = json.loads(f.read(1 << 20))
        return ArchiveState(body.get("tier"), body.get("url"), body.get("confirmed_at_ms"),
                            body.get("missing"), tuple(int(b) for b in body.get("unconfirmed", ())),
                            body.get("down"))
    except (OSError, ValueError, TypeError, AttributeError):
        return ArchiveState()


def write_state(log_dir: str, state: ArchiveState) -> None:
    """Replace the log's archive state (never through a symlink planted at either name)."""
    path = archive_state_path(log_dir)
    tmp = path + TMP_SUFFIX
    data = json.dumps({**asdict(state), "unconfirmed": list(state.unconfirmed)}, sort_keys=True).encode()
    with open(tmp, "wb", opener=temporary) as f:
        f.write(data)
    os.replace(tmp, path)


def proven(state: ArchiveState, shown: str | None, *, manifest_found: bool,
           cached: Manifest | None, found: Manifest | None = None) -> str | None:
    """Why a tier showing identity `shown` (None: no identity object) and a manifest (`found`,
    when read) or none is not the tier of `state`, or contradicts this host's copy `cached`;
    None when it is (or is met for the first time)."""
    if state.tier is not None and shown is None:
        return (f"the tier shows no {IDENTITY_KEY}, which it had: not the tier this log archived to "
                f"(unmounted, or recreated empty?)")
    if state.tier is not None and shown != state.tier:
        return f"the tier's {IDENTITY_KEY} is {shown!r}, this log archived to {state.tier!r}"
    if not manifest_found and cached is not None and cached.segments:
        return (f"the tier has no manifest, while this host's copy lists {len(cached.segments)} "
                f"archived segments")
    if found is not None and cached is not None:
        # Only total retention takes a segment out of a manifest, and it moves the start past it.
        lost = [s.base_offset for s in cached.segments
                if s.end_offset > found.start_offset and found.find(s.base_offset) is None]
        if lost:
            return (f"the tier's manifest no longer lists {len(lost)} segments this host's copy lists "
                    f"(from offset {lost[0]}): an older or another manifest")
    return None


def confirmed(state: ArchiveState, tier_id: str, url: str, now_ms: int) -> ArchiveState:
    return replace(state, tier=tier_id, url=url, confirmed_at_ms=now_ms, missing=None)


def new_identity() -> bytes:
    return json.dumps({"tier": uuid.uuid4().hex}).encode()


def parse_identity(data: bytes | None) -> str | None:
    """The id an identity object holds (None when there is none); a malformed one is an id that
    matches nothing."""
    if data is None:
        return None
    try:
        return str(json.loads(data)["tier"])
    except (ValueError, TypeError, KeyError):
        return f"<unreadable {len(data)} bytes>"


def trusted_manifest(manifest: Manifest | None, state: ArchiveState, *, now_ms: int,
                     within_s: float) -> tuple[Manifest | None, str | None]:
    """What local eviction may take as archived: `manifest` (this host's copy) when the tier
    confirmed it within `within_s` seconds, less the segments found without their objects; else
    None and why."""
    why = state.trusted(now_ms, within_s)
    if why is not None or manifest is None:
        return None, why
    return manifest.without(state.unconfirmed), None
