"""Giving space back: head removal and the start offset (`removal`), the compaction swap and its
crash-safe commit point (`swap`), rewriting segments without their dead records (`rewrite`), the
`CommitLog` methods that mark records dead and compact (`deadrecords`) and the tombstones'
first-seen times (`tombstones`). It may import `segments` and the base modules; never `append`.
"""
