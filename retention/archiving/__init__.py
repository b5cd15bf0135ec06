"""Uploading sealed segments to a log's archive tier (docs/archive.md): `Archiver`, the
scheduler's per-log upload jobs, lag figures and health problem; `LogUploader`, one log's."""

from .archiver import ARCHIVE_PREFIX, Archiver
from .uploader import LogUploader, UploadState

__all__ = ["ARCHIVE_PREFIX", "Archiver", "LogUploader", "UploadState"]
