"""Logging's sink follows the process's stderr: a stream replaced and closed after configuration
(a library's capture, a test's) never turns a later record into loguru's own error report."""

from __future__ import annotations

import io
import logging
import sys
import threading

from retention.service.logsetup import configure_logging


def test_a_record_after_the_configured_stream_was_closed_reaches_the_stderr_of_the_moment(capfd):
    before, replaced = sys.stderr, io.StringIO()
    sys.stderr = replaced
    try:
        configure_logging("INFO")
    finally:
        sys.stderr = before
    replaced.close()
    try:
        # as py4j's callback thread does: a library's record, from another thread
        worker = threading.Thread(target=logging.getLogger("py4j.probe").info, args=("a line after the close",))
        worker.start()
        worker.join()
        err = capfd.readouterr().err
        assert "a line after the close" in err and "Logging error in Loguru" not in err, err
    finally:
        configure_logging("INFO")
