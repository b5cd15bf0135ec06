"""`retention serve`: the long-running sidecar process.

The main thread installs the signal handlers, starts the scheduler (`RetentionScheduler`), the HTTP
server and, with `--demo`, the demo writer, tells systemd it is ready, then waits for signals:

- SIGTERM, SIGINT: stop. A running pass ends before its next file (never between a rename and its
  unlink), so the process exits 0 within `pause_between_files` plus about a second. A second signal
  while stopping exits at once (status 1).
- SIGHUP: re-read the configuration file. An invalid file: one error line, the old configuration
  keeps running. A valid one: new intervals, hours, ratios, logs, log level and format, token,
  listen address, http_timeout and max_connections apply without a restart.
- SIGPIPE: ignored (a client that hangs up mid-answer never stops the sidecar).

With `NOTIFY_SOCKET` set (systemd `Type=notify`) it sends READY=1, RELOADING=1/READY=1 around a
reload, STOPPING=1, and WATCHDOG=1 at half of `WatchdogSec` while the scheduler is alive.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import sys
import time
from collections.abc import Callable

from loguru import logger

from policies import ConfigError, RetentionConfig

from ..deletion.owner import RESERVE, raise_descriptor_limit
from .embedded import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from .embedded import load as load_embedded
from .logsetup import configure_logging
from .notify import SystemdNotifier



class _Signals:
    """Flags set by the signal handlers; the main thread acts on them (handlers only set flags)."""

    def __init__(self) -> None:
        self.stop: int | None = None
        self.reload = False
        self.stopping = False
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._previous = {}

    def install(self) -> None:
        signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._on_stop)
        self._previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, self._on_hup)
        # A client hanging up mid-answer must cost an EPIPE on its socket, never the process.
        self._previous[signal.SIGPIPE] = signal.signal(signal.SIGPIPE, signal.SIG_IGN)

    def _on_stop(self, signum, frame) -> None:
        if self.stopping:
            os.write(2, f"retention: second {signal.Signals(signum).name} while stopping: exiting now\n".encode())
            os._exit(EXIT_FAILED)
        self.stop = signum

    def _on_hup(self, signum, frame) -> None:
        self.reload = True

    def wait(self, timeout: float | None) -> None:
        """Block until a signal arrives or `timeout` seconds pass."""
        if self.stop is not None or self.reload:
            return
        try:
            select.select([self._read], [], [], timeout)
        except InterruptedError:
            pass
        try:
            while os.read(self._read, 512):
                pass
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                raise

    def restore(self) -> None:
        signal.set_wakeup_fd(-1)
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        os.close(self._read)
        os.close(self._write)


_HEALTH_EVERY = 2.0     # seconds between the main thread's health evaluations


def _evaluate_health(scheduler) -> None:
    try:
        scheduler.health_problems()
    except Exception as exc:  # noqa: BLE001 (health reporting must never end the sidecar)
        logger.opt(exception=exc).error("evaluating health failed: {}", exc)


def _describe(config: RetentionConfig, source: str) -> str:
    logs = "; ".join(f"{n} -> {log.path} (policy {log.policy}, every "
                     f"{config.policies[log.policy].interval:g}s)" for n, log in config.logs.items())
    return f"configuration {source}: {logs or 'no logs'}; audit trail {config.service.audit}"


def serve(config: RetentionConfig, *, config_path: str | None = None, demo: bool = False) -> int:
    """Run the sidecar until SIGTERM/SIGINT; returns the exit status."""
    from prometheus_client import disable_created_metrics

    from .demo import DEMO_LOG, DemoWriter
    from ..web.server import RetentionHTTPServer
    from ..scheduling.scheduler import RetentionScheduler

    disable_created_metrics()   # no *_created series: this process's registry is ours alone
    source, load, config = _configuration(config, config_path, demo)
    signals = _Signals()
    signals.install()
    notifier = SystemdNotifier()
    writer = None
    scheduler = None
    http = None
    try:
        _announce(config, source, config_path, demo)
        _raise_descriptor_limit()
        if demo:
            if DEMO_LOG not in config.logs:
                logger.error("--demo needs a log named {!r} in {} (the embedded demo configuration has one)",
                             DEMO_LOG, source)
                return EXIT_USAGE
            writer = DemoWriter(config.logs[DEMO_LOG], config.policy_for(DEMO_LOG))
            writer.start()
        scheduler = RetentionScheduler(config, config_source=source)
        http = RetentionHTTPServer(scheduler, config.service)
        try:
            http.start()
        except OSError as exc:
            logger.error("cannot listen on {}: {}", config.service.listen, exc)
            return EXIT_FAILED
        scheduler.start()
        logger.info("retention serve: pid {}, HTTP on {} (/livez /healthz /readyz /metrics /status /plan, "
                    "POST /clean)", os.getpid(), http.url)
        notifier.ready(f"serving on {http.url}")
        _serve_until_stopped(signals, notifier, scheduler, http, load, source)
        signals.stopping = True
        logger.info("received {}: stopping (a running pass ends before its next file)",
                    signal.Signals(signals.stop).name)
        notifier.stopping()
        started = time.monotonic()
        scheduler.stop()
        http.stop()
        if writer is not None:
            writer.stop()
            writer = None
        logger.info("stopped in {:.2f}s", time.monotonic() - started)
        return EXIT_OK
    finally:
        signals.stopping = True
        if scheduler is not None:
            scheduler.stop()
        if http is not None and not http.stopping:
            http.stop()
        if writer is not None:
            writer.stop()
        notifier.close()
        signals.restore()


def _configuration(config: RetentionConfig, config_path: str | None,
                   demo: bool) -> tuple[str, Callable[[], RetentionConfig], RetentionConfig]:
    """(where the configuration comes from, how a SIGHUP reloads it, the configuration to run):
    the file at `config_path`, else the embedded default with the demo's log added (`demo`), else
    the embedded default."""
    from .demo import DEMO_CONFIG_SOURCE, load_demo_config

    if config_path is not None:
        return os.path.abspath(config_path), lambda: load_embedded(config_path), config
    if demo:
        config = load_demo_config()
        configure_logging(config.service.log_level, config.service.log_format)
        return DEMO_CONFIG_SOURCE, load_demo_config, config
    return "<embedded conf/retention.yaml>", lambda: load_embedded(None), config


def _raise_descriptor_limit() -> None:
    """Each owned log holds a descriptor (retention.deletion.owner): the soft limit goes to the hard one."""
    before, after = raise_descriptor_limit()
    if after != before:
        logger.info("open-files limit raised from {} to {} (the hard limit): each owned log holds a "
                    "descriptor, {} are kept for the rest", before, after, RESERVE)
    else:
        logger.info("open-files limit {}: up to {} logs can be owned", after, max(0, after - RESERVE))


def _announce(config: RetentionConfig, source: str, config_path: str | None, demo: bool) -> None:
    if config_path is None:
        logger.info("retention serve: no --config, so the {} runs; data under {}",
                    "embedded default configuration with the demo log added" if demo
                    else "embedded default configuration",
                    os.path.join(os.getcwd(), "data"))
    logger.info("retention serve: {}", _describe(config, source))
    if not config.logs:
        logger.warning("retention serve: {} has no logs: nothing will be cleaned", source)


def _serve_until_stopped(signals: "_Signals", notifier: SystemdNotifier, scheduler, http,
                         load: Callable[[], RetentionConfig], source: str) -> None:
    """Evaluate health, reload on SIGHUP and feed systemd's watchdog until SIGTERM/SIGINT."""
    watchdog = notifier.watchdog_interval
    if watchdog is not None:
        notifier.watchdog()
    while signals.stop is None:
        # Health is evaluated here too, so a problem is logged when it starts even when the
        # disk check itself has stalled and nobody probes /healthz.
        signals.wait(min(watchdog, _HEALTH_EVERY) if watchdog is not None else _HEALTH_EVERY)
        _evaluate_health(scheduler)
        if signals.reload and signals.stop is None:
            signals.reload = False
            _reload(load, source, scheduler, http, notifier)
        if watchdog is not None and signals.stop is None and scheduler.alive():
            notifier.watchdog()


def _reload(load, source: str, scheduler, http, notifier: SystemdNotifier) -> RetentionConfig:
    """SIGHUP: re-read the file; on any problem keep the running configuration."""
    notifier.reloading()
    try:
        try:
            new = load()
        except ConfigError as exc:
            logger.error("reload (SIGHUP) failed, still running the previous configuration: {}", exc)
            scheduler.reload_failed(str(exc))
            return scheduler.config
        except Exception as exc:  # noqa: BLE001 (an unreadable file, an I/O error)
            logger.error("reload (SIGHUP) failed, still running the previous configuration: {}: {}",
                         source, exc)
            scheduler.reload_failed(f"{source}: {exc}")
            return scheduler.config
        configure_logging(new.service.log_level, new.service.log_format)
        scheduler.reload(new)
        http.update(new.service)
        logger.info("reload (SIGHUP): applied {}", _describe(new, source))
        return new
    finally:
        notifier.ready(f"serving on {http.url}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run `retention serve`")
