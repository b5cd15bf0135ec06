"""The planner and a time-rolled log: the last segment is kept as the one being written unless a
roll sealed it (SegmentSnapshot.sealed), in which case it is decided as any sealed segment."""

from __future__ import annotations

import dataclasses

from plan_builders import NOW, group, log, policies, policy, plan_by_policy

from policies import ACTIVE, DELETE, KEEP, RESERVED, parse_config


def _with_last_sealed(snapshot, sealed: bool = True):
    *head, last = snapshot.segments
    return dataclasses.replace(snapshot, segments=(*head, dataclasses.replace(last, active=not sealed,
                                                                             sealed=sealed)))


def _decide(snapshot, **keys):
    return plan_by_policy([snapshot], policies(default=policy(delete_at_hours=list(range(24)), reserve="1h", **keys)),
                NOW).log("staging").decisions


def test_an_expired_sealed_last_segment_is_deleted_and_an_unsealed_one_kept():
    decisions = _decide(_with_last_sealed(log([5, 4])))
    assert [d.action for d in decisions] == [DELETE, DELETE]
    decisions = _decide(_with_last_sealed(log([5, 4]), sealed=False))
    assert [d.action for d in decisions] == [DELETE, KEEP] and ACTIVE in decisions[1].reasons


def test_a_young_sealed_last_segment_is_reserved_not_active():
    decisions = _decide(_with_last_sealed(log([5, 0.5])))
    assert decisions[1].action == KEEP and decisions[1].reasons == (RESERVED,)


def test_unconsumed_records_still_keep_a_sealed_last_segment():
    snapshot = _with_last_sealed(log([5, 4], groups=[group("etl", 0)]))
    decisions = _decide(snapshot)
    assert [d.action for d in decisions] == [KEEP, KEEP]
    assert all(any(r.startswith("unconsumed") for r in d.reasons) for d in decisions), decisions


def test_roll_after_is_a_positive_duration_or_null_and_may_be_overridden_per_log():
    config = parse_config("logs: {a: {path: /tmp/a, overrides: {roll_after: 10m}}, b: {path: /tmp/b}}\n"
                          "policies: {default: {roll_after: 1h}}\n")
    assert (config.policy_for("a").roll_after, config.policy_for("b").roll_after) == (600.0, 3600.0)
    assert parse_config("logs: {a: {path: /tmp/a}}\n").policy_for("a").roll_after is None
