"""Change-driven passes (retention/deletion/unchanged.py): an untouched log is carried, not planned
again; each input of its key, changed alone, gets it planned again. Real logs, real SQLite, a real
writer; only the pass's time is given (a clock), and the racy-mtime rule is waited out."""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest

from commitlog import CommitLog
from policies import parse_config
from retention import RetentionScheduler
from retention.deletion.cleaner import Cleaner

from retention_helpers import make_log
from racy_window import RACY


def _config(tmp: Path, names, **policy):
    logs = "".join(f"  {n}:\n    path: {tmp / n}\n    segment_size: 4KiB\n" for n in names)
    policy = {"delete_at_hours": [], "reserve": "1h", **policy}
    extra = "".join(f"    {k}: {v}\n" for k, v in policy.items())
    return parse_config(f"service:\n  audit: {tmp}/audit.jsonl\nlogs:\n{logs}policies:\n  default:\n{extra}")


def _planned(result) -> set[str]:
    return {r.name for r in result.logs if not r.unchanged}


def _first_passes(cleaner: Cleaner, at: datetime | None = None) -> None:
    """Passes until every log is carried: a first pass claims each log (its lock file) and leaves
    SQLite's -wal and -shm for the next to remove, each a change of the directory."""
    for _ in range(4):
        time.sleep(RACY)
        if not _planned(cleaner.run_pass(at)):
            return
    raise AssertionError("the logs are planned every pass")


def _now() -> datetime:
    return datetime.now(timezone.utc)


def test_an_untouched_log_is_carried_and_each_input_changed_alone_plans_it_again(tmp_path):
    names = ["untouched", "directory", "mode", "state", "marks", "tail"]
    for n in names:
        make_log(tmp_path / n, 2)
    writers = {n: CommitLog.open(tmp_path / n, flush="none") for n in ("state", "marks", "tail")}
    try:
        writers["state"].commit("etl", 1)                 # its -wal exists from here on
        writers["marks"].mark_dead([0])                   # its marks file exists from here on
        cleaner = Cleaner(_config(tmp_path, names))
        try:
            _first_passes(cleaner)
            carried = cleaner.memory.carried
            assert _planned(cleaner.run_pass()) == set()           # nothing changed: all carried
            assert cleaner.memory.carried == carried + len(names)
            dirs = {n: os.stat(tmp_path / n).st_mtime_ns for n in names}
            (tmp_path / "directory" / "notes.txt").write_text("a file created in the log directory")
            os.chmod(tmp_path / "mode", 0o750)                                # ctime only
            writers["state"].commit("etl", 2)                                 # written in place: -wal
            writers["marks"].mark_dead([1])                                   # written in place: marks
            writers["tail"].append(b"one more record")                        # through the mapping
            for n in ("state", "marks", "tail", "mode"):
                assert os.stat(tmp_path / n).st_mtime_ns == dirs[n], f"{n}: its directory changed too"
            time.sleep(RACY)        # each change is older than the racy window: only the key tells
            assert _planned(cleaner.run_pass()) == set(names) - {"untouched"}
            assert _planned(cleaner.run_pass()) == set()
        finally:
            cleaner.close()
    finally:
        for w in writers.values():
            w.close()


def test_the_clock_plans_a_log_again_at_its_deadlines(tmp_path):
    make_log(tmp_path / "a", 2)
    with CommitLog.open(tmp_path / "a") as log:
        log.commit("etl", 1)
    # Every hour deletes: the segments are kept only by reserve (1h) and the group (consumer_ttl 3h).
    cleaner = Cleaner(_config(tmp_path, ["a"], delete_at_hours=list(range(24)), consumer_ttl="3h"))
    try:
        t0 = _now()
        _first_passes(cleaner, t0)
        assert _planned(cleaner.run_pass(t0 + timedelta(minutes=30))) == set()
        assert _planned(cleaner.run_pass(t0 - timedelta(minutes=5))) == {"a"}, "the clock stepped back"
        assert _planned(cleaner.run_pass(t0 + timedelta(minutes=31))) == set()
        result = cleaner.run_pass(t0 + timedelta(minutes=61))          # the segments outlive reserve
        assert _planned(result) == {"a"}
        assert _planned(cleaner.run_pass(t0 + timedelta(minutes=62))) == set(), "kept by the group now"
        assert _planned(cleaner.run_pass(t0 + timedelta(hours=3, minutes=1))) == {"a"}, "the group went stale"
    finally:
        cleaner.close()


