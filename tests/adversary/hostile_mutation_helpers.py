"""The damage the log-file fuzzer (hostile_log_helpers) does to one file, chosen by a seeded random:
bits flipped, the file truncated, extended (zeros or random bytes), zeroed or overwritten in part; a
JSON value swapped for a hostile one or a key dropped (meta.json, the manifests); a `state.db` value
set to one that is not an offset or a time; the file removed, or a segment renamed to another base."""

from __future__ import annotations

import json
import random
from pathlib import Path

_HOSTILE_NUMBERS = [-1, 0, 1, 2**31, 2**63, 2**64 + 7, -(2**63), 10**30, 4095, 4097, 1.5, float("nan"), "12", None,
                    True, [], {}, "", "../../x"]


def _mutate_json(path: Path, rng: random.Random) -> str | None:
    """A structure-aware edit of a JSON file: one value swapped for a hostile one, or a key dropped."""
    try:
        tree = json.loads(path.read_text())
    except ValueError:
        return None
    places, stack = [], [tree]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            places.append((node, key))
            stack.append(value)
    if not places:
        return None
    node, key = rng.choice(places)
    if isinstance(node, dict) and rng.random() < 0.25:
        del node[key]
        what = f"json: drop {key!r}"
    else:
        node[key] = rng.choice(_HOSTILE_NUMBERS)
        what = f"json: {key!r} = {node[key]!r}"
    path.write_text(json.dumps(tree))
    return what


def _mutate_state(path: Path, rng: random.Random) -> str:
    """A structure-aware edit of state.db: a group's commit or a log_meta value set to a hostile one."""
    import sqlite3
    value = rng.choice([-1, 0, 2**62, 10**6, "x", None, 1.5])
    table, column = rng.choice([("consumer_groups", "committed_offset"), ("consumer_groups", "committed_at"),
                                ("log_meta", "value")])
    with sqlite3.connect(path) as db:
        try:
            db.execute(f"UPDATE {table} SET {column} = ?", (value,))
        except sqlite3.DatabaseError as error:   # NOT NULL: a constraint is not damage
            return f"sqlite: {table}.{column} = {value!r} refused ({error})"
    db.close()
    return f"sqlite: {table}.{column} = {value!r}"


def _remove_or_rename(path: Path, rng: random.Random) -> str:
    """The file gone, or a segment (with its index) under another base offset."""
    from commitlog import parse_segment_name, segment_name
    base = parse_segment_name(path.name)
    if base is None or rng.random() < 0.5:
        path.unlink()
        return "remove"
    other = base + rng.choice([-1, 1, 7, 100])
    path.rename(path.with_name(segment_name(other)))
    index = path.with_suffix(".index")
    if index.exists():
        index.rename(path.with_name(segment_name(other)).with_suffix(".index"))
    return f"rename to base {other}"


def mutate(path: Path, rng: random.Random) -> str:
    """Damage `path` one way; returns what was done, in words."""
    if path.suffix == ".json" and rng.random() < 0.5:
        what = _mutate_json(path, rng)
        if what is not None:
            return what
    if path.name == "state.db" and rng.random() < 0.5:
        return _mutate_state(path, rng)
    if rng.random() < 0.04:
        return _remove_or_rename(path, rng)
    data = bytearray(path.read_bytes())
    size = len(data)
    kind = rng.choice(["flip", "flip", "truncate", "extend", "zero", "bytes"])
    where = rng.randrange(size) if size else 0
    if kind == "flip" and size:
        bits = rng.randint(1, 3)
        for _ in range(bits):
            at = rng.randrange(size) if rng.random() < 0.5 else where
            data[at] ^= 1 << rng.randrange(8)
        what = f"flip {bits} bit(s) near byte {where}"
    elif kind == "truncate":
        where = rng.choice([0, where, max(size - rng.randint(1, 64), 0)])
        del data[where:]
        what = f"truncate to {where} bytes"
    elif kind == "extend":
        extra = rng.choice([1, 7, 4096, rng.randint(1, 9000)])
        data += bytes(extra) if rng.random() < 0.5 else rng.randbytes(extra)
        what = f"extend by {extra} bytes"
    elif kind == "zero" and size:
        length = rng.choice([1, 4, 26, 512, size])
        data[where:where + length] = bytes(len(data[where:where + length]))
        what = f"zero {length} bytes at {where}"
    else:
        length = rng.randint(1, 8)
        data[where:where + length] = rng.randbytes(length)
        what = f"random {length} bytes at {where}"
    path.write_bytes(bytes(data))
    return f"{kind}: {what} (of {size})"
