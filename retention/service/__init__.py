"""The `retention serve` process and the CLI's helpers: `serve` (signals, reload, the main loop),
`embedded` (the embedded configurations, the store's limits, exit statuses), `demo` (`--demo`'s
writer), `logsetup` (loguru), `notify` (systemd's notify protocol) and `client` (`retention
status`, which asks a running sidecar). It may import every other part of `retention`.
"""
