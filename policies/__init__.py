"""Deciding what retention deletes: configuration, triggers and the per-segment plan with reasons.

The package is pure: it reads no clock, sleeps never and touches the filesystem only to load a
configuration file. Dependencies point inward only; it imports nothing from ``commitlog`` or
``retention``. Everything exported is immutable or a pure function, so it is thread-safe.

Typical use::

    config = load_config("conf/retention.yaml")
    the_plan = plan(snapshots, config.policies, now)   # now: an aware datetime from the caller's clock
    for decision in the_plan.log("staging").to_delete: ...
"""

from policies.config import (
    DEFAULT_POLICY,
    ConfigError,
    DiskConfig,
    HungConfig,
    LogConfig,
    PolicyConfig,
    RetentionConfig,
    ServiceConfig,
    load_config,
    parse_config,
)
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
)
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
    "in_delete_window",
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
]
