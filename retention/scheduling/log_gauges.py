"""The per-log gauges of `RetentionMetrics` (`retention_log_*`, hung and pinned, the last success,
consumer lag) held as one row of figures per log, their metric families built only when scraped.

A prometheus-client labelled child per log and series (a value object, a lock, label tuples:
about 600 bytes each, a dozen a log) is what 10,000 logs made cost most; a row is a list of
figures, and a scrape builds the families from the rows and drops them. Names, help, types, labels
and values are those the `Gauge`s gave. Thread-safe: one lock over the rows.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["LogGauges"]

# The figures of a log's row, in order: each is one gauge family labelled by log.
COLUMNS = ("segments", "bytes", "retention_bytes", "dead_bytes", "hung", "pinned_bytes", "hung_oldest",
           "hung_force_after", "last_success")
_INDEX = {name: i for i, name in enumerate(COLUMNS)}


class LogGauges:
    """Per log: its row of figures (None: the series is absent) and its groups' lag."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, list] = {}
        self._lags: dict[str, tuple[tuple[str, float, float], ...]] = {}   # log -> ((group, bytes, records), ...)

    def register(self, registry: CollectorRegistry, column: str, name: str, documentation: str) -> None:
        """Expose `column` of every row as gauge family `name` labelled by log."""
        registry.register(_Column(self, _INDEX[column], name, documentation))

    def register_lag(self, registry: CollectorRegistry, which: int, name: str, documentation: str) -> None:
        """Expose each log's groups' lag (`which`: 0 bytes, 1 records) as `name` labelled by log and group."""
        registry.register(_Lag(self, which, name, documentation))

    def set(self, log: str, **figures: float | None) -> None:
        """Set the named figures of `log` (None removes that series)."""
        with self._lock:
            row = self._rows.get(log)
            if row is None:
                row = self._rows[log] = [None] * len(COLUMNS)
            for column, value in figures.items():
                row[_INDEX[column]] = value

    def set_each(self, logs: list[str], column: str, value: float) -> None:
        """Set figure `column` of each of `logs` to `value`."""
        index = _INDEX[column]
        with self._lock:
            for log in logs:
                row = self._rows.get(log)
                if row is None:
                    row = self._rows[log] = [None] * len(COLUMNS)
                row[index] = value

    def set_lag(self, log: str, lags: dict[str, tuple[int, int]]) -> None:
        """`lags`: group -> (bytes, records); empty: the log's lag series go."""
        with self._lock:
            if lags:
                self._lags[log] = tuple((group, nbytes, records) for group, (nbytes, records) in lags.items())
            else:
                self._lags.pop(log, None)

    def forget(self, log: str) -> None:
        with self._lock:
            self._rows.pop(log, None)
            self._lags.pop(log, None)

    def column(self, index: int) -> list[tuple[str, float]]:
        with self._lock:
            return [(log, row[index]) for log, row in self._rows.items() if row[index] is not None]

    def lags(self) -> list[tuple[str, tuple[tuple[str, float, float], ...]]]:
        with self._lock:
            return list(self._lags.items())


class _Column(Collector):
    def __init__(self, gauges: LogGauges, index: int, name: str, documentation: str) -> None:
        self._gauges, self._index, self._name, self._doc = gauges, index, name, documentation

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(self._name, self._doc, labels=["log"])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self._name, self._doc, labels=["log"])
        for log, value in self._gauges.column(self._index):
            family.add_metric([log], value)
        yield family


class _Lag(Collector):
    def __init__(self, gauges: LogGauges, which: int, name: str, documentation: str) -> None:
        self._gauges, self._which, self._name, self._doc = gauges, which, name, documentation

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(self._name, self._doc, labels=["log", "group"])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self._name, self._doc, labels=["log", "group"])
        for log, groups in self._gauges.lags():
            for group, *figures in groups:
                family.add_metric([log, group], figures[self._which])
        yield family
