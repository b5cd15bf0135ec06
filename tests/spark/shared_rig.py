"""The test process's one cluster rig (cluster_rig.py), shared by every module that asks for
`spark_cluster`: started on first use, stopped once the next test does not need it (the rig's
tests run first and together, tests/conftest.py) or at the end of the run.

Each module gets the rig as a fresh start would leave it: every host up (a lost host revived), every
host's local disk, the main host's plain directory under it, the shared directory and moto's
state empty (the bucket made again), and the driver's session connected with an executor on each
host. A rig that broke (its master or a host's worker exited) is stopped and a new one started."""

from __future__ import annotations

import os
import shutil

import pytest

from cluster_rig import ClusterRig

KEY = pytest.StashKey["SharedRig"]()


class SharedRig:
    """Hands out the process's rig (`for_module`), stops it (`stop`); counts its starts."""

    def __init__(self, sessions, tmp_path_factory) -> None:
        self.sessions = sessions
        self.tmp_path_factory = tmp_path_factory
        self.rig: ClusterRig | None = None
        self.starts = 0

    def for_module(self) -> ClusterRig:
        """The rig, healthy and emptied, with the driver's session on it."""
        if self.rig is not None and not self._healthy():
            self.stop()
        if self.rig is None:
            self.rig = ClusterRig(self.tmp_path_factory.mktemp("clrig"))
            self.starts += 1
            try:
                self.rig.start(wait=False)        # the driver starts while the workers do
            except BaseException:
                self.stop()
                raise
        else:
            _empty(self.rig)
        self.sessions.cluster(self.rig)
        return self.rig

    def _healthy(self) -> bool:
        try:
            self.rig._check_alive()              # the master and every host not lost
            self.rig.alive_workers()             # the master answers
        except (RuntimeError, OSError):
            return False
        return True

    def stop(self) -> None:
        """Stop the rig's session (if it holds the context) and the rig. Idempotent."""
        rig, self.rig = self.rig, None
        if rig is None:
            return
        try:
            if self.sessions.owner is rig:
                self.sessions.stop()
        finally:
            rig.stop()


def _empty(rig: ClusterRig) -> None:
    """Revive lost hosts, empty every local disk, the shared directory and moto's state."""
    for host in rig.hosts.values():
        if host.lost:
            rig.revive_host(host.name)
    for name in rig.live_hosts():
        rig.run_on(name, ["find", rig.local_root, "-mindepth", "1", "-delete"])
    for directory in (rig.local_root, rig.shared_dir):     # not the directories: a host's
        for entry in os.scandir(directory):                 # tmpfs is mounted on local_root
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.remove(entry.path)
    rig.s3.reset()
    rig.s3.make_bucket(rig.bucket)
