"""A log kept on its archive tier alone: a cluster log (commitlog.archive.versions), written from
any host through the tier (commitlog.spark.cluster) and read from it (docs/spark-cluster.md).

    open_options_tier(options)   the tier the `archive` options name
    tier_name(options)           the log's folder on it: its path's last component
    is_cluster_log(options)      whether the options name a cluster log on their archive
    cluster_manifest(options)    the newest manifest version of a cluster log; None when the options
                                 name no archive or the log on it is no cluster log
"""

from __future__ import annotations

import os

from commitlog.archive import Manifest, Tier, open_tier, versions
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
