"""What the JVM reader is told of a log's archive tier, and which reader reads a log's archive.

The JVM reads a `file://` tier itself: an archived segment's data object (`<dir>/<log>/<20-digit
base>.log`) holds the segment file's bytes up to its end marker, so the Java segment walk reads it
as it reads a segment (a cluster log's staged object too: its records carry no offsets, the
entry's base places them). Each partition of a plan carries the manifest entries its runs touch, read
and validated here (commitlog.archive.manifest): a task checks a data object whole against its
entry (size, SHA-256) before it serves a record of it, as commitlog.archive.object_check does, and
reads the tier's manifest again only when an object is gone or differs (retention or a compaction
replaced it since). An `s3://` tier has no client in the JVM (PySpark ships none): reads across it
are the Python data source's (`jvm_reads`), which reads it with boto3.
"""

from __future__ import annotations

from storesettings.archive_url import parse_archive_url

from commitlog.archive import LogArchive, Manifest, open_tier

from ..reading.reader import LogPartition
from ..source_options import Options


def jvm_reads(options: Options) -> bool:
    """Whether the JVM reader reads with these options: without an archive, or across a
    directory tier (`file://`); an S3 tier is read by the Python data source."""
    return options.archive is None or parse_archive_url(options.archive).scheme == "file"


def manifest_of(options: Options) -> tuple[LogArchive, Manifest] | None:
    """The log's part of its `file://` tier and the manifest on it now; None without `archive`."""
    if options.archive is None:
        return None
    if not jvm_reads(options):
        raise ValueError(f"the JVM reader reads no {options.archive} tier: the Python data source does")
    archive = LogArchive(open_tier(options.archive), options.path)
    return archive, archive.manifest()


def archive_json(archive: LogArchive) -> dict:
    """Where the JVM finds the log's objects: `<root>/<name>/`; `url` names the tier in errors."""
    return {"url": archive.tier.url, "root": archive.tier.root, "name": archive.name}


def listing_json(manifest: Manifest, partition: LogPartition) -> dict:
    """The archive as `partition` may read it: the manifest's start and end now, and the entries
    holding any offset of its runs, `[base, end, bytes, sha256, key]` each (`key`: the data
    object below the log's folder, commitlog.archive.manifest)."""
    first = manifest.segments[0].base_offset if manifest.segments else manifest.start_offset
    touched = [[s.base_offset, s.end_offset, s.bytes, s.sha256, s.data_file] for s in manifest.segments
               if any(s.base_offset < end and start < s.end_offset for start, end in partition.runs)]
    return {"start": first, "end": manifest.end_offset, "segments": touched}
