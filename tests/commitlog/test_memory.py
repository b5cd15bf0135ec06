"""A long-running writer holds its memory flat while another process removes its head: what the
store keeps per segment (its base, its sealed summary) goes when the segment goes.

Before the fix a writer rolling 64 KiB segments grew about 625 bytes for every segment rolled and
removed by a sidecar (19.2 MB to 27.2 MB over 13,900 segments). Here a writer in a child process
rolls small segments while a second process removes them from the head; RSS is read after a
warm-up and at the end (page-granular, so the bound is generous against noise, far below 625)."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from cl_helpers import spawn, wait_for_line

SEGMENT = 64 * 1024
BOUND_PER_ROLL = 150  # bytes of RSS growth per rolled and removed segment


MIN_ROLLS = 1000                      # fewer is too few to tell; the writer goes on until it has them


def _run(path: str, warmup_rolls: int, seconds: float) -> tuple[dict, dict]:
    remover = spawn(f"head_remover({path!r})", stdout=subprocess.PIPE, text=True)
    writer = None
    try:
        writer = spawn(f"rolling_writer({path!r}, {SEGMENT}, {warmup_rolls}, {seconds}, "
                       f"at_least_rolls={MIN_ROLLS + 1})",
                       stdout=subprocess.PIPE, text=True)
        w = wait_for_line(writer, 10 * seconds + 240)
        writer.wait(60)
        remover.send_signal(signal.SIGTERM)
        r = wait_for_line(remover, 60)
        remover.wait(60)
        return w, r
    finally:
        for proc in (writer, remover):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def _check(w: dict, r: dict) -> None:
    growth = w["rss1"] - w["rss0"]
    per_roll = growth / max(w["rolls"], 1)
    print(f"\nwriter: {w['rolls']} segments rolled after the warm-up, RSS {w['rss0'] / 1e6:.2f} MB "
          f"-> {w['rss1'] / 1e6:.2f} MB, {per_roll:.1f} bytes per rolled segment "
          f"(bound {BOUND_PER_ROLL}, was about 625); log now [{w['start']}, {w['end']})")
    print(f"remover: {r['removed']} segments removed, RSS {(r['rss0'] or 0) / 1e6:.2f} MB "
          f"-> {r['rss1'] / 1e6:.2f} MB")
    assert w["rolls"] > MIN_ROLLS, "too few rolls to tell"
    assert r["removed"] > 1000
    assert w["start"] > w["end"] // 2  # the head really went while the writer wrote
    assert per_roll < BOUND_PER_ROLL
    if r["rss0"] is not None:
        assert (r["rss1"] - r["rss0"]) / r["removed"] < BOUND_PER_ROLL


def test_writer_memory_stays_flat_while_another_process_removes_the_head(tmp_log_dir):
    _check(*_run(tmp_log_dir, warmup_rolls=300, seconds=15))


SOAK_SECONDS = float(os.environ.get("SOAK_SECONDS", 300))


@pytest.mark.soak
@pytest.mark.timeout(SOAK_SECONDS + 600)
def test_writer_memory_soak(tmp_log_dir):
    _check(*_run(tmp_log_dir, warmup_rolls=2000, seconds=SOAK_SECONDS))
