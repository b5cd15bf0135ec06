"""The per-log gauges (`retention.scheduling.log_gauges`): the exposition a scrape builds from one
row a log, exactly the series the labelled `Gauge`s gave, checked by promtool; and what a log's
gauges keep between scrapes."""

from __future__ import annotations

import gc
import shutil
import subprocess
import tracemalloc

import pytest

from retention.scheduling.metrics import RetentionMetrics


def _series(text: str, family: str) -> set[str]:
    return {line for line in text.splitlines() if line.startswith(family + "{")}


def test_a_log_s_gauges_are_set_kept_and_removed_as_labelled_gauges_were():
    m = RetentionMetrics(process=False)
    m.set_log("a", segments=3, bytes=4096, hung=1, pinned_bytes=10, hung_oldest_seconds=2.5,
              hung_force_after=3600.0, dead_bytes=7, retention_bytes=10**9)
    m.set_lag("a", {"etl": (100, 2), "audit": (0, 0)})
    m.set_last_success("a", 1_700_000_000.25)
    text = m.exposition().decode()
    assert "# HELP retention_log_segments Segment files of the log after the last pass." in text
    assert "# TYPE retention_log_segments gauge" in text
    for line in ('retention_log_segments{log="a"} 3.0', 'retention_log_bytes{log="a"} 4096.0',
                 'retention_log_retention_bytes{log="a"} 1e+09', 'retention_log_dead_bytes{log="a"} 7.0',
                 'retention_hung_segments{log="a"} 1.0', 'retention_pinned_bytes{log="a"} 10.0',
                 'retention_hung_oldest_seconds{log="a"} 2.5', 'retention_hung_force_after_seconds{log="a"} 3600.0',
                 'retention_last_successful_pass_timestamp_seconds{log="a"} 1.70000000025e+09',
                 'retention_consumer_lag_bytes{group="etl",log="a"} 100.0',
                 'retention_consumer_lag_records{group="audit",log="a"} 0.0'):
        assert line in text, line

    # A pass that could not read the dead bytes keeps the last; a cap and a group gone lose their series.
    m.set_log("a", segments=2, bytes=10, hung=0, pinned_bytes=0, dead_bytes=None, retention_bytes=None)
    m.set_lag("a", {"etl": (5, 1)})
    text = m.exposition().decode()
    assert _series(text, "retention_log_dead_bytes") == {'retention_log_dead_bytes{log="a"} 7.0'}
    assert _series(text, "retention_log_retention_bytes") == set()
    assert _series(text, "retention_hung_force_after_seconds") == {
        'retention_hung_force_after_seconds{log="a"} 3600.0'}
    assert _series(text, "retention_consumer_lag_bytes") == {'retention_consumer_lag_bytes{group="etl",log="a"} 5.0'}
    assert _series(text, "retention_log_segments") == {'retention_log_segments{log="a"} 2.0'}

    m.deleted("a", "time-window", 4096)
    m.forget_log("a")            # no longer configured: its gauges go, its counters stay (history)
    text = m.exposition().decode()
    assert 'log="a"' in text and 'retention_deleted_segments_total{log="a",trigger="time-window"} 1.0' in text
    assert all('log="a"' not in line for line in text.splitlines()
               if not line.startswith(("retention_deleted_", "#")))
    # The families stay, empty, as prometheus-client printed a labelled gauge without children.
    assert "# TYPE retention_consumer_lag_records gauge" in text


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool missing: install Debian's prometheus package")
def test_promtool_accepts_the_exposition_of_many_logs(tmp_path):
    m = RetentionMetrics()
    for i in range(50):
        m.set_log(f"log{i}", segments=i, bytes=i * 4096, hung=0, pinned_bytes=0, hung_force_after=60.0,
                  dead_bytes=0, retention_bytes=None if i % 2 else 10**6)
        m.set_lag(f"log{i}", {"etl": (i, i)})
        m.set_last_success(f"log{i}", 1_700_000_000.0)
    checked = subprocess.run(["promtool", "check", "metrics"], input=m.exposition(), capture_output=True)
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()


def test_the_gauges_of_a_log_keep_a_row_not_a_dozen_metric_children():
    """Between scrapes a log's gauges hold one row of figures: under 1 KB a log (labelled
    prometheus-client gauges kept about 6.5 KB: a child, a value and a lock per series)."""
    m = RetentionMetrics(process=False)
    count = 2_000
    names = [f"log{i:05d}" for i in range(count)]
    groups = {"etl": (123_456, 789)}
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for name in names:
            m.set_log(name, segments=11, bytes=45_056, hung=0, pinned_bytes=0, hung_oldest_seconds=0.0,
                      hung_force_after=86_400.0, dead_bytes=0, retention_bytes=None)
            m.set_lag(name, groups)
            m.set_last_success(name, 1_700_000_000.5)
        gc.collect()
        kept = (tracemalloc.get_traced_memory()[0] - before) / count
    finally:
        tracemalloc.stop()
    assert kept < 1_000, f"{kept:.0f} bytes a log"
    assert len(_series(m.exposition().decode(), "retention_log_bytes")) == count
