"""A task attempt in its own process, for the tests that SIGKILL one mid-write: appends one Arrow
batch of one row at a time (a turn each) to the job a pickled WriteTarget names, slowly, forever.

usage: attempt_child.py TARGET_PICKLE FIRST_ID
"""

from __future__ import annotations

import pickle
import sys
import time

import pyarrow as pa

from commitlog.spark.writing.appender import Appender


def batches(first: int):
    n = first
    while True:
        yield pa.record_batch([pa.array([n], pa.int64())], names=["id"])
        n += 1
        time.sleep(0.02)


def main(target_file: str, first: str) -> None:
    with open(target_file, "rb") as f:
        target = pickle.load(f)
    Appender(target).write_all(batches(int(first)))


if __name__ == "__main__":
    main(*sys.argv[1:3])
