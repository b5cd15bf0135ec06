"""A bounded mutation fuzzer over every file of a log directory, run as a script in its own process.

    python hostile_log_helpers.py build WORKDIR                 # the template: a real log and tier
    python hostile_log_helpers.py run WORKDIR FIRST:COUNT|SEED,SEED,.. [--cli-every N] [--timeout S] [--lie OFFSET]

`build` writes WORKDIR/template: a log of 4 KiB segments written by a writer (keyed records, some
empty values as tombstones), consumer commits, records marked dead, one keyed compaction (so a
`tombstones` file and a compacted gap), an archive upload to a `file://` tier and one archived
head segment evicted (so reads below the local start go to the tier), then records in an active
segment a group `tail` has committed nearly to its end; `written.json` holds every (key, value) at
every offset, what the intact log serves below its active segment, and tail's commit.

`run` forks one child per seed (no store work happens in the parent, so the fork carries no
threads): the child copies the template, mutates one file of the log directory or the tier
(hostile_mutation_helpers; chosen by the seed), then reads it through the public API — a
read-only open and a writing open (start, end, scan, read, offset_for_time, segments, committed,
an append read back), a retention plan of the `policies` over it, and every N-th case `retention
plan` in a subprocess. One JSON line per case on stdout: outcome `ok`, `exception` (outside the
store's error tree), `wrong-value` (a record that is not what was written at its offset, a whole scan without an
error that skips a sealed record, or an append below tail's commit), `crash`
(killed by a signal) or `hang` (over the per-case timeout), with the file, the mutation and a summary.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from hostile_mutation_helpers import mutate

SEGMENT = 4096
LOG_NAME = "orders"
CONFIG = """\
service:
  listen: 127.0.0.1:0
  audit: {root}/audit.jsonl
logs:
  {name}:
    path: {root}/{name}
    segment_size: 4KiB
policies:
  default:
    interval: 1h
    delete_at_hours: []
    reserve: 1h
    archive:
      url: file://{root}/tier
    compaction:
      enabled: true
      keys: true
      max_live_ratio: 0.95
      min_age: 0s
      tombstone_retention: 1h
      merge: false
