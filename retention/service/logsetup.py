"""Logging for the retention commands and the sidecar: loguru to stderr, text or JSON, with the
standard library's records (the store's, APScheduler's) routed through it; no credential at any
level (redaction)."""

from __future__ import annotations

import logging
import sys

from loguru import logger

from .redaction import patch_record, quiet_libraries

_TEXT = "{time:YYYY-MM-DD HH:mm:ss.SSS} | {level: <7} | {message}"


class _InterceptHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            level: str | int = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        logger.opt(depth=6, exception=record.exc_info).log(level, "{}: {}", record.name,
                                                           record.getMessage())


def _to_stderr(message: str) -> None:
    """The sink: the `sys.stderr` of the moment of writing, not the one configuration found (a
    stream replaced since, a test's capture, may be closed: loguru would print the record as an
    error of its own instead)."""
    stream = sys.stderr
    stream.write(message)
    stream.flush()


def configure_logging(level: str = "INFO", log_format: str = "text") -> None:
    """(Re)configure logging; safe to call again on reload."""
    logger.remove()
    logger.configure(patcher=patch_record)
    logger.add(_to_stderr, level=level.upper(), format=_TEXT, serialize=log_format == "json",
               backtrace=False, diagnose=False, colorize=False)
    std_level = logging.DEBUG if level.upper() in ("TRACE", "DEBUG") else logging.INFO
    logging.basicConfig(handlers=[_InterceptHandler()], level=std_level, force=True)
    logging.getLogger("apscheduler").setLevel(max(std_level, logging.INFO))
    # APScheduler logs "Running job ..." and "... executed successfully" at INFO for every run, once
    # a second for the disk check, and "Added job" lines that repeat ours: its executors and
    # scheduler stay at warnings (missed and skipped runs, job errors).
    logging.getLogger("apscheduler.executors").setLevel(logging.WARNING)
    logging.getLogger("apscheduler.scheduler").setLevel(logging.WARNING)
    quiet_libraries()
