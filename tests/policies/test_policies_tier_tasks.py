"""Pure decisions of a cluster log's tier: the lease (policies.tier_lease) and the collector
(policies.staged_collection)."""

from __future__ import annotations

import pytest

from policies import (ATTEMPT_UNLISTED, CLAIM_EXPIRED, JOB_ABORTED, LEASE_HOLD, LEASE_RENEW, LEASE_TAKE, LEASE_WAIT,
                      TOTAL_RESERVE, UNCLAIMED, CollectorLimits, JobState, LeaseDecision, PolicyConfig, dead_reason,
                      lease_decision, markers_left_over, owns_lease, prunable_versions)
from policies.config import ConfigError
from policies.loading import load_config

LEASE = 120_000
LIMITS = CollectorLimits(grace=60.0, claim_grace=3600.0, staged_max_age=86400.0)


def test_the_first_process_takes_term_zero():
    assert lease_decision(None, "a", now_ms=1000, lease_ms=LEASE) == LeaseDecision(LEASE_TAKE, 0, 1000 + LEASE)


def test_the_holder_renews_once_half_is_gone_and_owns_until_expiry():
    term = (3, "a", 200_000)
    assert lease_decision(term, "a", now_ms=139_999, lease_ms=LEASE).action == LEASE_HOLD
    assert lease_decision(term, "a", now_ms=140_000, lease_ms=LEASE) == LeaseDecision(LEASE_RENEW, 4, 140_000 + LEASE)
    assert owns_lease(term, "a", now_ms=199_999) and not owns_lease(term, "a", now_ms=200_000)
    assert not owns_lease(term, "b", now_ms=100_000)


def test_another_takes_over_only_a_lease_past_its_expiry_by_the_margin():
    term = (3, "a", 200_000)
    assert lease_decision(term, "b", now_ms=200_001, lease_ms=LEASE).action == LEASE_WAIT
    assert lease_decision(term, "b", now_ms=200_000 + LEASE, lease_ms=LEASE).action == LEASE_WAIT
    assert lease_decision(term, "b", now_ms=200_001 + LEASE, lease_ms=LEASE) == LeaseDecision(LEASE_TAKE, 4, 200_001 + 2 * LEASE)


def _dead(job: JobState, *, listed=False, since=0.0, now=100_000.0, dropped=None):
    return dead_reason(listed=listed, unlisted_since=since, dropped=dropped, job=job, now=now, limits=LIMITS)


def test_a_listed_object_or_one_within_the_grace_is_never_dead():
    aborted = JobState(aborted=True)
    assert _dead(aborted, listed=True) is None
    assert _dead(aborted, since=100_000.0 - 59) is None
    assert _dead(aborted, since=100_000.0 - 60) == JOB_ABORTED


@pytest.mark.parametrize("job, dropped, why", [
    (JobState(committed=True, claimed=True, deadline=1.0), TOTAL_RESERVE, TOTAL_RESERVE),
    (JobState(committed=True, claimed=True, deadline=99_999.0), None, ATTEMPT_UNLISTED),
    (JobState(claimed=True, deadline=100_000.0 - 3601), None, CLAIM_EXPIRED),
    (JobState(claimed=True, deadline=100_000.0 - 3599), None, None),      # a driver may still be committing
    (JobState(claimed=True, deadline=None), None, None),                  # an unreadable claim: kept
])
def test_why_an_unlisted_object_is_dead(job, dropped, why):
    assert _dead(job, dropped=dropped) == why


def test_an_unclaimed_job_is_dead_only_after_staged_max_age():
    assert _dead(JobState(), since=100_000.0 - 86_399) is None
    assert _dead(JobState(), since=100_000.0 - 86_400) == UNCLAIMED


def test_superseded_versions_holding_dropped_objects_go_after_the_grace():
    seen = {1: 0.0, 2: 10.0, 3: 50.0}
    assert prunable_versions([1, 2, 3], {1, 2}, seen, now=70.0, grace=60.0) == [1]
    assert prunable_versions([1, 2, 3], {1, 2}, seen, now=110.0, grace=60.0) == [1, 2]
    assert prunable_versions([1, 2, 3], {2}, seen, now=1e9, grace=60.0) == [2]      # 1 holds nothing: commits prune it
    assert prunable_versions([3], {3}, seen, now=1e9, grace=0.0) == []               # never the newest


def test_markers_go_once_nothing_is_staged_and_the_job_is_finished():
    assert markers_left_over(JobState(aborted=True), staged=False, now=0.0, limits=LIMITS)
    assert not markers_left_over(JobState(aborted=True), staged=True, now=0.0, limits=LIMITS)
    assert markers_left_over(JobState(committed=True, claimed=True, deadline=9e9), staged=False, now=0.0,
                             limits=LIMITS)
    assert not markers_left_over(JobState(claimed=True, deadline=0.0), staged=False, now=3600.0, limits=LIMITS)
    assert markers_left_over(JobState(claimed=True, deadline=0.0), staged=False, now=3601.0, limits=LIMITS)


def test_the_cluster_keys_have_defaults_and_the_lease_must_cover_three_intervals(tmp_path):
    cluster = PolicyConfig().archive.cluster
    assert (cluster.lease, cluster.interval, cluster.grace, cluster.claim_grace, cluster.staged_max_age) == \
        (120.0, 30.0, 3600.0, 3600.0, 86400.0)
    with pytest.raises(ConfigError) as err:
        path = tmp_path / "r.yaml"
        path.write_text("policies:\n  default:\n    archive:\n      cluster:\n        lease: 1m\n")
        load_config(path)
    assert "policies.default.archive.cluster.lease" in str(err.value) and "3 x interval" in str(err.value)
