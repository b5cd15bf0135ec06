"""Appending: the writer behind `CommitLog.append` and `append_batch` (`writer`), the disk guard
that refuses writers past `refuse_writes_ratio` and the async flusher (`guard`), and recovery of
the active segment after a crash (`recovery`). It may import `segments` and the base modules.
"""
