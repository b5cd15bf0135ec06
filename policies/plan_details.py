"""The planner's explanations: each formatter turns the facts a decision kept
(`SegmentDecision.detail_facts`) into the words `retention plan` prints beside a reason or a
trigger. Called only when an explanation is read, never while planning. Pure.
"""

from __future__ import annotations

from datetime import datetime, timezone

from policies.config import PolicyConfig
from policies.plans import UnconsumedRange
from policies.triggers import local_hour
from policies.units import format_hours, humanize_duration, humanize_size

__all__ = ["archived_detail", "batch_detail", "clean_detail", "expired_detail", "force_detail", "forced_detail", "manual_detail", "no_trigger_detail", "prefix_detail", "reserved_detail", "retried_detail", "size_cap_detail", "unconsumed_detail", "waiting_detail", "window_detail"]


def reserved_detail(reserve: float, age: float) -> str:
    return f"younger than {humanize_duration(reserve)}, {humanize_duration(age)} old"


def unconsumed_detail(found: UnconsumedRange) -> str:
    return f"{found.group} has not consumed offsets {found.first_offset} to {found.end_offset - 1}"


def forced_detail(held_for: float, force_after: float) -> str:
    return f"held for {humanize_duration(held_for)}, past force_after {humanize_duration(force_after)}"


def retried_detail(held_for: float, since_attempt: float) -> str:
    return f"held for {humanize_duration(held_for)}, last attempt {humanize_duration(since_attempt)} ago"


def waiting_detail(held_for: float, next_in: float) -> str:
    return f"held for {humanize_duration(held_for)}, next attempt in {humanize_duration(next_in)}"


def force_detail(projected_ratio: float, target: float) -> str:
    return f"disk {projected_ratio:.1%} used before it, deleting down to {target:.0%}"


def prefix_detail(first_kept: str) -> str:
    return f"{first_kept} is kept"


def batch_detail(files_per_pass: int) -> str:
    return f"{files_per_pass} deletions already planned"


def no_trigger_detail(delete_at_hours: tuple[int, ...], used_ratio: float, clean_ratio: float,
                       retention_bytes: int | None, log_bytes: int) -> str:
    hours = f"delete_at_hours {format_hours(delete_at_hours)} not now" if delete_at_hours else "no delete hours"
    cap = "" if retention_bytes is None else \
        f", size {humanize_size(log_bytes)} within retention_bytes {humanize_size(retention_bytes)}"
    return (f"{hours}, disk {used_ratio:.1%} used "
            f"(clean above {clean_ratio:.0%}){cap}, no manual pass")


def expired_detail(age: float, reserve: float) -> str:
    return f"{humanize_duration(age)} since its last write, reserve {humanize_duration(reserve)}"


def window_detail(policy: PolicyConfig, now: datetime) -> str:
    return f"hour {local_hour(policy, now):02d} is in delete_at_hours {format_hours(policy.delete_at_hours)}"


def clean_detail(used_ratio: float, clean_ratio: float) -> str:
    return f"disk {used_ratio:.1%} used, above clean_ratio {clean_ratio:.0%}"


def manual_detail(remaining: int, forcing: bool) -> str:
    """`remaining` counts the pass that reads this: 1 is the request's last (or only) pass."""
    after = remaining - 1
    left = f"{after} more pass{'es' if after != 1 else ''} of it after this one" if after else "its last pass"
    return f"an operator's request, {left}" + (", forcing" if forcing else "")


def archived_detail(archived_at: float, url: str) -> str:
    at = datetime.fromtimestamp(archived_at, timezone.utc).isoformat(timespec="seconds")
    return f"in the archive {url} since {at}"


def size_cap_detail(log_bytes: int, retention_bytes: int) -> str:
    return f"size {humanize_size(log_bytes)} > retention_bytes {humanize_size(retention_bytes)}"
