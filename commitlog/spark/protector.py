"""What the Spark integration protects from compaction, offered to any compactor through a plain
object (no import of the retention engine: `retention` discovers `PROTECTOR` through the entry
point `commitlog_retention.protectors` named `spark`, declared in pyproject.toml).

- `pending_ranges(log_path)`: the offset ranges unfinished Spark jobs may still make visible
  (`ledger.marking.pending_ranges`); a compaction keeps every record in them.
- `keyed_compaction_refusal(log_path)`: why a log must not be compacted as keyed, or None. A Spark
  staging log's keys are writer ids, not record keys.
- `decided_in_log_directory`: True. Both answers come from `<log>/spark.db` (and its WAL), files in
  the log directory: a compactor watching the directory sees every change to them.

Imports neither pyspark nor pyarrow. Stateless: thread- and process-safe.
"""

from __future__ import annotations

import os

from .ledger.ledger_view import LedgerView
from .ledger.marking import pending_ranges

__all__ = ["PROTECTOR", "SparkProtector"]


class SparkProtector:
    """The Spark ledger's protections (see the module docstring)."""

    name = "spark"
    decided_in_log_directory = True

    def pending_ranges(self, log_path: str | os.PathLike) -> list[tuple[int, int]]:
        return pending_ranges(log_path)

    def keyed_compaction_refusal(self, log_path: str | os.PathLike) -> str | None:
        if not LedgerView.exists(os.fspath(log_path)):
            return None
        return ("compaction.keys is true for a Spark staging log (it has a spark.db): its keys are "
                "writer ids, not record keys, so nothing is compacted; set keys: false")


PROTECTOR = SparkProtector()
