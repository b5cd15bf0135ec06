"""The `commitlog` command: look inside a log directory (segments, verify, dump, groups).

Read-only unless asked: only `groups --reset` and `groups --delete` write (a consumer group's
committed offset). Rooms: `command` (the parser, exit statuses, dispatch), `inputs` (opening a log
and reading the command line's offsets and times: bad input raises UsageError), `printing` (JSON
and times as text), `segments`, `verify`, `dump` and `group_offsets`, one per subcommand. Imports only
the store (`commitlog`), never `retention` or `policies`. See docs/commitlog-cli.md.
"""
