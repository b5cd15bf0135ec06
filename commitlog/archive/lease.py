"""A lease on a cluster log's tier: which one process (a host's retention sidecar) owns the log's
tier-wide work, built on `Tier.create` alone (no conditional overwrite needed).

Keys under the log's folder `<log>/`:
    lease/<20-digit term>.json    term n of the lease: {"owner", "host", "pid", "granted_at_ms",
                                  "expires_at_ms"}; `owner` is the holder's id (unique per process)

The newest term is the lease. Its holder renews by creating term n+1 before term n expires;
another process takes over by creating term n+1 once term n expired (by the margin its decision
allows, `policies.tier_lease`). Both create the same key, so one wins: never two holders of one
term. Older terms are pruned best effort (the newest KEEP stay). Thread- and process-safe: the
tier's create is the only coordination.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from ..errors import ArchiveCorruptError, ArchiveError
from .tiers import Tier
from .validation import epoch_ms, stored_int
from .versions import numbered

__all__ = ["KEEP", "LEASE", "LeaseTerm", "create_term", "lease_key", "newest_term", "prune"]

LEASE = "lease"
KEEP = 5                              # terms kept on the tier
_RELISTS = 5                          # a listed term pruned before it was read: list again


@dataclass(frozen=True)
class LeaseTerm:
    """One term of the lease: `owner` holds it until `expires_at_ms` (its own clock's)."""

    term: int
    owner: str
    host: str
    pid: int
    granted_at_ms: int
    expires_at_ms: int

    def to_json(self) -> bytes:
        body = asdict(self)
        del body["term"]
        return json.dumps(body, sort_keys=True).encode()


def lease_key(name: str, term: int) -> str:
    return f"{name}/{LEASE}/{term:020d}.json"


def _terms(tier: Tier, name: str) -> list[int]:
    return numbered(tier, f"{name}/{LEASE}/")


def _parse(data: bytes, tier: Tier, key: str, term: int) -> LeaseTerm:
    try:
        body = json.loads(data)
        made = LeaseTerm(term, body["owner"], body["host"], body["pid"], body["granted_at_ms"],
                         body["expires_at_ms"])
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise ArchiveCorruptError(tier.url, key, f"not a lease term ({str(exc)[:80]})") from None
    if not (isinstance(made.owner, str) and isinstance(made.host, str)
            and stored_int(made.pid) and epoch_ms(made.granted_at_ms) and epoch_ms(made.expires_at_ms)):
        raise ArchiveCorruptError(tier.url, key, "not a lease term (a field of the wrong type or out of "
                                                 "range: times are ms since the epoch, before the year 10000)")
    return made


def newest_term(tier: Tier, name: str) -> LeaseTerm | None:
    """The lease's newest term; None when no term was ever created."""
    for _ in range(_RELISTS):
        terms = _terms(tier, name)
        if not terms:
            return None
        key = lease_key(name, terms[-1])
        data = tier.read(key)
        if data is not None:
            return _parse(data, tier, key, terms[-1])
    raise ArchiveError(tier.url, f"{name}/{LEASE}/", f"the newest lease term vanished {_RELISTS} times "
                       f"while it was read")


def create_term(tier: Tier, name: str, made: LeaseTerm) -> bool:
    """Create term `made.term`; False when another process created it first. Older terms beyond
    the newest KEEP are then pruned, best effort."""
    if tier.create(lease_key(name, made.term), made.to_json()) is None:
        return False
    try:
        prune(tier, name)
    except ArchiveError:
        pass
    return True


def prune(tier: Tier, name: str, keep: int = KEEP) -> None:
    for term in _terms(tier, name)[:-keep]:
        tier.delete(lease_key(name, term))
