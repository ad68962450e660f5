"""Start-up and idle memory of the sidecar of this tree against another tree's (e.g. main), side by side.

    .venv/bin/python bench/start_ab.py --base /tmp/base [--starts 5]

Get the other tree without touching any checkout: `mkdir /tmp/base && git archive main | tar -x -C /tmp/base`.
One redis-server and one todo service; fresh sidecars from each tree, interleaved (the order flips each time), each
timed from exec to its "listening" line, its resident memory read one second later (before any call), then
stopped by PID. Prints the median start and the memory (VmRSS, and RssAnon: the private heap) per tree.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from write_path import rss_mb

from countersign.testing import processes

ROOT = Path(__file__).resolve().parent.parent


def one_start(root: Path, registry: Path, redis_url: str, keys: Path) -> tuple[float, dict[str, float]]:
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "countersign.sidecar.cli", "serve", "--registry", str(registry)]
    cmd += ["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--redis-url", redis_url]
    cmd += ["--keys-file", str(keys), "--log-level", "warning"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        if not proc.stdout.readline():
            raise RuntimeError(f"the sidecar of {root} did not start")
        took = time.perf_counter() - t0
        time.sleep(1.0)
        return took, rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, type=Path, help="the other source tree")
    parser.add_argument("--starts", type=int, default=5)
    args = parser.parse_args()
    work = processes.workdir("countersign-start-ab-")
    redis, todo, registry, keys = processes.start_backends(work)
    trees = {"base": args.base.resolve(), "this": ROOT}
    starts: dict[str, list[float]] = {name: [] for name in trees}
    memory: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    try:
        for n in range(args.starts):
            for name in ("base", "this") if n % 2 == 0 else ("this", "base"):
                took, rss = one_start(trees[name], registry, redis.info["url"], keys)
                starts[name].append(took)
                memory[name].append(rss)
    finally:
        todo.stop()
        redis.stop()
    print(f"{args.starts} starts per tree, interleaved; loadavg {[round(x, 2) for x in os.getloadavg()]}")
    for name in trees:
        print(
            f"  {name:<5} exec -> listening median {statistics.median(starts[name]):.3f} s "
            f"(min {min(starts[name]):.3f})  idle RSS {statistics.median(m['rss'] for m in memory[name]):.1f} MB, "
            f"private heap {statistics.median(m['anon'] for m in memory[name]):.1f} MB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
