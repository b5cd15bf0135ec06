"""storesettings: the commit-log store's settings that the configuration also carries, each one's
unit, default and range written once, and the archive URL's form (`archive_url`: one parser).
`commitlog` (the store, its tier, its Spark options) and `policies.config` (the YAML models, so
`retention check` too) both read them; this package imports nothing of the project, so neither
depends on the other. Constants and pure functions: thread- and process-safe.
"""

SEGMENT_SIZE_DEFAULT = 64 * 2**20   # bytes per preallocated segment file of a new log
SEGMENT_SIZE_MIN = 4096             # bytes: one page, the least a segment and its index can use
SEGMENT_SIZE_MAX = 2**32 - 1        # bytes: positions in the index are u32

REFUSE_WRITES_RATIO_DEFAULT = 0.90  # used/(used+available) above which writers are refused
RESUME_RATIO_DEFAULT = 0.85         # below which refused writers resume

__all__ = ["REFUSE_WRITES_RATIO_DEFAULT", "RESUME_RATIO_DEFAULT", "SEGMENT_SIZE_DEFAULT", "SEGMENT_SIZE_MAX",
           "SEGMENT_SIZE_MIN"]
