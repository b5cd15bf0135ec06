"""One host: a log lives on one host's disk, so every task must run where the driver planned.

The driver records its host name in what it hands to the tasks (a read partition, a write target);
each task compares it with its own before touching the log and fails with `WrongHostError`
otherwise. Without the check, a task on another host would create and fill a second log at the same
path on its own disk, and the driver would commit records it cannot see.
"""

from __future__ import annotations

import os
import socket

from .staging_errors import WrongHostError


def this_host() -> str:
    """The name of the host this process runs on."""
    return socket.gethostname()


def executor_host() -> str:
    """This host as Spark names it (SPARK_LOCAL_HOSTNAME when set, else the host name): what a
    partition's preferred locations must say for Spark to run its task here."""
    return os.environ.get("SPARK_LOCAL_HOSTNAME") or socket.gethostname()


def check_host(planned_on: str, path: str, what: str) -> None:
    """Raise WrongHostError unless this process runs on `planned_on` (the planning host)."""
    here = this_host()
    if planned_on != here:
        raise WrongHostError(path, planned_on, here, what)