def test_a_delete_hour_opening_and_a_manual_trigger_plan_a_log_again(tmp_path):
    make_log(tmp_path / "a", 2)
    t0 = _now().replace(minute=10)
    cleaner = Cleaner(_config(tmp_path, ["a"], delete_at_hours=[(t0.hour + 1) % 24], timezone="UTC"))
    try:
        _first_passes(cleaner, t0)
        assert _planned(cleaner.run_pass(t0 + timedelta(minutes=20))) == set()
        assert _planned(cleaner.run_pass(t0 + timedelta(minutes=55))) == {"a"}, "its delete hour opened"
        cleaner.trigger_manual()
        assert _planned(cleaner.run_pass(t0 + timedelta(minutes=56))) == {"a"}, "a manual pass is open"
    finally:
        cleaner.close()


def test_a_file_written_in_place_within_the_racy_window_is_not_trusted(tmp_path, product_racy_window):
    make_log(tmp_path / "a", 2)
    with CommitLog.open(tmp_path / "a", flush="none") as writer:
        writer.commit("etl", 1)
        cleaner = Cleaner(_config(tmp_path, ["a"]))
        try:
            _first_passes(cleaner)
            writer.commit("etl", 2)
            assert _planned(cleaner.run_pass()) == {"a"}
            # Nothing changed since, but a commit in the same tick as that look would have gone unseen.
            assert _planned(cleaner.run_pass()) == {"a"}, "an mtime this recent is not trusted"
            _first_passes(cleaner)
        finally:
            cleaner.close()


def _log_view(status: dict, name: str) -> dict:
    view = next(log for log in status["logs"] if log["name"] == name)
    return {k: v for k, v in view.items() if k not in ("as_of", "last_pass")}


def _series(scheduler, name: str) -> list[str]:
    text = generate_latest(scheduler.metrics.registry).decode()
    return sorted(line for line in text.splitlines() if f'log="{name}"' in line and "last_success" not in line)


@pytest.mark.parametrize("groups", [0, 1])
def test_a_carried_log_shows_what_a_planned_one_shows(tmp_path, groups):
    make_log(tmp_path / "a", 3)
    if groups:
        with CommitLog.open(tmp_path / "a") as log:
            log.commit("etl", 20)
    config = _config(tmp_path, ["a"])
    carried = RetentionScheduler(config, watch_rolls=False)
    try:
        fs = next(iter(carried._state.filesystems.values()))
        _first_passes(fs.cleaner)
        before = fs.cleaner.memory.carried
        carried.passes.interval("default")
        assert fs.cleaner.memory.carried == before + 1
        planned = RetentionScheduler(config, watch_rolls=False)
        try:
            planned.passes.interval("default")
            assert _log_view(carried.status(), "a") == _log_view(planned.status(), "a")
            assert _series(carried, "a") == _series(planned, "a")
        finally:
            planned.stop()
    finally:
        carried.stop()


def test_the_logs_of_a_shared_budget_are_planned_again_together(tmp_path):
    names = ["a", "b", "alone"]
    for n in names:
        make_log(tmp_path / n, 2)
    config = _config(tmp_path, names).model_dump(mode="json", exclude_none=True)
    config["budgets"] = {"shared": {"bytes": "1GiB", "logs": {"a": {}, "b": {}}}}
    cleaner = Cleaner(parse_config(yaml.safe_dump(config)))
    try:
        _first_passes(cleaner)
        assert _planned(cleaner.run_pass()) == set()
        (tmp_path / "a" / "notes.txt").write_text("a change to a only")
        time.sleep(RACY)
        assert _planned(cleaner.run_pass()) == {"a", "b"}      # b is decided with a, alone is carried
        assert _planned(cleaner.run_pass()) == set()
    finally:
        cleaner.close()


