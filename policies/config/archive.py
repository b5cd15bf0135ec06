"""`policies.NAME.archive:`, the archive tier of a policy's logs: where sealed segments are
uploaded, how fast, how often, and when a lagging upload is a health problem."""

from __future__ import annotations

from urllib.parse import urlparse

from pydantic import Field, field_validator, model_validator

from storesettings.archive_url import CREDENTIALS, parse_archive_url

from policies.config.cluster_tier import ClusterTierConfig
from policies.config.fields import (ByteSize, NonNegativeDuration, PositiveDuration, _HOUR, _MINUTE, _SECOND,
                                    _Strict, _config_problem)

def _archive_url(value: object) -> str:
    return parse_archive_url(value).url       # an ArchiveURLError is a ValueError: the key's problem


def _endpoint(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a URL such as 'http://127.0.0.1:9000', got {value!r}")
    parsed = urlparse(value)
    if parsed.username is not None or parsed.password is not None:
        raise ValueError(CREDENTIALS)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"must be an http:// or https:// URL with a host, got {value!r}")
    return value


class ArchiveConfig(_Strict):
    """The archive tier of a policy's logs (docs/archive.md). Off while `url` is null. Immutable.

    Each log's objects sit under `<url>/<log name>/`, listed by that log's manifest there. With a
    tier, local retention (`reserve`, `retention_bytes`, the disk ratios) evicts archived segments
    only, unless the disk forces.
    """

    url: str | None = Field(
        default=None,
        description="Where sealed segments are uploaded: 's3://bucket/prefix' (any S3 API) or "
        "'file:///mnt/archive' (a directory, such as an NFS mount). Credentials never go here: the "
        "standard chain supplies them. Null (the default) archives nothing.",
    )
    endpoint: str | None = Field(
        default=None,
        description="The S3 API's address for a store other than AWS (MinIO, Ceph RGW), as "
        "'http://127.0.0.1:9000'. Null (the default) means AWS's, or AWS_ENDPOINT_URL.",
    )
    region: str | None = Field(
        default=None,
        description="The S3 region, as 'eu-west-1'. Null (the default) means the standard chain's (AWS_REGION, "
        "the profile).",
    )
    upload_after: NonNegativeDuration = Field(
        default=0.0,
        description="Seconds a segment stays sealed before it is uploaded (time for a compaction to rewrite "
        "it first). 0 or more; default 0s.",
    )
    max_bytes_per_second: ByteSize | None = Field(
        default=None,
        description="Most bytes per second a log's uploads read and send: an integer or '32MiB'. Positive; "
        "null (the default) caps nothing.",
    )
    interval: PositiveDuration = Field(
        default=30 * _SECOND,
        description="Seconds between two looks for sealed segments to upload, per log. Positive; default 30s.",
    )
    retry_after: PositiveDuration = Field(
        default=10 * _SECOND,
        description="Seconds before a log's failed upload is tried again; doubled after each failure in a row "
        "up to max_retry_after. Positive; default 10s.",
    )
    max_retry_after: PositiveDuration = Field(
        default=10 * _MINUTE,
        description="Most seconds between two tries of a failing upload. At least retry_after; default 10m.",
    )
    lag_unhealthy: PositiveDuration = Field(
        default=1 * _HOUR,
        description="The health problem archive-lagging is raised while a sealed segment has waited longer than "
        "this past upload_after without being archived (the tier is down, or uploads cannot keep up). "
        "Positive; default 1h.",
    )

    reserve: PositiveDuration | None = Field(
        default=None,
        description="Total retention by time: seconds after its last record that an archived segment is deleted "
        "from the archive (Kafka retention.ms; the policy's reserve is the local one, local.retention.ms). At "
        "least the policy's reserve. Null (the default) keeps archived segments until retention_bytes, if set.",
    )
    retention_bytes: ByteSize | None = Field(
        default=None,
        description="Total retention by size: most bytes of a log's segments the archive keeps (Kafka "
        "retention.bytes); the oldest go first. An integer or '500GiB'; null (the default) caps nothing.",
    )

    cluster: ClusterTierConfig = Field(
        default_factory=ClusterTierConfig,
        description="A cluster log's retention on the tier: the lease, total retention by its owner, and "
        "the collector of dead staged objects (docs/spark-cluster.md).",
    )

    @field_validator("url", mode="plain")
    @classmethod
    def _check_url(cls, value: object) -> str | None:
        return None if value is None else _archive_url(value)

    @field_validator("endpoint", mode="plain")
    @classmethod
    def _check_endpoint(cls, value: object) -> str | None:
        return None if value is None else _endpoint(value)

    @model_validator(mode="after")
    def _check_retries(self) -> ArchiveConfig:
        if self.max_retry_after < self.retry_after:
            blamed = "max_retry_after" if "max_retry_after" in self.model_fields_set else "retry_after"
            raise _config_problem(f"must keep retry_after <= max_retry_after, got {self.retry_after:g}s > "
                                  f"{self.max_retry_after:g}s", blamed)
        return self

    @property
    def enabled(self) -> bool:
        return self.url is not None
