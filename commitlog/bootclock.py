"""This host's boot clock as the kernel shows it: the boot id (new at every boot) and the seconds
since boot (`/proc/uptime`: CLOCK_BOOTTIME read as a file, which no settimeofday and no LD_PRELOAD
clock faker moves; it counts a suspend). Two readings are comparable on one boot only. Each reader
returns None where its file cannot be read. Thread-safe."""

from __future__ import annotations

__all__ = ["boot_id", "uptime"]

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
UPTIME_PATH = "/proc/uptime"


def boot_id() -> str | None:
    """The kernel's boot id, or None where it cannot be read."""
    try:
        with open(BOOT_ID_PATH, "rb") as f:
            text = f.read(64).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def uptime() -> float | None:
    """Seconds since boot, or None where `/proc/uptime` cannot be read."""
    try:
        with open(UPTIME_PATH, "rb") as f:
            return float(f.read(128).split()[0])
    except (OSError, ValueError, IndexError):
        return None
