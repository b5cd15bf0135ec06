"""`policies.NAME.archive.cluster:`, how a sidecar looks after a cluster log on its archive tier
(docs/spark-cluster.md, "Retention on the tier"): the lease that makes one sidecar the owner, how
often the owner runs, and when the collector takes staged objects no manifest version lists."""

from __future__ import annotations

from pydantic import Field, model_validator

from policies.config.fields import NonNegativeDuration, PositiveDuration, _DAY, _HOUR, _MINUTE, _Strict, \
    _config_problem


class ClusterTierConfig(_Strict):
    """The tier side of a cluster log's retention (used only when the tier holds `<log>/cluster.json`).
    Immutable."""

    lease: PositiveDuration = Field(
        default=2 * _MINUTE,
        description="Seconds a sidecar's lease on a cluster log's tier lasts; the owner renews it once half "
        "is gone, and another sidecar takes over only once it expired by as much again (so hosts' clocks "
        "may differ by up to this much). At least three intervals; default 2m.",
    )
    interval: PositiveDuration = Field(
        default=30.0,
        description="Seconds between two runs of a cluster log's tier job (the lease, then, by its owner, "
        "total retention on the tier and the collector of staged objects). Positive; default 30s.",
    )
    grace: NonNegativeDuration = Field(
        default=1 * _HOUR,
        description="Seconds an object the newest manifest version no longer lists stays on the tier for "
        "readers holding an older version (and a superseded version stays for them): counted from when the "
        "lease owner first saw it so. 0 or more; default 1h.",
    )
    claim_grace: NonNegativeDuration = Field(
        default=1 * _HOUR,
        description="Seconds past a commit claim's deadline after which the job's unlisted staged objects "
        "are dead (no driver commits after its deadline). 0 or more; default 1h.",
    )
    staged_max_age: PositiveDuration = Field(
        default=1 * _DAY,
        description="Seconds the lease owner must have seen a job's staged objects without a claim, an abort "
        "or a commit before they are dead (a running job stages long before its driver claims it). Longer "
        "than any job runs; default 1d.",
    )

    @model_validator(mode="after")
    def _check_lease(self) -> ClusterTierConfig:
        if self.lease < 3 * self.interval:
            blamed = "lease" if "lease" in self.model_fields_set else "interval"
            raise _config_problem(f"must keep lease >= 3 x interval (the owner renews within it), got lease "
                                  f"{self.lease:g}s, interval {self.interval:g}s", blamed)
        return self
