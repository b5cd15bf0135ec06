"""The staging ledger, `<log>/spark.db`: what Spark jobs staged into the log, and what is visible.

Modules: ledger_tables (spark.db's tables, and bringing an older file up to date), ledger_view
(reading it: which records are visible, unresolved writers, the jobs: what readers ask), ledger
(`Ledger`, a `LedgerView` that stages: jobs, writers, sink batches; a job's commit is one
transaction), marking (dead records marked in the store, pending ranges for compaction),
processes (whether a job's driver or task process still lives: abandoned jobs).

Imports neither pyspark nor pyarrow, and nothing else of commitlog.spark but its errors: retention
(the protector), readers and writers all stand on it.
"""

from __future__ import annotations

from .ledger import JobInfo, Ledger
from .ledger_view import LedgerView, VisibleRecord
from .marking import mark_dead_records, pending_ranges

__all__ = ["JobInfo", "Ledger", "LedgerView", "VisibleRecord", "mark_dead_records", "pending_ranges"]
