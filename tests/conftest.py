"""Fixtures shared by every test package: a scratch log directory, a real small filesystem, a
directory another user may traverse, and a real S3 API server on loopback (moto's, one per test
module) with the credentials its clients use. Also the Java flags of the run's Spark JVMs
(jvm_helpers) and the work units of a parallel run (`make test`,
pytest-xdist `--dist loadgroup`): see pytest_collection_modifyitems."""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from archive_helpers import CREDENTIALS, S3Server
from jvm_helpers import use_test_spark_conf
from racy_window import PRODUCT_RACY_NS, TEST_RACY_NS


@pytest.fixture(autouse=True)
def _test_racy_window(monkeypatch):
    """Every in-process test trusts an mtime after TEST_RACY_NS, not 2 s (tests/racy_window.py)."""
    monkeypatch.setattr("retention.deletion.log_keys.RACY_NS", TEST_RACY_NS)


@pytest.fixture
def product_racy_window(monkeypatch):
    """The product's own racy window (2 s), for a test whose changes must stay within it."""
    monkeypatch.setattr("retention.deletion.log_keys.RACY_NS", PRODUCT_RACY_NS)


# The xdist group of every test on the Spark cluster rig: one rig at a time on the machine (its
# worker hosts take fixed loopback addresses and four JVMs), the first unit a parallel run starts.
CLUSTER_GROUP = "spark-cluster"


def xdist_group_of(item: pytest.Item) -> str | None:
    """The test's work unit under `--dist loadgroup`: the cluster rig's group for a test on the rig;
    its module's path when it uses a module-scoped fixture (set up once, as in a serial run, never
    on two workers at once); else None (a unit of its own)."""
    if "spark_cluster" in item.fixturenames:
        return CLUSTER_GROUP
    defs = getattr(item, "_fixtureinfo", None)
    for fixturedefs in (defs.name2fixturedefs.values() if defs else ()):
        if fixturedefs and fixturedefs[-1].scope == "module":
            return item.nodeid.split("::")[0]
    return None


@pytest.hookimpl(tryfirst=True)      # before pytest-xdist's own hook reads the marks
def pytest_collection_modifyitems(config, items):
    """Groups the tests for a parallel run (xdist_group_of; a test's own `xdist_group` mark wins)
    and puts the rig's tests first: the longest unit starts first. A serial run ignores the marks."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            group = xdist_group_of(item)
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: xdist_group_of(item) != CLUSTER_GROUP)


def pytest_configure(config):
    """Every Spark JVM of the run gets the test flags (jvm_helpers), from a directory of this
    process's own, removed at the end."""
    config._spark_conf_dir = Path(tempfile.mkdtemp(prefix="spark-conf-"))
    use_test_spark_conf(config._spark_conf_dir)


def pytest_unconfigure(config):
    conf_dir = getattr(config, "_spark_conf_dir", None)
    if conf_dir is not None:
        shutil.rmtree(conf_dir, ignore_errors=True)


# SIGINT is not guarded: a Spark session (a module's fixture) installs PySpark's handler for it.
_GUARDED_SIGNALS = (signal.SIGPIPE, signal.SIGTERM, signal.SIGHUP)


@pytest.fixture(autouse=True)
def signal_dispositions_kept():
    """Every test leaves the test process's signal dispositions as it found them. A test that ran
    a CLI in-process once left SIGPIPE at its default action, and a later write to a closed pipe
    then killed the whole run (`make: *** Broken pipe`)."""
    before = {number: signal.getsignal(number) for number in _GUARDED_SIGNALS}
    yield
    changed = [signal.Signals(number).name for number, handler in before.items()
               if signal.getsignal(number) != handler]
    for number, handler in before.items():
        signal.signal(number, handler)
    assert not changed, f"the test changed the process's disposition of {', '.join(changed)}"


@pytest.fixture
def tmp_log_dir(tmp_path):
    """A path (not yet created) for a log directory inside pytest's per-test tmp_path."""
    return str(tmp_path / "log")


@pytest.fixture
def nobody_tmp():
    """A fresh directory under /tmp (mode 0755) that uid 65534 may traverse, for tests that run
    something as that user (other_user_helpers); removed afterwards. Skips unless run as root,
    which alone can become another user."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run as another user")
    path = tempfile.mkdtemp(prefix="perms-", dir="/tmp")
    os.chmod(path, 0o755)
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)     # as root, whatever modes the test left


def _mount(args: list[str], what: str) -> None:
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip()
        if "permission denied" in message.lower() or "must be superuser" in message.lower() \
                or "operation not permitted" in message.lower():
            pytest.skip(f"cannot mount {what} here (EPERM: {message})")
        raise RuntimeError(f"mounting {what} failed: {' '.join(args)}: {message}")


@pytest.fixture
def small_fs(request, tmp_path):
    """A freshly mounted small filesystem; yields its mount point, unmounts it afterwards.

    Defaults to an 8 MiB tmpfs. Parametrize indirectly to choose:
    `@pytest.mark.parametrize("small_fs", [("tmpfs", 8 << 20), ("ext4", 16 << 20)], indirect=True)`.
    Skips (with the reason) only when mounting is not permitted here."""
    kind, size = getattr(request, "param", ("tmpfs", 8 << 20))
    mountpoint = tempfile.mkdtemp(prefix=f"small-{kind}-")
    image = None
    try:
        if kind == "tmpfs":
            _mount(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mountpoint], "tmpfs")
        elif kind == "ext4":
            image = str(tmp_path / "small-ext4.img")
            with open(image, "wb") as f:
                f.truncate(size)
            subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", image], check=True,
                           capture_output=True)
            _mount(["mount", "-o", "loop", image, mountpoint], "a loop ext4 image")
        else:
            raise ValueError(f"small_fs kind must be tmpfs or ext4, got {kind!r}")
    except PermissionError as exc:
        os.rmdir(mountpoint)
        pytest.skip(f"cannot mount {kind} here ({exc})")
    except BaseException:
        os.rmdir(mountpoint)
        raise
    try:
        yield mountpoint
    finally:
        for attempt in range(50):
            proc = subprocess.run(["umount", mountpoint], capture_output=True, text=True)
            if proc.returncode == 0:
                break
            if "busy" not in proc.stderr.lower():
                break
            time.sleep(0.1)  # a child process we killed may still be exiting
        else:
            subprocess.run(["umount", "-l", mountpoint], capture_output=True)
        try:
            os.rmdir(mountpoint)
        except OSError as exc:
            if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
                raise


@pytest.fixture
def s3_credentials(monkeypatch):
    """The environment boto3's credential chain reads, as the server expects it."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(scope="module")
def s3():
    server = S3Server().start()
    server.make_bucket()
    yield server
    server.kill()
