"""Hostile configuration files, generated from seeds, and a `retention check` run under a memory limit.

`BOMBS` are the named probes of issue 34 (each a YAML text); `mutated_config(seed)` is a valid
configuration with one structure-aware mutation (a value swapped for a hostile one, a key dropped or
invented, a section aliased many times) or a few raw byte edits. `run_check` runs the real CLI in a
subprocess with its address space capped, so a loader that expands what it reads fails the test
instead of the machine.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

CHECK_MEMORY_LIMIT = 1 << 30      # address space of one `retention check` (it needs ~300 MiB)
CHECK_TIMEOUT = 60.0


def _alias_bomb(levels: int, width: int = 9) -> str:
    """About 360 bytes for 9 levels: a list of 9**9 strings once its aliases are expanded."""
    items = [f"&a0 [{','.join(['x'] * width)}]"]
    items += [f"&a{level} [{','.join([f'*a{level - 1}'] * width)}]" for level in range(1, levels)]
    return "service:\n  listen: [" + ",".join(items) + "]\n"


BOMBS = {
    "alias_bomb": _alias_bomb(9),
    "deep_nesting": "service: " + "[" * 5000 + "]" * 5000 + "\n",
    "deep_block_nesting": "".join(f"{' ' * depth}k{depth}:\n" for depth in range(3000)),
    "huge_integer": "service:\n  max_connections: " + "9" * 5000 + "\n",
    "nul_in_a_path": 'service:\n  audit: "audit\\0.jsonl"\n',
    "raw_nul": "service:\n  audit: a\0b\n",
    "control_character": "service:\n  audit: a\x01b\n",
    "long_path": "logs:\n  big:\n    path: /tmp/" + "x" * 2_000_000 + "\n",
    "long_path_under_the_size_cap": "logs:\n  big:\n    path: /tmp/" + "x/" * 60_000 + "\n",
    "long_name": "logs:\n  big:\n    path: /tmp/" + "x" * 300 + "\n",
    "lone_surrogate_path": 'logs:\n  big:\n    path: "/tmp/\\ud800"\n',
    "recursive_alias": "service:\n  listen: &a [*a]\n",
    "long_key": "service:\n  " + "k" * 200_000 + ": 1\n",
    "long_string": "service:\n  listen: " + "9" * 200_000 + "\n",
    "many_values": "service:\n  listen: [" + ",".join(["1"] * 110_000) + "]\n",
}


@dataclass(frozen=True)
class CheckRun:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def assert_one_line_verdict(self) -> None:
        """Exit 0 or 2; a refusal is one line on stderr and nothing else; never a traceback."""
        shown = f"exit {self.returncode} in {self.seconds:.1f}s\nstdout: {self.stdout[:2000]!r}\nstderr: {self.stderr[:4000]!r}"
        assert "Traceback" not in self.stderr, shown
        assert self.returncode in (0, 2), shown
        if self.returncode == 2:
            assert self.stdout == "" and self.stderr.count("\n") == 1 and self.stderr.endswith("\n"), shown
            assert self.stderr.startswith("retention: ") and len(self.stderr) < 1200, shown
        else:
            assert self.stdout.count("\n") == 1 and ": ok (" in self.stdout, shown
            assert all(line.startswith("retention: warning: ") for line in self.stderr.splitlines()), shown


def run_check(config: Path, *, cwd: Path) -> CheckRun:
    """`retention check --config CONFIG` in a subprocess capped at CHECK_MEMORY_LIMIT bytes."""
    started = time.monotonic()
    # A command prefix (util-linux's prlimit), not a preexec_fn: Python code run between fork and exec
    # in a process with threads (an xdist worker's) deadlocked on a lock another thread held.
    limit = ["prlimit", f"--as={CHECK_MEMORY_LIMIT}:{CHECK_MEMORY_LIMIT}", "--"]
    proc = subprocess.run([*limit, sys.executable, "-m", "retention.cli", "check", "--config", str(config)], cwd=cwd,
                          capture_output=True, timeout=CHECK_TIMEOUT,
                          env={**os.environ, "PYTHONHASHSEED": "0"})
    return CheckRun(proc.returncode, proc.stdout.decode("utf-8", "replace"),
                    proc.stderr.decode("utf-8", "replace"), time.monotonic() - started)


# --- structure-aware mutations of a valid configuration ---------------------------------------------

VALID_CONFIG = {
    "service": {"listen": "127.0.0.1:0", "log_level": "INFO", "audit": "audit.jsonl", "http_timeout": "10s",
                "max_connections": 50},
    "logs": {"orders": {"path": "data/orders", "segment_size": "64KiB", "policy": "business"},
             "clicks": {"path": "data/clicks", "policy": "default", "overrides": {"reserve": "1h"}}},
    "policies": {"business": {"interval": "10s", "delete_at_hours": [3, 4], "reserve": "72h",
                              "files_per_pass": 10, "pause_between_files": "100ms", "consumer_ttl": "7d",
                              "disk": {"clean_ratio": 0.75, "force_ratio": "85%", "refuse_writes_ratio": 0.9,
                                       "force": True},
                              "hung": {"force_after": "120s"},
                              "compaction": {"enabled": True, "max_live_ratio": 0.5, "keys": False}}},
}

_HOSTILE_SCALARS = [
    None, True, False, 0, -1, 2**63, -(2**63) - 1, 10**30, 1e308, float("inf"), float("-inf"), float("nan"),
    "", " ", "\0", "\x7f", "\u202e", "\ud7ff", "\ufeff", "é" * 300, "x" * 70_000, "../" * 1500, "~", "~root/x",
    "1e999s", "-0s", "0s", "1.5", "99999999999999999999d", "0.0000001ms", "100%", "101%", "-5%", "nan%",
    "12345678901234567890GiB", "1 KiB", "64MiB ", "25:00", "24", "-1", "0;0;0", "23-0", "Europe/../../etc/passwd",
    "UTC", "s3://", "file:///", "file://relative", "s3://b/p?x=1", "http://user:pass@h", "0.0.0.0:99999", "[::1]:0",
    "[::1", "::1:80", "localhost:-1", "a" * 255, "TRACE", "trace", "json", "<<",
]


def _leaves(tree, path=()):
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _leaves(value, (*path, key))
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            yield from _leaves(value, (*path, index))
    yield path


def _hostile_value(rng: random.Random):
    choice = rng.random()
    if choice < 0.6:
        return rng.choice(_HOSTILE_SCALARS)
    if choice < 0.7:
        return [rng.choice(_HOSTILE_SCALARS) for _ in range(rng.randint(0, 5))]
    if choice < 0.8:
        return {str(rng.choice(_HOSTILE_SCALARS))[:40]: rng.choice(_HOSTILE_SCALARS)}
    if choice < 0.9:
        value: object = rng.choice(_HOSTILE_SCALARS)
        for _ in range(rng.randint(1, 60)):
            value = [value] if rng.random() < 0.5 else {"k": value}
        return value
    return rng.randint(-(10**rng.randint(1, 39)), 10**rng.randint(1, 39))


def _set(tree, path, value) -> None:
    for part in path[:-1]:
        tree = tree[part]
    tree[path[-1]] = value


def _delete(tree, path) -> None:
    for part in path[:-1]:
        tree = tree[part]
    if isinstance(tree, dict):
        del tree[path[-1]]
    else:
        tree.pop(path[-1])


def _raw_edits(text: str, rng: random.Random) -> str:
    data = bytearray(text.encode())
    for _ in range(rng.randint(1, 4)):
        where = rng.randrange(len(data) + 1)
        action = rng.random()
        if action < 0.4 and data:
            data[min(where, len(data) - 1)] = rng.randrange(256)
        elif action < 0.7:
            data[where:where] = rng.choice([b"&a ", b"*a", b"<<: *a\n", b"{", b"[", b"]", b"}", b":", b"\t",
                                            b"\n  ", b"!!python/object:os.system ", b"!!binary ", b"%YAML 1.1\n",
                                            b"---\n", b"? ", b"- ", b"'", b'"', b"\\", b"#"])
        else:
            del data[where:where + rng.randint(1, 40)]
    return bytes(data).decode("utf-8", "replace")


def mutated_config(seed: int) -> str:
    """A YAML text: VALID_CONFIG with one to three hostile mutations chosen by `seed` (deterministic)."""
    rng = random.Random(seed)
    tree = yaml.safe_load(yaml.safe_dump(VALID_CONFIG))
    for _ in range(rng.randint(1, 3)):
        paths = [path for path in _leaves(tree) if path]
        path = rng.choice(paths)
        action = rng.random()
        if action < 0.55:
            _set(tree, path, _hostile_value(rng))
        elif action < 0.7:
            _delete(tree, path)
        elif action < 0.85:
            _set(tree, (*path[:-1], rng.choice(["unknown", "reserv", "Reserve", "path ", "0", "<<"])),
                 _hostile_value(rng)) if isinstance(_parent(tree, path), dict) else None
        else:
            return _aliased(tree, rng)
    text = yaml.safe_dump(tree, allow_unicode=rng.random() < 0.5, width=rng.choice([20, 80, 10**6]))
    return _raw_edits(text, rng) if rng.random() < 0.3 else text


def _parent(tree, path):
    for part in path[:-1]:
        tree = tree[part]
    return tree


def _aliased(tree, rng: random.Random) -> str:
    """The tree with one of its sections anchored and repeated many times by aliases."""
    section = rng.choice(["service", "logs", "policies"])
    copies = rng.choice([2, 50, 5000, 200_000])
    anchor = yaml.safe_dump({"x": tree.get(section, {})}, default_flow_style=True).strip()[1:-1].split(": ", 1)[1]
    repeated = ", ".join(["*s"] * copies)
    where = "policies" if section == "service" else "service"
    return f"{section}: &s {anchor}\n{where}:\n  listen: [{repeated}]\n"
