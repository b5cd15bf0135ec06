"""Loaded (through PYTHONPATH) by a process the clock probes run under libfaketime with the monotonic
clock left real (FAKETIME_DONT_FAKE_MONOTONIC=1). Measured with libfaketime 0.9.10 and Python 3.11:
faking the monotonic clock hangs every timed wait (a Lock or Event wait computes its deadline on the
faked clock and waits on the kernel's, 57 years away); leaving it real makes `time.sleep` fail with
EINVAL (libfaketime shifts its absolute deadline), while an Event wait sleeps the time asked. So
`time.sleep` becomes an Event wait here: the one fake of a sleep, in the test's process only."""

import threading
import time


def _sleep(seconds: float) -> None:
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    threading.Event().wait(seconds)


time.sleep = _sleep
