"""No log line holds a credential, at any level: what the logging setup (logsetup) applies.

- The S3 client's libraries (botocore, boto3, s3transfer, urllib3) are never forwarded below INFO:
  botocore's DEBUG request dumps carry the Authorization header (access key id, signature) and
  the session token.
- Every record, ours and the standard library's, passes `redact` as defence in depth: the value
  after an Authorization, X-Amz-Security-Token, X-Amz-Credential, X-Amz-Signature, Signature,
  Credential, aws_secret_access_key, aws_session_token or aws_access_key_id name, and anything
  shaped like an AWS access key id, becomes `[redacted]`.
"""

from __future__ import annotations

import logging
import re

QUIET_LIBRARIES = ("botocore", "boto3", "s3transfer", "urllib3")
REDACTED = "[redacted]"

_NAMED = re.compile(
    r"(?i)\b(authorization|x-amz-security-token|x-amz-credential|x-amz-signature|signature|credential"
    r"|aws_secret_access_key|aws_session_token|aws_access_key_id|secret_access_key|session_token)"
    r"(['\"]?\s*[:=]\s*b?['\"]?)([^'\"\s,&}]+)")
_KEY_ID = re.compile(r"\b(?:AKIA|ASIA|AROA|AIDA)[A-Z0-9]{12,}\b")


def redact(text: str) -> str:
    """`text` with every credential-shaped value replaced by REDACTED."""
    if not text:
        return text
    text = _NAMED.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return _KEY_ID.sub(REDACTED, text)


def patch_record(record: dict) -> None:
    """A loguru patcher: the record's message redacted before any sink formats it."""
    record["message"] = redact(record["message"])


def quiet_libraries() -> None:
    """The S3 client's loggers at INFO at least, whatever the configured level."""
    for name in QUIET_LIBRARIES:
        logger = logging.getLogger(name)
        logger.setLevel(max(logger.level, logging.INFO))
