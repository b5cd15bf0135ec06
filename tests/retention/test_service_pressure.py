"""Disk pressure on a real small filesystem: a writer process appends as fast as it can into a log
on a 32 MiB tmpfs while a real `retention serve` runs with `interval: 10s`.

- the disk never stays above force_ratio for more than two seconds. The ratio is sampled every
  25 ms; the writer also notes when it resumes after a refusal, an instant its own disk guard found
  the disk below force_ratio. Only the writer raises the ratio, and a refused writer raises it only
  after resuming, so those instants close every dip below force_ratio, however short (an
  unthrottled writer refills a freed megabyte within milliseconds, faster than any sampler),
- the writer sees StoreFullError only once the disk is above refuse_writes_ratio (it then stays
  refused until the disk is back below force_ratio, the writer's hysteresis) and resumes,
- the maximum ratio observed is reported.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from commitlog import disk_usage

from retention_helpers import config_text, write_config
from sidecar_helpers import Sidecar

CLEAN, FORCE, REFUSE = 0.75, 0.85, 0.90
SEGMENT = 1 << 20


def _config(tmp_path, log_dir) -> str:
    """Only disk pressure deletes (nothing is an hour old), checked every second."""
    return config_text(tmp_path, sidecar=True, log={"path": str(log_dir), "segment_size": "1MiB"},
                       policy={"interval": "10s", "pause_between_files": "100ms", "disk_check_interval": "1s",
                               "disk": {"clean_ratio": CLEAN, "force_ratio": FORCE, "refuse_writes_ratio": REFUSE}})

WRITER = textwrap.dedent("""
    import json, os, sys, time
    from commitlog import CommitLog, StoreFullError
    path, seconds, refuse, resume = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    batch = [os.urandom(1000) for _ in range(128)]
    appended = resumed = 0
    refusals, enospc, episodes, resumes = [], [], [], []
    refused = False
    with CommitLog.open(path, segment_size=1 << 20, flush="none", refuse_writes_ratio=refuse,
                        resume_ratio=resume) as log:
        print("ready", flush=True)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                log.append_batch(batch)
            except StoreFullError as exc:
                if exc.used_ratio is None:
                    enospc.append(str(exc))
                else:
                    if not refused:
                        episodes.append(exc.used_ratio)   # the error that starts a refusal
                    refusals.append(exc.used_ratio)
                refused = True
                time.sleep(0.1)                           # back off, then try again
                continue
            appended += len(batch)
            if refused:
                resumed += 1
                resumes.append(time.monotonic())          # the guard found the disk below resume_ratio
                refused = False
    print(json.dumps({"appended": appended, "resumed": resumed, "refusals": refusals,
                      "episodes": episodes, "enospc": enospc, "resumes": resumes}), flush=True)
""")


class Sampler(threading.Thread):
    """statvfs of the filesystem every `every` seconds: (monotonic time, used ratio)."""

    def __init__(self, path: str, every: float = 0.025) -> None:
        super().__init__(daemon=True)
        self.path, self.every = path, every
        self.samples: list[tuple[float, float]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.samples.append((time.monotonic(), disk_usage(self.path).used_ratio))
            self.done.wait(self.every)

    def longest_above(self, threshold: float, below_at: list[float] = ()) -> float:
        """Longest stretch from the first sample above `threshold` to the next instant known to be
        at or below it: a sample, or one of `below_at` (monotonic times)."""
        events = [(t, ratio > threshold) for t, ratio in self.samples] + [(t, False) for t in below_at]
        longest, since = 0.0, None
        for t, above in sorted(events):
            if above:
                since = t if since is None else since
            elif since is not None:
                longest, since = max(longest, t - since), None
        if since is not None:
            longest = max(longest, self.samples[-1][0] - since)
        return longest


@pytest.mark.parametrize("small_fs", [("tmpfs", 32 << 20)], indirect=True)
def test_disk_never_stays_above_force_ratio_while_a_writer_floods_it(small_fs, tmp_path, record_property):
    log_dir = f"{small_fs}/staging"
    config_path, _ = write_config(tmp_path, _config(tmp_path, log_dir))
    seconds = 12.0
    with Sidecar(config_path, cwd=tmp_path) as sidecar:
        sidecar.wait_ready()
        sampler = Sampler(small_fs)
        sampler.start()
        writer = subprocess.Popen([sys.executable, "-c", WRITER, log_dir, str(seconds), str(REFUSE), str(FORCE)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = writer.communicate(timeout=seconds + 30)
        finally:
            if writer.poll() is None:
                writer.kill()
        time.sleep(1.5)                                       # the last crossing is handled too
        sampler.done.set()
        sampler.join()
        status = sidecar.get_json("/status")[1]
        metrics = sidecar.request("GET", "/metrics")[2].decode()
        assert sidecar.request("GET", "/healthz")[0] == 200
    assert writer.returncode == 0, err
    report = json.loads(out.splitlines()[-1])
    ratios = [r for _, r in sampler.samples]
    longest = sampler.longest_above(FORCE, report["resumes"])
    samples_only = sampler.longest_above(FORCE)
    summary = (f"max disk ratio observed {max(ratios):.3f} (force_ratio {FORCE}, refuse_writes_ratio "
               f"{REFUSE}); longest stretch above force_ratio {longest:.2f}s ({samples_only:.2f}s by the "
               f"{len(ratios)} samples alone); "
               f"writer appended {report['appended']} records, refused {len(report['refusals'])} times in "
               f"{len(report['episodes'])} episodes, resumed {report['resumed']} times")
    print(summary)
    record_property("max_ratio", round(max(ratios), 4))
    record_property("longest_above_force_s", round(longest, 3))

    assert max(ratios) > FORCE, "the writer never pushed the disk above force_ratio: " + summary
    assert longest <= 2.0, summary
    assert report["enospc"] == [], report["enospc"]           # never ran out of space for real
    assert report["episodes"], "the writer was never refused: " + summary
    assert all(r > REFUSE for r in report["episodes"]), report["episodes"]   # refused only above 90 %
    assert all(r >= FORCE for r in report["refusals"]), report["refusals"]  # and until below 85 %
    assert report["resumed"] >= 1 and report["resumed"] >= len(report["episodes"]) - 1, summary
    assert status["logs"][0]["last_pass"]["outcome"] in ("ok", "hung")
    assert 'trigger="disk-force"' in metrics and 'kind="pressure"' in metrics
