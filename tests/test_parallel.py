"""`make test`'s parallel run keeps its groups: the installed pytest and pytest-xdist send every test
of one `xdist_group` to one worker (pytest-xdist 3.8 on pytest 9.2 silently did not: its group
suffix no longer reached the node ids), and the Makefile runs the tests that way."""

from __future__ import annotations

import functools
import os
import re
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

from other_user_helpers import call_as_nobody

ROOT = Path(__file__).resolve().parents[1]

_MODULE = """import os
import pytest

{marks}
@pytest.mark.parametrize("n", range(4))
def test_note_worker(n, tmp_path_factory):
    with open({out!r}, "a") as f:
        f.write(f"{{__name__}} {{os.environ['PYTEST_XDIST_WORKER']}}\\n")
"""


def test_the_tests_of_one_xdist_group_run_on_one_worker(tmp_path):
    out = tmp_path / "workers.txt"
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\n")
    for name in ("test_a", "test_b"):
        (suite / f"{name}.py").write_text(_MODULE.format(marks='pytestmark = pytest.mark.xdist_group("one")',
                                                          out=str(out)))
    (suite / "test_free.py").write_text(_MODULE.format(marks="", out=str(out)))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                           "loadgroup"], cwd=suite, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    seen = [line.split() for line in out.read_text().splitlines()]
    grouped = {worker for module, worker in seen if module in ("test_a", "test_b")}
    assert len(seen) == 12 and len(grouped) == 1, seen
    assert {worker for module, worker in seen} == {"gw0", "gw1"}, seen    # the others spread


def test_make_test_runs_the_workers_with_groups():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^PYTEST_WORKERS \?= \d+$", makefile, re.M)
    assert "-m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)" in makefile


def _count_rows(path: str) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute("select count(*) from t").fetchone()[0]


def test_a_call_as_nobody_completes_while_another_thread_is_busy_in_sqlite(nobody_tmp):
    """A pytest-xdist worker has threads left by the tests it ran (a Spark session's, a stream's
    callbacks, the archive's pools); call_as_nobody's child never inherits the locks they hold.
    Before, the child was a fork of the test process, and about one in fifteen forks made while a
    thread was inside SQLite waited for ever on SQLite's lock (tests/commitlog/test_readonly_open.py
    timed out beside other tests)."""
    path = str(nobody_tmp / "rows.db")
    with sqlite3.connect(path) as db:
        db.execute("create table t(x)")
        db.execute("insert into t values (1)")
    os.chmod(path, 0o644)
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            with sqlite3.connect(str(nobody_tmp / "busy.db")) as db:
                db.execute("create table if not exists t(x)")
                db.execute("insert into t values (1)")
            db.close()

    thread = threading.Thread(target=busy, daemon=True)
    thread.start()
    try:
        calls = [call_as_nobody(functools.partial(_count_rows, path)) for _ in range(50)]
    finally:
        stop.set()
        thread.join(10)
    assert calls == ["1"] * 50
