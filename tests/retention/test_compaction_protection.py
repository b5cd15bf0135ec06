"""The interface integrations protect records from compaction through (retention.compaction.
protection): the Spark integration is found through its entry point, without the engine
importing it, and a protector that cannot answer stops that log's compaction."""

from __future__ import annotations

import pytest

from retention.compaction import compactor, protection
from retention.compaction.compactor import Compactor

from compaction_helpers import compaction_config, dead_log, digest_tree, scan_pairs


def test_the_spark_integration_is_an_installed_protector():
    names = [p.name for p in protection.installed_protectors()]
    assert "spark" in names
    spark = next(p for p in protection.installed_protectors() if p.name == "spark")
    assert type(spark).__module__ == "commitlog.spark.protector"


def test_ranges_of_every_protector_are_kept_together(tmp_path):
    class Fixed:
        def __init__(self, name, ranges, refusal=None):
            self.name, self.ranges, self.refusal = name, ranges, refusal

        def pending_ranges(self, log_path):
            return self.ranges

        def keyed_compaction_refusal(self, log_path):
            return self.refusal

    both = [Fixed("a", [(50, 60)]), Fixed("b", [(10, 20)], "b says no")]
    assert protection.pending_of(both)(str(tmp_path)) == [(10, 20), (50, 60)]
    assert protection.keyed_refusal(both, str(tmp_path)) == "b says no"
    assert protection.keyed_refusal(both[:1], str(tmp_path)) is None


def test_a_protector_that_raises_compacts_nothing_in_that_log_and_says_why(tmp_path, monkeypatch):
    class Broken:
        name = "broken"

        def pending_ranges(self, log_path):
            raise OSError("its database is locked")

        def keyed_compaction_refusal(self, log_path):
            return None

    live = dead_log(tmp_path / "a", 2)
    _, config = compaction_config(tmp_path, tmp_path / "a")
    before = digest_tree(tmp_path / "a")
    monkeypatch.setattr(compactor, "installed_protectors", lambda: [Broken()])
    c = Compactor(config)
    result = c.run()
    c.close()
    assert result.failed and "its database is locked" in result.logs[0].error
    assert digest_tree(tmp_path / "a") == before and scan_pairs(tmp_path / "a") == live


def test_a_protector_that_cannot_be_loaded_is_named(monkeypatch):
    class Point:
        name, value = "ghost", "nowhere.module:PROTECTOR"

        def load(self):
            raise ImportError("No module named 'nowhere'")

    monkeypatch.setattr(protection, "_loaded", None)
    monkeypatch.setattr(protection, "entry_points", lambda group: [Point()])
    with pytest.raises(RuntimeError, match="the compaction protector ghost .nowhere.module:PROTECTOR. "
                                           "cannot be loaded"):
        protection.installed_protectors()
