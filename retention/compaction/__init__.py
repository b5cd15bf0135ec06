"""Compaction: rewriting partially live segments (AMQ-3978). `compactor` runs one compaction pass
over a set of logs (the scheduler runs them per filesystem, `retention.scheduling.compaction_passes`);
`plan_input` is what its plan sees of a log's segments; `intents` writes and settles their audit
lines; `summary` is what a pass did and its rendering.
It may import `commitlog`, `policies`, `retention.audit` and `retention.deletion` (the logs it reads
are the cleaner's `WatchedLog`s, owned the same way); the integrations that protect records from
it plug in through `protection` (an entry point group the engine discovers).
"""
