"""Cross-process: a writer appends while read-only processes remove head segments and another
process scans and reads; nothing but OffsetOutOfRangeError for removed offsets, no lost or
duplicated record among those kept."""

from __future__ import annotations

import subprocess

import pytest

from commitlog import CommitLog

from cl_helpers import check_record, spawn, wait_for_line

SEGMENT = 64 * 1024
MAXV = 400


def _run(path: str, seconds: float) -> None:
    procs = {
        "writer": spawn(f"xp_writer({path!r}, {SEGMENT}, {seconds}, {MAXV})",
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
    }
    for name in ("remover", "remover2"):  # two removers: a sidecar and an embedded cleaner
        procs[name] = spawn(f"xp_remover({path!r}, {seconds}, 4)", stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    procs["scanner"] = spawn(f"xp_scanner({path!r}, {seconds}, {MAXV})", stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    reports = {}
    try:
        for name, proc in procs.items():
            try:
                reports[name] = wait_for_line(proc, seconds + 60)
            except RuntimeError as exc:
                raise AssertionError(f"{name} failed: {exc}") from None
            proc.wait(30)
            assert proc.returncode == 0, f"{name}: {proc.stderr.read()}"
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()
    print(reports)
    end = reports["writer"]["end"]
    removed = sum(reports[n]["statuses"].get("removed", 0) for n in ("remover", "remover2"))
    # Enough happened to mean something, even on a busy machine.
    assert removed >= 3, reports
    scanner = reports["scanner"]
    assert scanner["complete"] >= 2 and scanner["records"] >= 500 and scanner["reads"] >= 20, reports
    with CommitLog.open(path, readonly=True) as log:
        assert log.end_offset == end
        start = log.start_offset
        assert start == max(reports["remover"]["last_start"], reports["remover2"]["last_start"]) > 0
        assert [r.offset for r in log.scan()] == list(range(start, end))
        for r in log.scan():
            check_record(r, MAXV)
        assert log.committed()["scanner"] <= end


def test_writer_remover_and_scanner_in_three_processes(tmp_log_dir):
    _run(tmp_log_dir, 4.0)


@pytest.mark.soak
def test_writer_remover_and_scanner_soak(tmp_log_dir):
    _run(tmp_log_dir, 60.0)
