"""Deciding what retention deletes and compacts: configuration, triggers, plans with reasons, liveness.

The package is pure: it reads no clock, sleeps never and touches the filesystem only to load a
configuration file. Dependencies point inward only; it imports nothing from ``commitlog`` or
``retention``. Everything exported is immutable or a pure function, so it is thread-safe.

Typical use::

    config = load_config("conf/retention.yaml")
    pass_plan = plan(snapshots, config.policies_in_force, now)   # now: aware, from the caller's clock
    for decision in pass_plan.log("staging").to_delete: ...
"""

# Each module's __all__ is its public API, listed once there; the package exports all of them.
from policies import archive_expiry as _archive_expiry, archive_trust as _archive_trust, byte_budgets as _byte_budgets
from policies import clock_guard as _clock_guard
from policies import compaction as _compaction, config as _config, liveness as _liveness, loading as _loading
from policies import pacing as _pacing
from policies import planner as _planner, pressure as _pressure, reasons as _reasons, snapshot as _snapshot
from policies import triggers as _triggers, units as _units
from policies import staged_collection as _staged_collection, tier_lease as _tier_lease
from policies.archive_expiry import *  # noqa: F401,F403
from policies.clock_guard import *  # noqa: F401,F403
from policies.archive_trust import *  # noqa: F401,F403
from policies.byte_budgets import *  # noqa: F401,F403
from policies.compaction import *  # noqa: F401,F403
from policies.config import *  # noqa: F401,F403
from policies.liveness import *  # noqa: F401,F403
from policies.loading import *  # noqa: F401,F403
from policies.pacing import *  # noqa: F401,F403
from policies.planner import *  # noqa: F401,F403
from policies.pressure import *  # noqa: F401,F403
from policies.reasons import *  # noqa: F401,F403
from policies.snapshot import *  # noqa: F401,F403
from policies.staged_collection import *  # noqa: F401,F403
from policies.tier_lease import *  # noqa: F401,F403
from policies.triggers import *  # noqa: F401,F403
from policies.units import *  # noqa: F401,F403

__all__ = [
    *_config.__all__, *_loading.__all__, *_units.__all__,       # configuration
    *_snapshot.__all__,                                         # the planner's input
    *_triggers.__all__, *_pressure.__all__, *_reasons.__all__,  # what starts a pass; why a segment stays
    *_planner.__all__, *_clock_guard.__all__,                   # deletion plans; a stepped clock
    *_byte_budgets.__all__,                                          # byte budgets shared by logs
    *_pacing.__all__,                                           # how fast a pass removes bytes
    *_liveness.__all__, *_compaction.__all__,                   # what is live; compaction plans
    *_archive_expiry.__all__, *_archive_trust.__all__,          # the archive's total retention; trusting it
    *_tier_lease.__all__, *_staged_collection.__all__,          # a cluster log's tier: its lease, its collector
]
