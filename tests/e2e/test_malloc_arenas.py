"""--malloc-arena-max: glibc's arena cap is applied before the sidecar's threads start, and is a no-op off glibc."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from countersign.sidecar import arenas
from countersign.testing import processes

HEAP = 64 << 20  # a glibc thread arena's heap: a 64 MiB-aligned reserve, its touched part rw-p, the rest ---p


def thread_arenas(pid: int) -> int:
    """glibc's non-main arenas of a process, read from its address space."""
    rows = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        parts = line.split()
        start, end = (int(x, 16) for x in parts[0].split("-"))
        rows.append((start, end, parts[1], len(parts) > 5))
    found = 0
    for i, (start, end, perm, named) in enumerate(rows):
        if named or perm != "rw-p" or start % HEAP:
            continue
        size = end - start
        if i + 1 < len(rows) and rows[i + 1][2] == "---p" and rows[i + 1][0] == end and not rows[i + 1][3]:
            size += rows[i + 1][1] - rows[i + 1][0]
        found += size == HEAP
    return found


@pytest.mark.skipif(not arenas.glibc(), reason="glibc's arenas")
def test_the_cap_keeps_grpcs_threads_in_the_arenas_it_allows(tmp_path: Path) -> None:
    redis, todo, registry, keys = processes.start_backends(tmp_path)
    try:
        counts = {}
        for flags in ([], ["--malloc-arena-max", "1"], ["--malloc-arena-max", "2"]):
            sidecar = processes.start_sidecar(tmp_path, registry, redis_url=redis.info["url"], keys=keys, flags=flags)
            try:
                time.sleep(0.5)  # gRPC's event-engine threads, its poller and the probes thread have allocated
                counts[" ".join(flags)] = thread_arenas(sidecar.pid)
            finally:
                sidecar.stop()
    finally:
        todo.stop()
        redis.stop()
    # glibc's own limit (16 on 2 cores) lets each of the ~8 threads take one; the cap counts the main arena
    assert counts[""] >= 2, counts
    assert counts["--malloc-arena-max 1"] == 0, counts
    assert counts["--malloc-arena-max 2"] <= 1, counts


def test_off_glibc_or_at_zero_nothing_is_set_and_ctypes_is_not_loaded() -> None:
    probe = (
        "import sys; from countersign.sidecar import arenas; "
        "print(arenas.cap(2, libc=''), arenas.cap(2, libc='musl'), arenas.cap(0), 'ctypes' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["False", "False", "False", "False"], out.stderr


def test_a_negative_cap_is_refused_at_start() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "countersign.sidecar.cli", "serve", "--registry", "r.yaml", "--malloc-arena-max", "-1"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=processes.ROOT,
    )
    assert out.returncode == 2
    assert "--malloc-arena-max must be 0 or more" in out.stderr
