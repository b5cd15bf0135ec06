"""Scheduling: `scheduler.RetentionScheduler`, the facade that runs cleanup and compaction passes
on intervals, on disk pressure (`pressure_watch`) and on segment rolls (`rollwatch`), with its
APScheduler wiring (`jobs`), logs grouped by disk (`filesystems`), one manual pass at a time
(`manual`), compaction passes per filesystem and under pressure (`compactions`), per-log health and the named problems (`health`, `problems`), the Prometheus metrics
(`metrics`), the `/status` object (`statusview`) and its history ring buffer (`history`). It may
import `retention.deletion`, `retention.compaction`, `commitlog` and `policies`; never HTTP.
"""
