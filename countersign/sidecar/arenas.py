"""glibc's malloc arena cap (--malloc-arena-max), applied before the sidecar starts its first thread.

glibc gives each thread that allocates while the others hold the lock an arena of its own (a 64 MiB reserve
whose touched pages stay resident), up to 8 per core of the *node*; gRPC's event-engine threads, its poller and
the probes thread take one each (8 on 2 cores, notes/lean-mem3.md). ``mallopt(M_ARENA_MAX, n)`` caps them the way
``MALLOC_ARENA_MAX`` does, without the operator setting glibc's environment. glibc fixes the limit once it has made
its ninth arena, so this runs in ``cli.main`` before gRPC and the probes server start threads. Off glibc (musl,
macOS) it does nothing and never loads ctypes.
"""

from __future__ import annotations

import os

M_ARENA_MAX = -8  # <malloc.h>


def glibc() -> str:
    """The C library's name and version when it is glibc ("glibc 2.36"), else ""."""
    try:
        found = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):  # no such name (macOS) or the C library refuses it (musl)
        return ""
    return found if found and found.startswith("glibc") else ""


def cap(n: int, libc: str | None = None) -> bool:
    """Cap glibc's malloc arenas at n; True if glibc took it. 0 (the default) leaves glibc's own limit, which
    MALLOC_ARENA_MAX still sets; off glibc nothing happens."""
    if n <= 0 or not (glibc() if libc is None else libc).startswith("glibc"):
        return False
    import ctypes  # here: ~0.3 MB resident, paid only by a sidecar that asks for the cap

    return bool(ctypes.CDLL(None).mallopt(M_ARENA_MAX, n))
