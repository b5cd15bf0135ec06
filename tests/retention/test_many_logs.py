"""Many logs on one sidecar: descriptors (one per owned log) and `discover:` roots, on real
sidecars and real logs."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from commitlog import CommitLog
from policies import parse_config
from retention import RetentionScheduler
from retention.deletion.owner import RESERVE

from retention_helpers import make_log, segment_bases, set_age
from sidecar_helpers import Sidecar

LIMIT = RESERVE + 24      # a sidecar at this open-files limit owns at most 24 logs


def _problems(s: Sidecar) -> set[tuple[str, str]]:
    return {(d["problem"], d["log"]) for d in s.get_json("/healthz")[1]["details"]}


def test_logs_past_the_descriptor_limit_are_a_named_problem_not_a_crash(tmp_path):
    logs = [f"log{i:02d}" for i in range(32)]
    for name in logs:
        make_log(tmp_path / name, 1)
    entries = "".join(f"  {n}:\n    path: {tmp_path / n}\n" for n in logs)
    config = tmp_path / "retention.yaml"
    config.write_text(f"service:\n  listen: 127.0.0.1:0\n  audit: {tmp_path}/audit.jsonl\nlogs:\n{entries}"
                      "policies:\n  default:\n    interval: 1s\n    delete_at_hours: []\n")
    sidecar = Sidecar(config, cwd=tmp_path)
    sidecar.user_prefix = ["prlimit", f"--nofile={LIMIT}:{LIMIT}"]   # soft = hard: nothing to raise
    with sidecar as s:
        past = len(logs) - (LIMIT - RESERVE)
        found = s.wait_for(lambda: (lambda f: f if len(f) >= past else None)(
            {log for problem, log in _problems(s) if problem == "log-no-descriptors"}),
            timeout=60, what="log-no-descriptors for every log past the limit")
        assert len(found) == past
        assert s.request("GET", "/healthz")[0] == 503
        time.sleep(3)                                  # passes go on at the limit
        assert s.proc.poll() is None and s.request("GET", "/livez")[0] == 200
        status = s.get_json("/status")[1]
        owned = [log for log in status["logs"] if log["name"] not in found]
        assert len(owned) == LIMIT - RESERVE and all(log["error"] is None for log in owned)
        assert "open-files limit" in s.log() and "Traceback" not in s.log()


def _root_config(tmp: Path, named: str = "") -> str:
    return (f"service:\n  audit: {tmp}/audit.jsonl\n{named}discover:\n  - root: {tmp}/root\n"
            "policies:\n  default:\n    delete_at_hours: []\n    reserve: 1h\n")


def test_discover_takes_real_directories_only_and_leaves_named_logs_theirs(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    make_log(root / "a", 1)
    make_log(root / "named", 1)
    make_log(tmp_path / "outside", 1)
    (root / "link").symlink_to(tmp_path / "outside")
    (root / "file").write_text("not a log")
    (root / ".hidden").mkdir()
    (root / "not created yet").mkdir()        # not a log name
    config = parse_config(_root_config(tmp_path, f"logs:\n  named:\n    path: {root / 'named'}\n"
                                       f"  other:\n    path: {root / 'a'}\n"))
    assert sorted(config.logs) == ["named", "other"]     # the named logs keep both directories
    assert config.discovered == frozenset()
    config = parse_config(_root_config(tmp_path))
    assert config.discovered == {"a", "named"} and sorted(config.logs) == ["a", "named"]


def test_a_log_outside_the_root_is_never_cleaned_through_a_link(tmp_path):
    """A user who may write the root plants a link to a log elsewhere, or swaps a found directory
    for one: a pass that would delete everything deletes nothing there."""
    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "outside"
    bases = make_log(outside, 4)
    set_age(outside, bases[:-1], 7200)
    make_log(root / "swapped", 1)
    (root / "planted").symlink_to(outside)
    config = parse_config(_root_config(tmp_path))
    scheduler = RetentionScheduler(config, watch_rolls=False)
    try:
        shutil.rmtree(root / "swapped")
        (root / "swapped").symlink_to(outside)
        result = scheduler.clean(force=True)     # before the roots are read again
        assert segment_bases(outside) == bases
        swapped = next(r for r in result.logs if r.name == "swapped")
        assert "symbolic link" in swapped.error and swapped.plan is None
        scheduler.passes.interval("default")     # the roots read again: it is gone
        assert scheduler.config.discovered == frozenset()
        assert segment_bases(outside) == bases
    finally:
        scheduler.stop()


def test_a_directory_appearing_or_vanishing_under_a_root_is_picked_up_by_the_next_pass(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    make_log(root / "a", 1)
    config = tmp_path / "retention.yaml"
    config.write_text(_root_config(tmp_path).replace("service:\n", "service:\n  listen: 127.0.0.1:0\n")
                      .replace("reserve: 1h\n", "reserve: 1h\n    interval: 1s\n"))
    with Sidecar(config, cwd=tmp_path) as s:
        names = lambda: sorted(log["name"] for log in s.get_json("/status")[1]["logs"])  # noqa: E731
        s.wait_for(lambda: names() == ["a"], what="log a")
        with CommitLog.open(root / "b", segment_size=4096) as log:
            log.append(b"a record")
        s.wait_for(lambda: names() == ["a", "b"], what="log b found")
        s.wait_for(lambda: next(log for log in s.get_json("/status")[1]["logs"] if log["name"] == "b")
                   .get("last_pass"), what="log b passed")
        shutil.rmtree(root / "a")
        s.wait_for(lambda: names() == ["b"], what="log a gone")
        assert s.request("GET", "/healthz")[0] == 200, "a log gone from its root is no missing log"
        assert os.path.isdir(root / "b")


def test_a_first_pass_over_more_logs_than_half_the_descriptors_opens_each_in_turn(tmp_path):
    """Each log a pass reads is opened (its start.offset held) besides its claim: the opens were
    closed after the pass, so past half the limit the first pass ran out of descriptors on the
    logs it owned (`log-no-descriptors` for logs within the limit). Now, while claims hold half
    the descriptors, each log's open is closed once it is read."""
    limit = RESERVE + 344                # owns up to 344 logs; 2 descriptors a log would need 688
    logs = [f"log{i:03d}" for i in range(330)]
    template = tmp_path / "template"
    make_log(template, 1)
    (tmp_path / "root").mkdir()
    for name in logs:
        shutil.copytree(template, tmp_path / "root" / name)
    config = tmp_path / "retention.yaml"
    config.write_text(f"service:\n  listen: 127.0.0.1:0\n  audit: {tmp_path}/audit.jsonl\n"
                      f"discover:\n  - root: {tmp_path}/root\n"
                      "policies:\n  default:\n    interval: 1s\n    delete_at_hours: []\n")
    sidecar = Sidecar(config, cwd=tmp_path)
    sidecar.user_prefix = ["prlimit", f"--nofile={limit}:{limit}"]
    with sidecar as s:
        s.wait_ready(timeout=120)
        time.sleep(2.5)                                 # a second and third pass
        status = s.get_json("/status")[1]
        assert len(status["logs"]) == len(logs)
        failed = {log["name"]: log["error"] for log in status["logs"] if log["error"] is not None}
        assert not failed, list(failed.items())[:3]
        assert not _problems(s), _problems(s)
        assert "Too many open files" not in s.log()
