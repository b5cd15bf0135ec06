"""A multi-host Spark standalone cluster on one machine, for tests (docs/development.md).

The main host (this process: the driver, the master, moto's S3 server) keeps the machine's
hostname and filesystem. Each worker host runs in its own UTS and mount namespace (`unshare --uts
--mount --propagation private`): its own hostname, its own loopback address (127.0.0.2, ...) as
SPARK_LOCAL_IP and SPARK_LOCAL_HOSTNAME, its own /etc/hosts (bind-mounted, naming every host), and
a private tmpfs mounted at `local_root`, the same path on every host; the main host sees the plain
directory under it. `shared_dir` (a `file://` tier) and moto's endpoint are reachable from every
host. Executors are children of their worker, so they share its namespaces and hostname.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from archive_helpers import BUCKET, CREDENTIALS, DIE_WITH_PARENT, S3Server, free_port
from jvm_helpers import SPARK_CONF, spark_jvm_options

REPO = str(Path(__file__).resolve().parents[2])
# What executors import: this checkout's packages before the installed ones, and the test helpers
# (functions of a test module are pickled by reference, so its directory must be importable).
PYTHONPATH = os.pathsep.join((REPO, os.path.join(REPO, "tests"), os.path.join(REPO, "tests", "spark")))
HOSTS = (("host-a", "127.0.0.2"), ("host-b", "127.0.0.3"))
TMPFS_SIZE = "256m"
START_TIMEOUT = 90.0

# Runs as the worker host's first process, inside its new namespaces, then becomes the worker.
_HOST_INIT = """set -e
hostname "$1"
mount -t tmpfs -o size="$2",mode=0755 "tmpfs-$1" "$3"
mount --bind "$4" /etc/hosts
shift 4
exec "$@"
"""


class RigUnavailable(Exception):
    """This machine cannot run the rig (not root, no unshare/nsenter, namespaces refused)."""


def unavailable_reason() -> str | None:
    """Why the rig cannot run here, or None."""
    if os.geteuid() != 0:
        return "the Spark cluster rig needs root (unshare --mount, mount -t tmpfs)"
    for tool in ("unshare", "nsenter", "mount"):
        if shutil.which(tool) is None:
            return f"the Spark cluster rig needs {tool} (util-linux), not found on PATH"
    proc = subprocess.run(["unshare", "--uts", "--mount", "--propagation", "private", "true"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return f"unshare --uts --mount is refused here: {proc.stderr.strip()}"
    return None


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class Host:
    """A worker host: its worker process (the namespaces' first process) and directories."""
    name: str
    ip: str
    log: Path
    process: subprocess.Popen | None = None
    mnt_ns: str = ""
    lost: bool = False

    @property
    def pid(self) -> int:
        if self.process is None or self.process.poll() is not None:
            raise RuntimeError(f"host {self.name} is not running")
        return self.process.pid


class ClusterRig:
    """moto's S3 server, a standalone master on 127.0.0.1 and worker hosts in namespaces.

    start() / stop() (idempotent, safe after a partial start); run_on(host, argv) runs a
    command in a host's namespaces; kill_host(host) loses a host; revive_host(host) brings a new,
    empty one up under the same name."""

    def __init__(self, base: Path, hosts=HOSTS, python: str = sys.executable,
                 tmpfs_size: str = TMPFS_SIZE) -> None:
        import pyspark
        self.base = Path(base)
        self.tmpfs_size = tmpfs_size                       # each worker host's local disk
        self.spark_home = os.path.dirname(pyspark.__file__)
        self.python = python
        self.local_root = str(self.base / "local")       # a private tmpfs on each worker host
        self.shared_dir = str(self.base / "shared")      # one directory every host sees
        self.shared_url = "file://" + self.shared_dir
        self.bucket = BUCKET
        self.s3 = S3Server()
        self.master_port, self.master_ui_port = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{self.master_port}"
        self.master: subprocess.Popen | None = None
        self.hosts = {name: Host(name, ip, self.base / "logs" / f"{name}.log") for name, ip in hosts}
        self.session = None        # the driver's SparkSession, once one is connected (sessions.py)

    @property
    def s3_endpoint(self) -> str:
        return self.s3.endpoint

    # -- starting -------------------------------------------------------------------------------

    def start(self, wait: bool = True) -> "ClusterRig":
        """Start moto, the master and the worker hosts; with `wait`, return once the master holds
        every worker alive (else call wait_ready(), after starting a driver meanwhile)."""
        reason = unavailable_reason()
        if reason is not None:
            raise RigUnavailable(reason)
        for sub in ("local", "shared", "logs", "conf"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        self._write_hosts_file()
        self.s3.start()
        self.s3.make_bucket(self.bucket)
        self._start_master()
        self.wait_workers(set())      # the master answers (a worker started earlier waits ~10 s)
        for host in self.hosts.values():
            self._start_host(host)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self) -> None:
        """Wait until the master holds every live host's worker (and the session, if one is
        connected, an executor on each)."""
        self.wait_workers({h.ip for h in self.hosts.values() if not h.lost})
        if self.session is not None:
            self.wait_executors(self.live_hosts())

    def _env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, **CREDENTIALS, "SPARK_HOME": self.spark_home,
                "SPARK_CONF_DIR": str(SPARK_CONF), "SPARK_DAEMON_MEMORY": "512m",
                "SPARK_DAEMON_JAVA_OPTS": spark_jvm_options(),
                "PYSPARK_PYTHON": self.python, "PYTHONPATH": PYTHONPATH, **extra}

    def _spark_class(self) -> str:
        return os.path.join(self.spark_home, "bin", "spark-class")

    def _write_hosts_file(self) -> None:
        lines = ["127.0.0.1 localhost", f"127.0.0.1 {os.uname().nodename}"]
        lines += [f"{host.ip} {host.name}" for host in self.hosts.values()]
        (self.base / "conf" / "hosts").write_text("\n".join(lines) + "\n")

    def _start_master(self) -> None:
        log = self.base / "logs" / "master.log"
        with open(log, "ab") as out:
            self.master = subprocess.Popen(
                [*DIE_WITH_PARENT, self._spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(self.master_port), "--webui-port", str(self.master_ui_port)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env=self._env(SPARK_LOCAL_IP="127.0.0.1", SPARK_LOCAL_HOSTNAME="127.0.0.1",
                              SPARK_MASTER_OPTS="-Dspark.worker.timeout=15"))

    def _start_host(self, host: Host) -> None:
        scratch = self.base / "hosts" / host.name
        for sub in ("work", "scratch"):
            (scratch / sub).mkdir(parents=True, exist_ok=True)
        argv = [*DIE_WITH_PARENT, "unshare", "--uts", "--mount", "--propagation", "private",
                "sh", "-c", _HOST_INIT, "host-init", host.name, self.tmpfs_size, self.local_root,
                str(self.base / "conf" / "hosts"),
                self._spark_class(), "org.apache.spark.deploy.worker.Worker",
                "--host", host.ip, "--cores", "1", "--memory", "1g", "--webui-port", "0",
                "--work-dir", str(scratch / "work"), self.master_url]
        with open(host.log, "ab") as out:
            host.process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                env=self._env(SPARK_LOCAL_IP=host.ip, SPARK_LOCAL_HOSTNAME=host.ip,
                              SPARK_LOCAL_DIRS=str(scratch / "scratch")))
        host.lost = False
        host.mnt_ns = self._wait_namespace(host)

    def _wait_namespace(self, host: Host) -> str:
        """The worker's mount namespace, once its init switched to it and mounted the tmpfs."""
        mine = os.readlink("/proc/self/ns/mnt")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                ns = os.readlink(f"/proc/{host.process.pid}/ns/mnt")
                cmd = Path(f"/proc/{host.process.pid}/cmdline").read_bytes()
            except OSError:
                ns, cmd = mine, b""
            if ns != mine and b"host-init" not in cmd:     # past the mounts: exec'd the worker
                return ns
            time.sleep(0.05)
        raise RuntimeError(f"host {host.name} did not enter its namespaces:\n{_tail(host.log)}")

    def _check_alive(self) -> None:
        named = [("master", self.master, self.base / "logs" / "master.log")]
        named += [(h.name, h.process, h.log) for h in self.hosts.values() if not h.lost]
        for name, process, log in named:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}; its log "
                                   f"{log} ends:\n{_tail(log)}")

    def master_state(self) -> dict:
        url = f"http://127.0.0.1:{self.master_ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)

    def alive_workers(self) -> set[str]:
        """IPs of the workers the master holds ALIVE."""
        return {w["host"] for w in self.master_state()["workers"] if w["state"] == "ALIVE"}

    def wait_workers(self, ips: set[str], timeout: float = START_TIMEOUT) -> None:
        """Wait until the master holds exactly the workers at `ips` alive."""
        deadline, seen = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                seen = self.alive_workers()
            except OSError:
                seen = None                 # the master's UI is not up yet
            if seen == ips:
                return
            time.sleep(0.2)
        raise RuntimeError(f"the master holds workers {seen} alive, expected {sorted(ips)} "
                           f"after {timeout:.0f} s; master log:\n"
                           f"{_tail(self.base / 'logs' / 'master.log')}")

    # -- the driver's view ----------------------------------------------------------------------

    def host_of_ip(self, ip: str) -> str:
        return next(h.name for h in self.hosts.values() if h.ip == ip)

    def executor_hosts(self) -> set[str]:
        """Names of the hosts the driver's session holds an executor on."""
        tracker = self.session._jsc.sc().statusTracker()
        ips = {info.host() for info in tracker.getExecutorInfos()} - {"127.0.0.1"}
        return {self.host_of_ip(ip) for ip in ips}

    def wait_executors(self, names: set[str], timeout: float = START_TIMEOUT) -> None:
        deadline, seen = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            self._check_alive()
            seen = self.executor_hosts()
            if seen == names:
                return
            time.sleep(0.2)
        raise RuntimeError(f"the driver holds executors on {seen}, expected {sorted(names)}; "
                           f"see the executors' logs under {self.base / 'hosts'}")

    def live_hosts(self) -> set[str]:
        return {h.name for h in self.hosts.values() if not h.lost}

    # -- acting on a host -----------------------------------------------------------------------

    def run_on(self, name: str, argv: list[str], check: bool = True,
               **kwargs) -> subprocess.CompletedProcess:
        """Run `argv` in host `name`'s UTS and mount namespaces (its hostname, its local disk)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        kwargs.setdefault("timeout", 60)
        pid = self.hosts[name].pid
        return subprocess.run(["nsenter", "-t", str(pid), "-u", "-m", "--", *argv],
                              check=check, **kwargs)

    def _host_pids(self, host: Host) -> list[int]:
        """Every process in the host's mount namespace (its worker, executors, Python workers)."""
        pids = []
        if not host.mnt_ns:
            return pids
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.readlink(f"/proc/{entry}/ns/mnt") == host.mnt_ns:
                        pids.append(int(entry))
                except OSError:
                    pass                     # exited meanwhile, or a kernel thread
        return pids

    def _kill_namespace(self, host: Host) -> None:
        """SIGKILL every process of the host until none is left: its mount namespace, and with it
        the tmpfs (the host's local disk and all it held), is gone once the last one exits."""
        if host.process is None:
            return
        if host.process.poll() is None:
            host.process.kill()       # the first process, even before it entered its namespaces
        deadline = time.monotonic() + 30
        while pids := self._host_pids(host):
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"host {host.name}: processes {pids} survive SIGKILL")
            time.sleep(0.05)
        host.process.wait(10)

    def kill_host(self, name: str) -> None:
        """Lose host `name`: SIGKILL its worker, executors and every other process in its
        namespaces; its tmpfs goes with them. Returns once the master and the driver's session
        (if any) have dropped it."""
        host = self.hosts[name]
        self._kill_namespace(host)
        host.lost = True
        self.wait_ready()

    def revive_host(self, name: str) -> None:
        """Bring a lost host back: a new worker, a new empty tmpfs, same name and address; returns
        once the master (and the driver's session, if any) holds it again."""
        host = self.hosts[name]
        if not host.lost:
            raise RuntimeError(f"host {name} is not lost")
        self._start_host(host)
        self.wait_ready()

    # -- stopping -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Kill every process the rig started (the session must be stopped first); their mounts
        go with their namespaces. Idempotent."""
        errors = []
        for host in self.hosts.values():
            try:
                self._kill_namespace(host)
                host.lost = True
            except Exception as exc:      # keep stopping the rest, report after
                errors.append(exc)
        if self.master is not None and self.master.poll() is None:
            os.killpg(self.master.pid, signal.SIGKILL)
            self.master.wait(10)
        self.s3.kill()
        if errors:
            raise errors[0]
