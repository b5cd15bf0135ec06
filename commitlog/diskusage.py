"""Disk usage of the filesystem holding a path, as `df` reports it."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class DiskUsage:
    """One statvfs reading. Immutable."""

    filesystem_id: int
    total_bytes: int
    used_bytes: int
    free_bytes: int      # available to unprivileged users (f_bavail)

    @property
    def used_ratio(self) -> float:
        # df's Use%: used over what users can have (used + available), not over the raw total.
        denominator = self.used_bytes + self.free_bytes
        return self.used_bytes / denominator if denominator else 0.0


def disk_usage(path: str) -> DiskUsage:
    st = os.statvfs(path)
    total = st.f_blocks * st.f_frsize
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    free = st.f_bavail * st.f_frsize
    return DiskUsage(os.stat(path).st_dev, total, used, free)
