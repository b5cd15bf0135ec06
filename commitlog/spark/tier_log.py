"""A log kept on its archive tier alone: a cluster log (commitlog.archive.versions), written from
any host through the tier (commitlog.spark.cluster) and read from it (docs/spark-cluster.md).

    open_options_tier(options)   the tier the `archive` options name
    tier_name(options)           the log's folder on it: its path's last component
    is_cluster_log(options)      whether the options name a cluster log on their archive
    cluster_manifest(options)    the newest manifest version of a cluster log; None when the options
                                 name no archive or the log on it is no cluster log
    tier_fields(options)         where the tier is, as a stream offset carries it (URL, endpoint,
                                 region: never a credential); tier_options(path, fields) reverses it
    commit_group(options, group, offset)   a consumer group's commit on the tier (archive.groups)
    group_offset(options, group)           its newest commit there, None without one
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from commitlog.archive import Manifest, Tier, groups, open_tier, versions
from commitlog.archive.validation import log_name

from .source_options import Options


def open_options_tier(options: Options) -> Tier:
    return open_tier(options.archive, endpoint=options.archive_endpoint, region=options.archive_region)


def tier_name(options: Options) -> str:
    return log_name(os.path.basename(os.path.normpath(options.path)))


def is_cluster_log(options: Options) -> bool:
    return options.archive is not None and versions.is_cluster(open_options_tier(options), tier_name(options))


def cluster_manifest(options: Options) -> Manifest | None:
    if not is_cluster_log(options):
        return None
    tier, name = open_options_tier(options), tier_name(options)
    found = versions.newest(tier, name)
    return found[1] if found is not None else Manifest(name)


_TIER_FIELDS = (("archive", "archive"), ("archiveEndpoint", "archive_endpoint"),
                ("archiveRegion", "archive_region"))
TIER_KEYS = frozenset(key for key, _ in _TIER_FIELDS)


def tier_fields(options: Options) -> dict[str, str]:
    """The options' tier as JSON fields (those given); credentials come from each host's chain."""
    return {key: getattr(options, attr) for key, attr in _TIER_FIELDS if getattr(options, attr)}


def tier_options(path: str, fields: Mapping) -> Options:
    """Options naming the log at `path` on the tier `fields` (tier_fields) give."""
    return Options(path, **{attr: str(fields[key]) for key, attr in _TIER_FIELDS if fields.get(key)})


def commit_group(options: Options, group: str, offset: int, tier: Tier | None = None) -> None:
    """Record on the tier that `group` consumed everything below `offset`."""
    groups.commit(tier or open_options_tier(options), tier_name(options), group, offset,
                  int(time.time() * 1000))


def group_offset(options: Options, group: str, tier: Tier | None = None) -> int | None:
    found = groups.committed(tier or open_options_tier(options), tier_name(options)).get(group)
    return None if found is None else found.offset
