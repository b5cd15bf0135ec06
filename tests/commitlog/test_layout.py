"""The log directory's layout (commitlog/layout.py): names, `is_log_directory`, and the public
segment listing retention takes its segments from, statting only the head it asks for."""

from __future__ import annotations

import os

import pytest

from commitlog import CommitLog, is_log_directory, list_segments, parse_segment_name, segment_name
from commitlog.layout import index_path

SEG = 4096


def _log_with_segments(path: str, n: int) -> list[int]:
    with CommitLog.open(path, segment_size=SEG, flush="none") as log:
        while len(log.segments()) < n:
            log.append(b"v" * 1000)
        return [s.base_offset for s in log.segments()]


def test_names_round_trip_and_other_names_are_not_segments():
    assert segment_name(42) == "00000000000000000042.log"
    assert parse_segment_name(segment_name(42)) == 42
    for name in ("0000000000000000004.log", "0000000000000000004x.log", "meta.json",
                 "00000000000000000042.index", "００００００００００００００００００４２.log"):
        assert parse_segment_name(name) is None
    assert index_path("/l/00000000000000000042.log") == "/l/00000000000000000042.index"


def test_is_log_directory(tmp_log_dir, tmp_path):
    assert not is_log_directory(tmp_log_dir)
    _log_with_segments(tmp_log_dir, 1)
    assert is_log_directory(tmp_log_dir)
    assert not is_log_directory(tmp_path)


def test_listing_reports_segments_leftovers_and_foreign_entries(tmp_log_dir):
    bases = _log_with_segments(tmp_log_dir, 4)
    d = tmp_log_dir
    open(os.path.join(d, segment_name(1_000_000) + ".deleted"), "w").close()
    open(os.path.join(d, "00000000000000999999.index.deleted"), "w").close()
    open(os.path.join(d, "00000000000000000003.index.tmp"), "w").close()
    os.mkdir(os.path.join(d, segment_name(5_000_000)))               # a directory posing as one
    os.symlink("/etc/hostname", os.path.join(d, segment_name(6_000_000)))
    open(os.path.join(d, "notes.txt"), "w").close()                    # the user's: not listed
    listing = list_segments(d)
    assert listing.bases == tuple(bases)
    assert [s.path for s in listing.segments] == [os.path.join(d, segment_name(b)) for b in bases]
    assert all(s.size == SEG and s.mtime for s in listing.segments)
    assert sorted(os.path.basename(p) for p in listing.deleted) == [
        "00000000000000999999.index.deleted", segment_name(1_000_000) + ".deleted"]
    assert [os.path.basename(p) for p in listing.temporaries] == ["00000000000000000003.index.tmp"]
    assert sorted(os.path.basename(p) for p in listing.foreign) == [segment_name(5_000_000),
                                                                    segment_name(6_000_000)]


def test_listing_stats_only_the_head_asked_for_and_the_last(tmp_log_dir):
    bases = _log_with_segments(tmp_log_dir, 6)
    listing = list_segments(tmp_log_dir, stat_head=2, stat_last=True)
    assert listing.bases == tuple(bases)
    sizes = [s.size for s in listing.segments]
    assert sizes[:2] == [SEG, SEG] and sizes[-1] == SEG
    assert sizes[2:-1] == [None] * (len(bases) - 3)  # never statted
    assert [(s.base_offset, s.size) for s in listing.statted] == [
        (bases[0], SEG), (bases[1], SEG), (bases[-1], SEG)]
    assert [s.size for s in list_segments(tmp_log_dir, stat_head=0).segments] == [None] * len(bases)


def test_live_leaves_out_segments_below_the_start_offset(tmp_log_dir):
    bases = _log_with_segments(tmp_log_dir, 4)
    listing = list_segments(tmp_log_dir, stat_head=0)
    assert [s.base_offset for s in listing.live(0)] == bases
    assert [s.base_offset for s in listing.live(bases[2])] == bases[2:]
    assert [s.base_offset for s in listing.live(bases[-1] + 100)] == bases[-1:]


def test_listing_of_a_missing_directory_raises():
    with pytest.raises(FileNotFoundError):
        list_segments("/nonexistent/log")


def test_listing_with_the_start_offset_sets_logically_removed_segments_apart(tmp_log_dir):
    """What retention's pass needs: the live segments, the head it may delete statted, and
    whether a removal a crash interrupted is left to finish."""
    bases = _log_with_segments(tmp_log_dir, 6)
    with CommitLog.open(tmp_log_dir, readonly=True) as log:
        log._state.advance_start_offset(bases[2])  # a remover that crashed before its rename
    listing = list_segments(tmp_log_dir, stat_head=2, stat_last=True, start_offset=bases[2])
    assert [s.base_offset for s in listing.below_start] == bases[:2]
    assert all(s.size is None for s in listing.below_start)
    assert listing.bases == tuple(bases[2:])
    assert [s.size for s in listing.segments] == [SEG, SEG, None, SEG]
    assert listing.interrupted
    with CommitLog.open(tmp_log_dir, readonly=True) as log:
        log.finish_removals()
    listing = list_segments(tmp_log_dir, stat_head=2, start_offset=bases[2])
    assert listing.below_start == () and not listing.interrupted
    assert listing.bases == tuple(bases[2:])


def test_every_file_name_written_into_a_log_directory_is_spelled_only_in_the_layout_module():
    import ast
    from pathlib import Path

    import commitlog.layout as layout
    names = {value for key, value in vars(layout).items()
             if key.isupper() and isinstance(value, str) and len(value) > 3 and "." in value}
    assert {"meta.json", "spark.db", ".spark-append.lock", ".retention-hung.json",
            ".retention.lock"} <= names
    root = Path(__file__).resolve().parents[2]
    spelled = []
    for package in ("commitlog", "policies", "retention"):
        for path in sorted((root / package).rglob("*.py")):
            if path == root / "commitlog" / "layout.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and node.value in names:
                    spelled.append(f"{path.relative_to(root)}:{node.lineno}: {node.value!r}")
    assert spelled == []
