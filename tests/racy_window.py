"""The racy-mtime window of the in-process tests, and the sleep that waits it out.

The product trusts a file's mtime only once it is `RACY_NS` (2 s) old
(`retention.deletion.log_keys`, git's racily clean rule): 2 s covers filesystems that stamp times
to the second or two (NFS servers, FAT). The suite's files live on tmpfs and ext4, which stamp them
to the kernel's tick (a few ms), so the in-process tests run the same rule with a window of
`TEST_RACY_NS` (tests/conftest.py sets it for every test). A sidecar started as a process keeps the
product's 2 s. A test that needs a change to stay inside the window while it runs passes (one that
does not sleep it out) asks for `product_racy_window`. See docs/development.md."""

from __future__ import annotations

from retention.deletion import log_keys

PRODUCT_RACY_NS = log_keys.RACY_NS
TEST_RACY_NS = 500_000_000
RACY = TEST_RACY_NS / 1e9 + 0.2          # seconds: a sleep past the window, in-process
