"""Probe: whatever a library or our own code puts in a log line at any level, a credential never
reaches the log: the S3 client's libraries stay at INFO, and every record is redacted."""

from __future__ import annotations

import logging

import pytest
from loguru import logger

from credentials_helpers import ACCESS_KEY_ID, SECRET, TOKEN, leaks
from retention.service.logsetup import configure_logging

# What botocore's DEBUG request dump and a presigned URL look like, with the probe's credentials.
DUMP = (f"Sending http request: <AWSPreparedRequest stream_output=False, method=PUT, "
        f"url=http://127.0.0.1:9000/archive/x?X-Amz-Credential={ACCESS_KEY_ID}%2F20261126%2Fus-east-1"
        f"%2Fs3%2Faws4_request&X-Amz-Signature=0123456789abcdef0123456789abcdef&X-Amz-Security-Token={TOKEN}, "
        f"headers={{'X-Amz-Security-Token': b'{TOKEN}', 'Authorization': b'AWS4-HMAC-SHA256 "
        f"Credential={ACCESS_KEY_ID}/20261126/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, "
        f"Signature=4d444c80fd7e3357e6a1c0ffee0123456789abcdef0123456789abcdef012345'}}>")
CONFIG = f"aws_access_key_id = {ACCESS_KEY_ID}\naws_secret_access_key = {SECRET}\naws_session_token = {TOKEN}"


@pytest.fixture(params=["text", "json"])
def log_format(request):
    yield request.param
    configure_logging("INFO")


def test_the_s3_clients_debug_dumps_never_reach_the_log_at_trace(capsys, log_format):
    configure_logging("TRACE", log_format)
    logging.getLogger("botocore.endpoint").debug(DUMP)
    logging.getLogger("urllib3.connectionpool").debug(DUMP)
    logging.getLogger("commitlog.probe").debug("a line of ours at DEBUG")
    err = capsys.readouterr().err
    assert "a line of ours at DEBUG" in err and "Sending http request" not in err


@pytest.mark.parametrize("text", [DUMP, CONFIG], ids=["request-dump", "credentials-file"])
def test_every_record_is_redacted_whoever_logs_it(capsys, log_format, text):
    configure_logging("TRACE", log_format)
    logging.getLogger("commitlog.probe").warning(text)      # the standard library's records
    logger.trace(text)                                      # loguru's own
    logger.opt(lazy=True).info("{}", lambda: text)
    err = capsys.readouterr().err
    assert err.count("[redacted]") >= 3 and leaks(err) == [], leaks(err)


def test_ordinary_lines_are_kept_as_they_are(capsys):
    configure_logging("TRACE")
    line = "archive s3://archive/x: found credentials in environment variables; 3 segments, Signed 2"
    logger.info(line)
    assert line in capsys.readouterr().err
    configure_logging("INFO")