"""


class WrongValue(AssertionError):
    pass


def _value(offset: int) -> bytes:
    return b"" if offset % 17 == 5 else f"value-{offset}-".encode() * (1 + offset % 9)


def _key(offset: int) -> bytes | None:
    return None if offset % 11 == 0 else b"k%d" % (offset % 7 if offset < 150 else offset)


def _config(root: Path) -> Path:
    path = root / "retention.yaml"
    path.write_text(CONFIG.format(root=root, name=LOG_NAME))
    return path


def build(workdir: Path) -> None:
    from commitlog import CommitLog
    from policies import load_config
    from retention.archiving.commands import archive_command
    from retention.compaction.compactor import Compactor

    root = workdir / "template"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    config = load_config(_config(root))
    written = {}
    with CommitLog.open(root / LOG_NAME, segment_size=SEGMENT, flush="none") as log:
        offset = 0
        while len(log.segments()) < 9:
            assert log.append(_value(offset), _key(offset)) == offset
            written[offset] = _key(offset), _value(offset)
            offset += 1
        log.commit("etl", offset // 3)
        log.commit("audit", offset - 5)
        log.mark_dead([o for o in range(offset) if o % 13 == 4])
    compactor = Compactor(config)
    compactor.run()
    compactor.close()
    archive_command("upload", config, [])
    with CommitLog.open(root / LOG_NAME, flush="none") as log:
        log.remove_head(force=True)
        while len(log.segments()) < 11:     # sealed segments after the compaction, and an active one
            assert log.append(_value(offset), _key(offset)) == offset
            written[offset] = _key(offset), _value(offset)
            offset += 1
        for _ in range(15):                  # the active segment holds records, most acknowledged
            assert log.append(_value(offset), _key(offset)) == offset
            written[offset] = _key(offset), _value(offset)
            offset += 1
        log.commit("tail", offset - 2)    # a group near the end: the active segment's records are acknowledged
        active_base = log.segments()[-1].base_offset
    with CommitLog.open(root / LOG_NAME, readonly=True, archive=f"file://{root}/tier") as log:
        # What an intact log serves below its active segment (whose tail a reader may not see yet).
        sealed_live = [record.offset for record in log.scan(None, active_base)]
    (root / "written.json").write_text(json.dumps({"tail_commit": offset - 2, "sealed_live": sealed_live, "records": {
        str(o): [None if k is None else k.hex(), v.hex()] for o, (k, v) in written.items()}}))


# --- one case ---------------------------------------------------------------------------------------

def _targets(case: Path) -> list[Path]:
    files = [p for p in sorted((case / LOG_NAME).iterdir()) if p.is_file()]
    files += sorted(p for p in (case / "tier").rglob("*") if p.is_file())
    return files


def _verify(record, written: dict) -> None:
    expected = written.get(record.offset)
    got = (None if record.key is None else bytes(record.key), bytes(record.value))
    if expected is None or got != expected:
        raise WrongValue(f"offset {record.offset}: served {got!r:.120}, written {expected!r:.120}")


def _guarded(step, *args):
    """Run one read step; a store error ends that step (it is the right answer to damage)."""
    from commitlog import CommitLogError
    try:
        return step(*args)
    except CommitLogError:
        return None


def _read_everything(log, written: dict, sealed_live: list[int], rng: random.Random) -> None:
    start = _guarded(lambda: log.start_offset)
    end = _guarded(lambda: log.end_offset)
    _guarded(log.committed)

    def scan(first=None, last=None):
        served = set()
        for record in log.scan(first, last):
            _verify(record, written)
            served.add(record.offset)
        return served
    served = _guarded(scan)
    if served is not None and start is not None:
        # A whole scan that ended without a store error served every sealed record the intact log did.
        missing = [offset for offset in sealed_live if offset >= start and offset not in served]
        if missing:
            raise WrongValue(f"a scan from {start} ended without an error but skipped {len(missing)} "
                             f"record(s) the intact log serves: {missing[:5]}...")
    # Then each segment's range on its own, so damage in one still lets the others be checked.
    bases = sorted({info.base_offset for info in _guarded(log.segments) or ()} | {start or 0})
    for first, last in zip(bases, [*bases[1:], None]):
        _guarded(scan, first, last)
    top = max(written) + 3
    offsets = sorted({rng.randrange(-2, top) for _ in range(25)} | {o for o in (start, end) if o is not None})
    for offset in offsets:
        record = _guarded(log.read, offset)
        if record is not None:
            if record.offset != offset:
                raise WrongValue(f"read({offset}) served offset {record.offset}")
            _verify(record, written)
    if start is not None and end is not None and end > start:
        def partial():
            for record in log.scan(rng.randrange(start, end), end):
                _verify(record, written)
        _guarded(partial)
    _guarded(log.offset_for_time, rng.choice([0, int(time.time() * 1000), 2**62]))


def run_case(workdir: Path, seed: int, cli: bool, lie: int | None = None) -> dict:
    """One case (see the module docstring); `lie`: expect another value at that offset than the one
    written, so a test can show the fuzzer reports a wrong value."""
    from commitlog import CommitLog
    from policies import load_config
    from retention.deletion.cleaner import Cleaner

    rng = random.Random(seed)
    case = workdir / f"case-{os.getpid()}"
    shutil.rmtree(case, ignore_errors=True)
    shutil.copytree(workdir / "template", case, symlinks=True)
    saved = json.loads((case / "written.json").read_text())
    written = {int(o): (None if k is None else bytes.fromhex(k), bytes.fromhex(v))
               for o, (k, v) in saved["records"].items()}
    tail_commit = saved["tail_commit"]     # group tail's commit, near the end of the log
    sealed_live = saved["sealed_live"]
    if lie is not None:
        written[lie] = written[lie][0], b"not what was written"
    target = rng.choice(_targets(case))
    result = {"seed": seed, "file": str(target.relative_to(case)), "mutation": mutate(target, rng)}
    config_path = _config(case)
    url = f"file://{case}/tier"
    try:
        for readonly in (True, False):
            log = _guarded(lambda: CommitLog.open(case / LOG_NAME, readonly=readonly, flush="none", archive=url))
            if log is None:
                continue
            try:
                _read_everything(log, written, sealed_live, rng)
                if not readonly:
                    offset = _guarded(log.append, b"after-damage", b"k")
                    if offset is not None and offset < tail_commit:
                        raise WrongValue(f"an append got offset {offset}, below group tail's commit "
                                         f"{tail_commit}: that group never reads it")
                    if offset is not None:
                        written[offset] = b"k", b"after-damage"
                        record = _guarded(log.read, offset)
                        if record is not None:
                            _verify(record, written)
            finally:
                _guarded(log.close)
        cleaner = Cleaner(load_config(config_path))
        try:
            _guarded(lambda: cleaner.plan().to_json_dict())
        finally:
            cleaner.close()
        if cli:
            proc = subprocess.run([sys.executable, "-m", "retention.cli", "plan", "--config", str(config_path)],
                                  capture_output=True, text=True, timeout=60, cwd=case)
            if proc.returncode not in (0, 1) or "Traceback" in proc.stderr:
                raise AssertionError(f"retention plan exited {proc.returncode}: {proc.stderr[-1500:]}")
        result["outcome"] = "ok"
    except WrongValue as error:
        result.update(outcome="wrong-value", detail=str(error))
    except Exception as error:  # noqa: BLE001 (that is the finding)
        result.update(outcome="exception", detail=f"{type(error).__name__}: {error}"[:500],
                      traceback=traceback.format_exc()[-3000:])
    return result


# --- the forking loop -------------------------------------------------------------------------------

def _run_forked(workdir: Path, seed: int, cli: bool, timeout: float, lie: int | None) -> dict:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:   # the case, in a child: a SIGBUS or a segfault kills it, not the fuzzer
        os.close(read_end)
        try:
            line = json.dumps(run_case(workdir, seed, cli, lie))
        except BaseException as error:  # noqa: BLE001
            line = json.dumps({"seed": seed, "outcome": "exception", "detail": repr(error)[:500],
                               "traceback": traceback.format_exc()[-3000:]})
        os.write(write_end, line.encode())
        os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + timeout
    chunks = []
    os.set_blocking(read_end, False)
    status = None
    while status is None:
        try:
            while chunk := os.read(read_end, 65536):
                chunks.append(chunk)
        except BlockingIOError:
            pass
        done, raw = os.waitpid(pid, os.WNOHANG)
        if done:
            status = raw
        elif time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_end)
            return {"seed": seed, "outcome": "hang", "detail": f"over {timeout:g}s"}
        else:
            time.sleep(0.01)
    try:
        while chunk := os.read(read_end, 65536):
            chunks.append(chunk)
    except BlockingIOError:
        pass
    os.close(read_end)
    if os.WIFSIGNALED(status):
        return {"seed": seed, "outcome": "crash", "detail": f"killed by {signal.Signals(os.WTERMSIG(status)).name}"}
    return json.loads(b"".join(chunks) or b'{"outcome": "exception", "detail": "no result"}') | {"seed": seed}


def _seeds(text: str) -> list[int]:
    """FIRST:COUNT, or seeds separated by commas."""
    if ":" in text:
        first, count = map(int, text.split(":"))
        return list(range(first, first + count))
    return [int(seed) for seed in text.split(",")]


def main(argv: list[str]) -> int:
    import logging

    from loguru import logger
    logger.remove()                 # the store's and the sidecar's own lines would drown the findings
    logging.disable(logging.CRITICAL)
    command, workdir = argv[0], Path(argv[1])
    if command == "build":
        build(workdir)
        return 0
    import commitlog, policies, retention.deletion.cleaner  # noqa: F401,E401 (imported once, before the forks)
    seeds = _seeds(argv[2])
    lie = int(argv[argv.index("--lie") + 1]) if "--lie" in argv else None
    cli_every = int(argv[argv.index("--cli-every") + 1]) if "--cli-every" in argv else 0
    timeout = float(argv[argv.index("--timeout") + 1]) if "--timeout" in argv else 30.0
    for seed in seeds:
        cli = bool(cli_every) and seed % cli_every == 0
        print(json.dumps(_run_forked(workdir, seed, cli, timeout, lie)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
