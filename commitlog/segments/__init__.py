"""Segment files and reading them: a sealed segment's info (`segment`) and sparse index (`index`,
`sealed`), the active segment being appended to (`active`) and the segments prepared ahead of it
(`prealloc`, `reserve`), the log's list of segments with its caches and reader holds
(`segment_list`), per-segment summaries (`seginfo`), where an unflushed log really ends
(`last_segment_end`) and record lookup and scans (`reading`). It may import the package's base modules
(`errors`, `layout`, `record`, `locks`, `marks`, `state`); never `append` or `cleanup`.
"""
