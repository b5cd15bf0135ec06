"""Deciding what retention deletes and compacts: configuration, triggers, plans with reasons, liveness.

The package is pure: it reads no clock, sleeps never and touches the filesystem only to load a
configuration file. Dependencies point inward only; it imports nothing from ``commitlog`` or
``retention``. Everything exported is immutable or a pure function, so it is thread-safe.

Typical use::

    config = load_config("conf/retention.yaml")
    the_plan = plan(snapshots, config.policies, now)   # now: an aware datetime from the caller's clock
    for decision in the_plan.log("staging").to_delete: ...
"""

from policies.compaction import (
    COMPACTION_REASONS,
    DISABLED,
    LIVE_RATIO,
    NO_ROOM,
    YOUNG,
    CompactionOutput,
    CompactionPlan,
    CompactionSegment,
    plan_compaction,
    should_compact_under_pressure,
    throttle_delay,
    within_pass_budget,
)
from policies.config import (
    DEFAULT_POLICY,
    CompactionConfig,
    ConfigError,
    DiskConfig,
    HungConfig,
    LogConfig,
    PolicyConfig,
    RetentionConfig,
    ServiceConfig,
)
from policies.liveness import CAUSES, DEAD, SUPERSEDED, TOMBSTONE, KeyIndex, LivenessRule, PendingRanges, count_dropped
from policies.planner import (
    ACTIONS,
    DELETE,
    DELETED,
    FAILED,
    HUNG,
    KEEP,
    LogPlan,
    Plan,
    SegmentDecision,
    UnconsumedRange,
    plan,
    stale_groups,
)
from policies.loading import load_config, parse_config
from policies.pressure import LEVEL_CLEAN, LEVEL_FORCE, LEVEL_NAMES, LEVEL_OK, LEVEL_REFUSE, Pressure, pressure
from policies.reasons import (
    ACTIVE,
    BATCH_LIMIT,
    HELD,
    NOT_ATTEMPTED,
    NO_TRIGGER,
    PREFIX,
    REASONS,
    RESERVED,
    describe_reason,
    unconsumed,
    unconsumed_group,
)
from policies.snapshot import DiskSnapshot, GroupSnapshot, HungSegment, LogSnapshot, SegmentSnapshot
from policies.triggers import (
    DISK_CLEAN,
    DISK_FORCE,
    MANUAL,
    NO_MANUAL_TRIGGER,
    REFUSE_WRITES,
    TIME_WINDOW,
    TRIGGERS,
    ManualTrigger,
    active_triggers,
    disk_forces,
    disk_triggers,
    force_continues,
    in_delete_window,
)
from policies.units import (
    format_duration,
    format_size,
    humanize_duration,
    parse_duration,
    parse_hours,
    parse_ratio,
    parse_size,
)

__all__ = [
    # configuration
    "DEFAULT_POLICY",
    "CompactionConfig",
    "ConfigError",
    "DiskConfig",
    "HungConfig",
    "LogConfig",
    "PolicyConfig",
    "RetentionConfig",
    "ServiceConfig",
    "load_config",
    "parse_config",
    # units
    "format_duration",
    "format_size",
    "humanize_duration",
    "parse_duration",
    "parse_hours",
    "parse_ratio",
    "parse_size",
    # snapshot (the planner's input)
    "DiskSnapshot",
    "GroupSnapshot",
    "HungSegment",
    "LogSnapshot",
    "SegmentSnapshot",
    # triggers
    "DISK_CLEAN",
    "DISK_FORCE",
    "MANUAL",
    "NO_MANUAL_TRIGGER",
    "REFUSE_WRITES",
    "TIME_WINDOW",
    "TRIGGERS",
    "ManualTrigger",
    "active_triggers",
    "disk_forces",
    "disk_triggers",
    "force_continues",
    "in_delete_window",
    # pressure levels (the scheduler's)
    "LEVEL_CLEAN",
    "LEVEL_FORCE",
    "LEVEL_NAMES",
    "LEVEL_OK",
    "LEVEL_REFUSE",
    "Pressure",
    "pressure",
    # reasons
    "ACTIVE",
    "BATCH_LIMIT",
    "HELD",
    "NOT_ATTEMPTED",
    "NO_TRIGGER",
    "PREFIX",
    "REASONS",
    "RESERVED",
    "describe_reason",
    "unconsumed",
    "unconsumed_group",
    # planning
    "ACTIONS",
    "DELETE",
    "DELETED",
    "FAILED",
    "HUNG",
    "KEEP",
    "LogPlan",
    "Plan",
    "SegmentDecision",
    "UnconsumedRange",
    "plan",
    "stale_groups",
    # liveness (what compaction drops)
    "CAUSES",
    "DEAD",
    "SUPERSEDED",
    "TOMBSTONE",
    "KeyIndex",
    "LivenessRule",
    "PendingRanges",
    "count_dropped",
    # compaction (what a pass rewrites)
    "COMPACTION_REASONS",
    "DISABLED",
    "LIVE_RATIO",
    "NO_ROOM",
    "YOUNG",
    "CompactionOutput",
    "CompactionPlan",
    "CompactionSegment",
    "plan_compaction",
    "should_compact_under_pressure",
    "throttle_delay",
    "within_pass_budget",
]
