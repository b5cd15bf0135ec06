"""Probe: a manifest whose offsets or sizes disagree with its objects (`bytes: 0`, another size,
an end moved down to leave a hole or up into the next entry, entries out of order) is an
ArchiveCorruptError naming the object and the field, never a record skipped or one served at a
wrong offset."""

from __future__ import annotations

import pytest

from commitlog import ArchiveCorruptError, OffsetRemovedError
from commitlog.archive.tiered import ArchivedLog, archive_reader

from archive_reads_helpers import archived_log, edit_manifest, tier  # noqa: F401  (a fixture)


def _reads(tier):
    """Every way to read the archived log; each is to raise."""
    log = ArchivedLog(archive_reader(tier, None, "ours"))
    return log, (lambda: list(log.scan()), lambda: log.read(log.archive.manifest().segments[1].base_offset))


def _seg(body, i: int, **changes) -> None:
    body["segments"][i].update(changes)


@pytest.mark.parametrize("change, match", [
    (lambda s: {"bytes": 0}, r"segments\[1\]\.bytes: 0 for the offsets"),
    (lambda s: {"bytes": s["bytes"] - 100}, r"the manifest's `bytes` says"),
    (lambda s: {"bytes": s["bytes"] + 100}, r"the manifest's `bytes` says"),
    (lambda s: {"end_offset": s["end_offset"] - 3}, r"records offsets .*`end_offset` says"),
], ids=["bytes-0", "bytes-smaller", "bytes-larger", "end-lowered-leaving-a-hole"])
def test_a_manifest_entry_disagreeing_with_its_objects_is_refused_naming_the_field(tmp_path, tier, change, match):
    archived_log(tmp_path, tier, "ours")
    edit_manifest(tier, "ours", lambda body: _seg(body, 1, **change(body["segments"][1])))
    log, reads = _reads(tier)
    for read in reads:
        with pytest.raises(ArchiveCorruptError, match=match):
            read()


def test_entries_that_overlap_or_are_out_of_order_are_refused(tmp_path, tier):
    archived_log(tmp_path, tier, "ours")

    def overlap(body):
        body["segments"][0]["end_offset"] = body["segments"][1]["base_offset"] + 1

    edit_manifest(tier, "ours", overlap)
    with pytest.raises(ArchiveCorruptError, match=r"manifest.json: not a manifest: segments\[1\]\.base_offset: .* overlap"):
        _reads(tier)[1][0]()
    edit_manifest(tier, "ours", lambda body: body["segments"].reverse())
    with pytest.raises(ArchiveCorruptError, match=r"segments\[1\]\.base_offset: .*out of order"):
        _reads(tier)[1][0]()


def test_a_hole_a_compaction_could_have_left_reads_as_removed_not_as_corrupt(tmp_path, tier):
    """A segment dropped by a compaction before it was archived leaves a hole the manifest may
    hold: the entries around it still read, and the hole's offsets are named removed."""
    written = archived_log(tmp_path, tier, "ours")

    dropped = {}

    def drop_middle(body):
        dropped.update(body["segments"].pop(1))

    edit_manifest(tier, "ours", drop_middle)
    log, _ = _reads(tier)
    hole = range(dropped["base_offset"], dropped["end_offset"])
    assert [tuple(r) for r in log.scan()] == [r for r in written[:log.end_offset] if r[0] not in hole]
    with pytest.raises(OffsetRemovedError, match=f"offset {hole[0]} .*removed by a compaction"):
        log.read(hole[0])
