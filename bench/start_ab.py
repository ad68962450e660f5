"""Start-up and idle memory of the sidecar of this tree against another tree's (e.g. main), side by side.

    .venv/bin/python bench/start_ab.py --base /tmp/base [--starts 5]

Get the other tree without touching any checkout: `mkdir /tmp/base && git archive main | tar -x -C /tmp/base`.
Both trees get bytecode first, as the image has it (write_path.compile_like_the_image). One redis-server and one
todo service; fresh sidecars from each tree, interleaved (the order flips each time), each timed from exec to its
"listening" line (wall, and the CPU it used until then: steadier on a shared machine), its resident memory read one
second later (before any call), then stopped by PID. Prints the medians per tree (VmRSS, and RssAnon: the private
heap). ``--env K=V`` sets a variable for this tree's sidecars only (e.g. MALLOC_ARENA_MAX=2 against the same tree).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from write_path import compile_like_the_image, cpu_seconds, rss_mb

from countersign.testing import processes

ROOT = Path(__file__).resolve().parent.parent


def one_start(
    root: Path, registry: Path, redis_url: str, keys: Path, extra: dict[str, str]
) -> tuple[float, float, dict[str, float]]:
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONUNBUFFERED="1", **extra)
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
        cpu = cpu_seconds({"p": proc.pid})["p"]
        time.sleep(1.0)
        return took, cpu, rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, type=Path, help="the other source tree")
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument(
        "--no-bytecode", action="store_true", help="compile nothing: each tree as it is (what the bench timed before)"
    )
    parser.add_argument(
        "--registry", type=Path, help="another registry (its http://127.0.0.1:8081 becomes the todo service's URL)"
    )
    parser.add_argument("--env", action="append", default=[], metavar="K=V", help="for this tree's sidecars only")
    args = parser.parse_args()
    extra = {"base": {}, "this": dict(item.split("=", 1) for item in args.env)}
    work = processes.workdir("countersign-start-ab-")
    redis, todo, registry, keys = processes.start_backends(work)
    if args.registry is not None:
        registry = processes.write_registry(work, todo.info["url"], source=args.registry)
    trees = {"base": args.base.resolve(), "this": ROOT}
    for root in trees.values():
        if not args.no_bytecode:
            compile_like_the_image(root)
    starts: dict[str, list[float]] = {name: [] for name in trees}
    cpus: dict[str, list[float]] = {name: [] for name in trees}
    memory: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    try:
        for n in range(args.starts):
            for name in ("base", "this") if n % 2 == 0 else ("this", "base"):
                took, cpu, rss = one_start(trees[name], registry, redis.info["url"], keys, extra[name])
                starts[name].append(took)
                cpus[name].append(cpu)
                memory[name].append(rss)
    finally:
        todo.stop()
        redis.stop()
    how = "as they are" if args.no_bytecode else "with bytecode"
    env = f"this tree with {extra['this']}; " if extra["this"] else ""
    load = [round(x, 2) for x in os.getloadavg()]
    print(f"{args.starts} starts per tree ({how}), interleaved; {env}loadavg {load}")
    for name in trees:
        print(
            f"  {name:<5} exec -> listening median {statistics.median(starts[name]):.3f} s "
            f"(min {min(starts[name]):.3f}), CPU {statistics.median(cpus[name]):.3f} s (min {min(cpus[name]):.3f})  "
            f"idle RSS {statistics.median(m['rss'] for m in memory[name]):.1f} MB, "
            f"private heap {statistics.median(m['anon'] for m in memory[name]):.1f} MB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
