"""Shared byte budgets attacked (issue 39): weights at the float's extremes, a budget over logs on
two filesystems. Real logs, real passes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from policies import parse_config
from retention import Cleaner

from retention_helpers import SEGMENT, make_log, segment_bases


def _budget(tmp: Path, paths: dict[str, Path], parts: dict[str, dict], budget_bytes: int) -> str:
    return yaml.safe_dump({
        "service": {"audit": str(tmp / "audit.jsonl")},
        "logs": {name: {"path": str(path), "segment_size": "4KiB"} for name, path in paths.items()},
        "policies": {"default": {"delete_at_hours": [], "reserve": "1h"}},
        "budgets": {"shared": {"bytes": budget_bytes, "logs": parts}},
    })


def _one_pass(config, **kwargs):
    """One pass of a fresh cleaner over `config` (its `run_pass` keyword arguments), closed after."""
    cleaner = Cleaner(config)
    try:
        return cleaner.run_pass(**kwargs)
    finally:
        cleaner.close()


@pytest.mark.parametrize("weights", [(1e308, 1e-7, 1.0), (1e308, 1e308, 1e308), (1.7e308, 1.7e308, 1e-300)])
def test_weights_at_the_floats_extremes_share_the_budget_instead_of_raising(tmp_path, weights):
    """bytes x 1e308 overflowed to infinity (int() raised) and three weights of 1e308 added up to
    infinity (inf / inf: NaN): every pass over the budget's logs raised."""
    sizes = {"a": 9, "b": 8, "c": 5}
    bases = {n: make_log(tmp_path / n, k) for n, k in sizes.items()}
    parts = {n: {"weight": w} for n, w in zip("abc", weights)}
    config = parse_config(_budget(tmp_path, {n: tmp_path / n for n in "abc"}, parts, 16 * SEGMENT))
    shares = [config.budgets["shared"].share(n) for n in "abc"]
    assert all(0 <= s <= 16 * SEGMENT for s in shares) and sum(shares) <= 16 * SEGMENT
    result = _one_pass(config)
    assert all(r.error is None for r in result.logs)
    files = sum(len(segment_bases(tmp_path / n)) for n in "abc")
    assert 16 <= files <= 16 + 3, files        # 25 files down to the budget, within a segment a log
    if weights[0] > 1e300 and weights[1] < 1:
        assert segment_bases(tmp_path / "a") == bases["a"], "the heaviest log gave up a segment"


def test_floors_that_fill_the_budget_are_each_logs_share(tmp_path):
    make_log(tmp_path / "a", 9)
    make_log(tmp_path / "b", 8)
    make_log(tmp_path / "c", 5)
    parts = {"a": {"floor": 4 * SEGMENT, "weight": 1e308}, "b": {"floor": 6 * SEGMENT}, "c": {"floor": 6 * SEGMENT}}
    config = parse_config(_budget(tmp_path, {n: tmp_path / n for n in "abc"}, parts, 16 * SEGMENT))
    _one_pass(config)
    # a's weight makes its share the whole budget, b and c have their floors: b goes down to 6, c
    # keeps its 6, and the total stays over (a log at or below its share gives up nothing).
    assert [len(segment_bases(tmp_path / n)) for n in "abc"] == [10, 6, 6]


def test_a_budget_over_logs_on_two_filesystems_is_decided_over_both(tmp_path, small_fs):
    paths = {"a": tmp_path / "a", "b": Path(small_fs) / "b"}
    bases = {"a": make_log(paths["a"], 9), "b": make_log(paths["b"], 9)}
    config = parse_config(_budget(tmp_path, paths, {"a": {}, "b": {}}, 10 * SEGMENT))
    result = _one_pass(config, names=["b"])        # a pass over b's filesystem decides a too
    assert sorted(r.name for r in result.logs) == ["a", "b"]
    assert {n: segment_bases(p) for n, p in paths.items()} == {"a": bases["a"][5:], "b": bases["b"][5:]}


def test_a_budgets_discovered_log_that_vanishes_keeps_its_name_and_lets_the_root_change(tmp_path):
    """A budget naming a discovered log whose directory went made every reading of the roots
    refused ('unknown log'): no log that came after was ever found. The budget now keeps the
    name, counts it for nothing while it is gone, and counts it again when it comes back."""
    root = tmp_path / "root"
    make_log(root / "a", 6)
    make_log(root / "b", 6)
    text = (f"service:\n  audit: {tmp_path}/audit.jsonl\ndiscover:\n  - root: {root}\n"
            "policies:\n  default:\n    delete_at_hours: []\n    reserve: 1h\n"
            f"budgets:\n  shared:\n    bytes: {8 * SEGMENT}\n    logs: {{a: {{}}, b: {{}}}}\n")
    config = parse_config(text)
    assert config.budget_partners(["a"]) == ["a", "b"]
    shutil.rmtree(root / "b")
    make_log(root / "c", 1)
    gone = config.rediscovered()
    assert gone is not None and set(gone.logs) == {"a", "c"}, "the root's change was refused"
    assert list(gone.budgets["shared"].logs) == ["a", "b"]
    assert gone.budget_partners(["a"]) == ["a"]
    result = _one_pass(gone)
    assert all(r.error is None for r in result.logs)
    assert len(segment_bases(root / "a")) <= 8 + 1, "a alone was not held to the budget"
    (root / "c").rename(tmp_path / "c")          # a second change while b is still gone
    again = gone.rediscovered()
    assert again is not None and set(again.logs) == {"a"}
    make_log(root / "b", 2)
    back = again.rediscovered()
    assert back is not None and set(back.logs) == {"a", "b"}
    assert back.budget_partners(["a"]) == ["a", "b"]
    with pytest.raises(Exception, match="unknown log 'b'"):   # a file naming no such log stays refused at load
        shutil.rmtree(root / "b")
        parse_config(text)
