"""Deletion: one cleanup pass over a set of logs, from reading each log (`watched`) to removing
its head segments (`cleaner`; each removal under audit, and the removals dead processes left, in
`audited_removal`; at a byte rate, `pacer`), with what the pass did (`results`, rendered by `report`), the
retention owner's lock (`owner`), hung segments (`hung`) and the processes pinning deleted files
(`pinned`). It may import `commitlog`, `policies` and `retention.audit`; nothing here schedules,
serves HTTP or compacts.
"""
