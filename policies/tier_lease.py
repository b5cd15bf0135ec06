"""The lease on a cluster log's tier: when its holder renews it, when another takes it over, and
whether a process owns it now (the tier I/O is commitlog.archive.lease).

Rules, for a lease of ``lease_ms``:

- No term yet: take term 0.
- The newest term is ours: renew (create the next term) once half of it is gone; we own the
  log's tier-wide work while our clock is before its expiry.
- The newest term is another's: wait while our clock is before its expiry plus a margin of one
  lease more; then take it over (create the next term).

Renewing and taking over create the same next term, so one process wins it. Clocks of two hosts
are trusted to differ by less than the margin (one lease: 2 minutes by default; NTP keeps hosts
within milliseconds); a host whose clock steps forward is held by its clock guard, whose trusted
time is what the sidecar decides with. Even two owners at once would each only create manifest
versions (exclusive) and delete objects no version lists. Pure: thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LEASE_HOLD", "LEASE_RENEW", "LEASE_TAKE", "LEASE_WAIT", "LeaseDecision", "lease_decision", "owns_lease"]

LEASE_HOLD, LEASE_RENEW, LEASE_TAKE, LEASE_WAIT = "hold", "renew", "take", "wait"


@dataclass(frozen=True)
class LeaseDecision:
    """What to do: ``action``; for ``renew``/``take`` the term to create and its expiry."""

    action: str
    term: int | None = None
    expires_at_ms: int | None = None


def lease_decision(newest: tuple[int, str, int] | None, me: str, *, now_ms: int, lease_ms: int) -> LeaseDecision:
    """The decision for process ``me`` at ``now_ms`` given the newest term ``(term, owner,
    expires_at_ms)`` (None: none was ever created)."""
    if newest is None:
        return LeaseDecision(LEASE_TAKE, 0, now_ms + lease_ms)
    term, owner, expires = newest
    if owner == me:
        if now_ms >= expires - lease_ms // 2:
            return LeaseDecision(LEASE_RENEW, term + 1, now_ms + lease_ms)
        return LeaseDecision(LEASE_HOLD)
    if now_ms > expires + lease_ms:
        return LeaseDecision(LEASE_TAKE, term + 1, now_ms + lease_ms)
    return LeaseDecision(LEASE_WAIT)


def owns_lease(newest: tuple[int, str, int] | None, me: str, *, now_ms: int) -> bool:
    """Whether ``me`` holds the newest term and it has not expired at ``now_ms``."""
    return newest is not None and newest[1] == me and now_ms < newest[2]
