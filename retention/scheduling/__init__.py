"""Scheduling: `scheduler.RetentionScheduler`, the facade that runs cleanup and compaction passes
on intervals, on disk pressure (`pressure_watch`) and on segment rolls (`rollwatch`). Its parts
share one `scheduler_state.SchedulerState` (configuration, audit trail, logs grouped by disk, stop flag);
`passes` runs deletion passes, `compaction_passes` compaction passes per filesystem and under pressure,
`jobs` wires APScheduler, `filesystems` groups logs by disk, `manual` allows one manual pass at a
time, `health` keeps each log's last pass, `checkup` and `problems` the health contract and
readiness, `metrics` the Prometheus metrics, `statusview` the `/status` object and `history` its
ring buffer. It may import `retention.deletion`, `retention.compaction`, `commitlog` and
`policies`; never HTTP.
"""
