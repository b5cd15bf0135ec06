"""`retention serve --demo`: a slow stream of records into a demo log, so a newcomer sees segments
roll, expire and get deleted within two minutes (see `retention/conf/demo.yaml`: 1 MiB segments, a
one-minute reserve, every hour a delete hour, a pass every 10 s).

The writer appends about `bytes_per_second` (default 64 KiB/s: a segment every ~16 s) and a demo
consumer group commits a few seconds behind it, so `/status` shows a consumer lag.
"""

from __future__ import annotations

import json
import threading
import time

import yaml
from loguru import logger

from commitlog import CommitLog, StoreFullError
from policies import LogConfig, PolicyConfig, RetentionConfig

from .embedded import default_config_text, demo_config_text, parse

DEMO_LOG = "demo"
DEMO_GROUP = "demo-consumer"
DEMO_CONFIG_SOURCE = "<embedded retention/conf/retention.yaml + retention/conf/demo.yaml>"


def load_demo_config() -> RetentionConfig:
    """The embedded default configuration with the demo log and policy added; relative paths
    resolve against the working directory."""
    merged = yaml.safe_load(default_config_text())
    demo = yaml.safe_load(demo_config_text())
    for section in ("logs", "policies"):
        merged.setdefault(section, {}).update(demo[section])
    return parse(yaml.safe_dump(merged, sort_keys=False), source=DEMO_CONFIG_SOURCE)


class DemoWriter:
    """Appends a slow stream into the demo log in a background thread."""

    def __init__(self, log: LogConfig, policy: PolicyConfig, *, bytes_per_second: int = 64 * 1024,
                 ticks_per_second: int = 4, lag_seconds: float = 3.0) -> None:
        self.path = str(log.path)
        self.segment_size = log.segment_size
        self.policy = policy
        self.record_size = 1024
        self.per_tick = max(1, bytes_per_second // self.record_size // ticks_per_second)
        self.tick = 1.0 / ticks_per_second
        self.lag_records = int(lag_seconds * ticks_per_second * self.per_tick)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._log: CommitLog | None = None
        self.appended = 0

    def start(self) -> None:
        """Open (create) the demo log now, so the scheduler's first pass finds it, then write."""
        self._log = CommitLog.open(self.path, self.segment_size, flush="async",
                                   refuse_writes_ratio=self.policy.disk.refuse_writes_ratio,
                                   resume_ratio=self.policy.disk.force_ratio)
        self._thread = threading.Thread(target=self._run, name="retention-demo-writer", daemon=True)
        self._thread.start()
        logger.info("demo: appending about {} KiB/s into {} ({} segments); a segment rolls about every "
                    "{:.0f}s, expires {:.0f}s after its last write and is deleted by the next pass",
                    self.per_tick * self.record_size // 1024 * round(1 / self.tick),
                    self.path, _size(self.segment_size),
                    self.segment_size / (self.per_tick * self.record_size / self.tick), self.policy.reserve)

    def _run(self) -> None:
        log = self._log
        seq = 0
        filler = "x" * (self.record_size - 120)
        active = None
        next_at = time.monotonic()
        while not self._stop.is_set():
            now_ms = int(time.time() * 1000)
            batch = [json.dumps({"seq": seq + i, "at_ms": now_ms, "sensor": f"demo-{(seq + i) % 8}",
                                 "value": (seq + i) % 1000, "pad": filler}).encode() for i in range(self.per_tick)]
            try:
                log.append_batch(batch)
                seq += len(batch)
                self.appended += len(batch)
            except StoreFullError as exc:
                logger.warning("demo: write refused: {}", exc)
                self._stop.wait(1.0)
                continue
            except Exception as exc:  # noqa: BLE001 (the demo stops, the service goes on)
                logger.opt(exception=exc).error("demo: writer stopped: {}", exc)
                return
            end = log.end_offset
            committed = max(log.start_offset, end - self.lag_records)
            try:
                log.commit(DEMO_GROUP, committed)
            except Exception as exc:  # noqa: BLE001
                logger.debug("demo: commit failed: {}", exc)
            segments = log.segments()
            current = segments[-1].base_offset if segments else None
            if current != active:
                if active is not None:
                    logger.info("demo: segment {:020d}.log is full; writing {:020d}.log ({} segments on disk)",
                                active, current, len(segments))
                active = current
            next_at += self.tick
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n % 2**20 == 0 else f"{n} bytes"
