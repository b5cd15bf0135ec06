"""`commitlog`'s public face: what `dir()` shows is the curated `__all__` (no record attribute bits,
roll outcomes, removal helpers or submodules), every listed name is there, and the names the
layers above import without being listed still import."""

from __future__ import annotations

import commitlog


def test_dir_shows_the_curated_public_face_and_every_listed_name_exists():
    shown = {name for name in dir(commitlog) if not name.startswith("__")}
    assert shown == set(commitlog.__all__)
    for name in commitlog.__all__:
        assert getattr(commitlog, name) is not None, name
    for internal in ("ATTR_DEAD", "ATTR_CONTROL", "ROLLED", "NOT_DUE", "WRITER_OPEN", "shrink_doomed",
                     "unlink_doomed", "log", "layout", "segments", "append", "cleanup", "errors", "options"):
        assert internal not in shown, internal
    assert {"CommitLog", "LogOptions", "Record", "SegmentInfo", "CommitLogError", "NotALogError"} <= shown


def test_every_error_of_the_tree_is_in_the_public_face():
    errors = {name for name, value in vars(commitlog.errors).items()
              if isinstance(value, type) and issubclass(value, commitlog.CommitLogError)}
    assert errors - {"PassRunningError"} <= set(commitlog.__all__), errors - set(commitlog.__all__)


def test_the_names_for_the_layers_above_still_import():
    from commitlog import ATTR_DEAD, ROLLED, shrink_doomed   # noqa: F401 (retention imports them)
    assert ATTR_DEAD and ROLLED
