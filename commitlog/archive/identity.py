"""Whether a log's archive tier is still the tier it archived to, and what this host may trust of it.

A tier proves itself with an identity object, `<log>/tier-identity.json` (a random id written at
first use), that this host remembers in the log directory (layout.ARCHIVE_STATE_FILE) with the time
the tier last confirmed its manifest. An unmounted `file://` directory or an S3 bucket recreated
empty cannot show the id it was given: such a tier is *missing* (`ArchiveMissingError`), and so is
a tier whose manifest is gone while this host's copy lists segments. A missing tier is never taken
for an empty one: nothing is reset, uploads stop, and local eviction trusts nothing it lists until
the tier proves itself again (remounted, the bucket restored).

The local state, `{"tier", "url", "confirmed_at_ms", "confirmed_boot", "confirmed_uptime", "missing",
"unconfirmed", "down"}`: a proof is aged on the boot clock (boot id and uptime: a wall-clock step
does not age it; one from another boot is not recent) and holds only at the URL it was made at; `missing`
says why the tier is not trusted now (None: it is); `unconfirmed` lists the base offsets of listed
segments whose objects the tier was found without (or of another size); `down`, the last upload
run's failure. Eviction uses `trusted_manifest`; a disk force asks `ArchiveState.up`.

Process-safe as its files are (each replaced whole); one uploader per log writes it.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from dataclasses import asdict, dataclass, replace

from .. import bootclock
from ..layout import TMP_SUFFIX, archive_state_path
from ..safeopen import no_follow, temporary
from .manifest import Manifest

IDENTITY_KEY = "tier-identity.json"


@dataclass(frozen=True)
class BootMark:
    """A moment on this host's boot clock (commitlog.bootclock): comparable on one boot only."""
    boot: str
    uptime: float

    @classmethod
    def now(cls) -> BootMark | None:
        """This moment; None where the boot clock cannot be read (nothing is then recent)."""
        boot, seconds = bootclock.boot_id(), bootclock.uptime()
        return None if boot is None or seconds is None else cls(boot, seconds)


@dataclass(frozen=True)
class ArchiveState:
    tier: str | None = None            # the id the tier proved; None before first use
    url: str | None = None             # the URL it proved it at
    confirmed_at_ms: int | None = None  # wall time of the last proof (shown; never aged)
    missing: str | None = None         # why the tier is not trusted now
    unconfirmed: tuple[int, ...] = ()  # listed segments whose objects the tier was found without
    down: str | None = None            # the last upload run's failure; None after a good one
    confirmed_boot: str | None = None  # the boot clock at the last proof: boot id ...
    confirmed_uptime: float | None = None  # ... and seconds since boot (what ages it)

    def age_s(self, now: BootMark | None) -> float | None:
        """Boot-clock seconds since the last proof; None when it cannot be aged (none recorded,
        another boot, or no boot clock now): then it is not recent."""
        if now is None or self.confirmed_boot != now.boot or self.confirmed_uptime is None \
                or now.uptime < self.confirmed_uptime:
            return None
        return now.uptime - self.confirmed_uptime

    def up(self, now: BootMark | None, within_s: float, url: str) -> bool:
        """Trusted and its last upload run did not fail: it can take what the disk cannot keep."""
        return self.down is None and self.trusted(now, within_s, url) is None

    def trusted(self, now: BootMark | None, within_s: float, url: str) -> str | None:
        """None when the tier at `url` may be acted on at boot-clock moment `now` (it proved itself
        there within `within_s` seconds on this boot: a wall-clock step changes nothing); else why
        not."""
        if self.missing is not None:
            return self.missing
        if self.confirmed_at_ms is None and self.confirmed_boot is None:
            return "the tier has not confirmed its manifest to this host yet"
        if self.url != url:
            return f"the tier was last confirmed at {self.url}, not at {url}"
        age = self.age_s(now)
        if age is None:
            return "the tier has not confirmed its manifest to this host since it booted"
        if age > within_s:
            return f"the tier last confirmed its manifest {age:.0f}s ago (more than {within_s:g}s)"
        return None


def read_state(log_dir: str) -> ArchiveState:
    """The log's archive state as this host keeps it (a fresh one when there is none or it is
    unreadable: nothing confirmed, so nothing evicted on it)."""
    try:
        with open(archive_state_path(log_dir), "rb", opener=no_follow) as f:
            body = json.loads(f.read(1 << 20))
        boot, seconds = body.get("confirmed_boot"), body.get("confirmed_uptime")
        clocked = isinstance(boot, str) and isinstance(seconds, (int, float)) and not isinstance(seconds, bool) \
            and math.isfinite(seconds) and seconds >= 0
        return ArchiveState(body.get("tier"), body.get("url"), body.get("confirmed_at_ms"), body.get("missing"),
                            tuple(int(b) for b in body.get("unconfirmed", ())), body.get("down"),
                            boot if clocked else None, float(seconds) if clocked else None)
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


def confirmed(state: ArchiveState, tier_id: str, url: str, now_ms: int, boot: BootMark | None) -> ArchiveState:
    """`state` once the tier at `url` showed `tier_id` at wall time `now_ms`, boot-clock moment `boot`."""
    return replace(state, tier=tier_id, url=url, confirmed_at_ms=now_ms, missing=None,
                   confirmed_boot=boot.boot if boot else None, confirmed_uptime=boot.uptime if boot else None)


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


def trusted_manifest(manifest: Manifest | None, state: ArchiveState, *, now: BootMark | None,
                     within_s: float, url: str) -> tuple[Manifest | None, str | None]:
    """What local eviction may take as archived: `manifest` (this host's copy) when the tier at
    `url` confirmed it within `within_s` boot-clock seconds (`ArchiveState.trusted`), less the
    segments found without their objects; else None and why."""
    why = state.trusted(now, within_s, url)
    if why is not None or manifest is None:
        return None, why
    return manifest.without(state.unconfirmed), None
