"""The retention configuration: models, validation and loading from YAML.

Every setting is declared once with its type, unit, default, range and meaning, in the module of
its section: `service` (the sidecar's own settings), `policy` (a policy and its `disk`, `hung` and
`compaction` sections; `archive` its archive tier), `budgets` (byte budgets shared by logs), `root`
(`logs` and the whole file); `fields` holds the value types they
are declared with and `ConfigError`. Values are stored canonically: durations as ``float``
seconds, sizes as ``int`` bytes, ratios as ``float`` in 0-1, paths as absolute ``Path``. Invalid
input is rejected, never clamped; loading from YAML and the one-line ``FILE:LINE: KEY.PATH:
reason`` errors live in :mod:`policies.loading`.

All models are frozen (their mappings are read-only views), so a loaded configuration is immutable
and safe to share between threads.
"""

from policies.config.archive import ArchiveConfig
from policies.config.budgets import BudgetConfig, BudgetLogConfig
from policies.config.fields import DEFAULT_POLICY, LOG_LEVELS, ConfigError
from policies.config.policy import CompactionConfig, DiskConfig, HungConfig, PolicyConfig
from policies.config.root import LogConfig, RetentionConfig
from policies.config.service import ServiceConfig

__all__ = [
    "DEFAULT_POLICY",
    "LOG_LEVELS",
    "ArchiveConfig",
    "BudgetConfig",
    "BudgetLogConfig",
    "CompactionConfig",
    "ConfigError",
    "DiskConfig",
    "HungConfig",
    "LogConfig",
    "PolicyConfig",
    "RetentionConfig",
    "ServiceConfig",
]