def test_the_pin_scan_is_skipped_only_while_every_log_is_carried_and_none_was_held(tmp_path, monkeypatch):
    """Walking every process's descriptors for deleted segments held open cost 40 ms a pass
    whatever the logs: an idle pass skips it; a held segment is looked for until it is let go."""
    from retention.deletion import cleaner as cleaner_module
    scans = []
    real = cleaner_module.find_pinned
    monkeypatch.setattr(cleaner_module, "find_pinned", lambda dirs: scans.append(dirs) or real(dirs))
    bases = make_log(tmp_path / "a", 3)
    make_log(tmp_path / "b", 1)
    cleaner = Cleaner(_config(tmp_path, ["a", "b"], delete_at_hours=list(range(24))))
    try:
        _first_passes(cleaner)
        before = len(scans)
        assert not _planned(cleaner.run_pass()) and len(scans) == before, "an idle pass walked the descriptors"
        oldest = tmp_path / "a" / f"{bases[0]:020d}.log"
        held = open(oldest, "rb")                           # a reader keeps the oldest segment
        later = _now() + timedelta(hours=2)                # past the reserve: the sealed segments go
        try:
            result = cleaner.run_pass(later)
            a = next(r for r in result.logs if r.name == "a")
            assert a.actions and not oldest.exists()
            assert [p.path for p in a.pinned][:1] == [str(oldest)], "the held deleted segment was not found"
            _first_passes(cleaner, later)
            scanned = len(scans)
            result = cleaner.run_pass(later)
            assert not _planned(result) and len(scans) == scanned + 1, "a held segment was not looked for"
            assert next(r for r in result.logs if r.name == "a").pinned
        finally:
            held.close()
        result = cleaner.run_pass(later)
        assert not next(r for r in result.logs if r.name == "a").pinned, "the let-go segment is still held"
        scanned = len(scans)
        cleaner.run_pass(later)
        assert len(scans) == scanned, "the walk went on after nothing was held"
    finally:
        cleaner.close()


def test_a_carried_log_holds_its_plan_and_claim_only_and_is_opened_again_when_it_changes(tmp_path):
    names = [f"log{i}" for i in range(6)]
    for n in names:
        make_log(tmp_path / n, 2)
    cleaner = Cleaner(_config(tmp_path, names))

    def held() -> dict[str, set[str]]:
        """Per log, the names of its files this process holds open."""
        found: dict[str, set[str]] = {}
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = Path(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                continue
            if target.parent.parent == tmp_path:
                found.setdefault(target.parent.name, set()).add(target.name)
        return found

    try:
        _first_passes(cleaner)
        carried = cleaner.run_pass()
        assert _planned(carried) == set()
        assert all(r.plan is not None and r.snapshot is None for r in carried.logs)   # the plan stands, alone
        assert held() == {n: {".retention.lock"} for n in names}     # the claim, not the store's opens
        with CommitLog.open(tmp_path / "log0", flush="none") as writer:
            writer.append(b"one more record")
        time.sleep(RACY)
        result = cleaner.run_pass()
        assert _planned(result) == {"log0"}
        assert result.logs[0].error is None and result.logs[0].snapshot.segments[-1].used_bytes > 0
        assert len(held()["log0"]) > 1                               # read again: opened again
    finally:
        cleaner.close()


def _last_pass(scheduler, name: str) -> dict:
    return next(log for log in scheduler.status()["logs"] if log["name"] == name)["last_pass"]


def test_a_carried_log_s_last_pass_is_recorded_at_each_pass_and_after_a_pass_error(tmp_path):
    make_log(tmp_path / "a", 2)
    config = _config(tmp_path, ["a"])
    scheduler = RetentionScheduler(config, watch_rolls=False)
    try:
        fs = next(iter(scheduler._state.filesystems.values()))
        _first_passes(fs.cleaner)
        seen = []
        for _ in range(2):        # the second records the same carried result as the first
            scheduler.passes.interval("default")
            assert _planned(fs.cleaner.last_result) == set()
            seen.append(_last_pass(scheduler, "a"))
        assert seen[0]["at"] < seen[1]["at"] and seen[0]["finished_at"] < seen[1]["finished_at"]
        for last in seen:
            assert {k: v for k, v in last.items() if k not in ("at", "finished_at", "duration_seconds")} == {
                "kind": "interval", "deleted": 0, "freed_bytes": 0, "outcome": "ok", "rolled": False, "error": None,
                "last_success_at": last["finished_at"]}
        for _ in range(config.service.failed_passes_unhealthy):
            scheduler.ledger.error(["a"], "interval", RuntimeError("boom"), 0.01, time.time())
        assert ("passes-failing", "a") in {(p.kind, p.subject) for p in scheduler.ledger.problems(config)}
        assert _last_pass(scheduler, "a")["outcome"] == "error"
        scheduler.passes.interval("default")
        assert _planned(fs.cleaner.last_result) == set()
        last = _last_pass(scheduler, "a")
        assert (last["outcome"], last["error"], last["last_success_at"]) == ("ok", None, last["finished_at"])
        assert scheduler.ledger.problems(config) == [], "a carried pass that passed ends the failures"
    finally:
        scheduler.stop()
