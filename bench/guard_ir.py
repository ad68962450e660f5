"""The reply guard's cost per reply in instructions (valgrind's callgrind), here and in another tree: the noise-free
twin of ``bench/guard.py --against`` (on a shared machine the thread CPU clock of the same call moves by 2-3x).

    .venv/bin/python bench/guard_ir.py --against TREE [--calls 20] [--out bench/results/guard-ir-….json]

Each tree runs in a child process under callgrind with instrumentation off (start-up, lexicon load and a warm-up
are not counted), with that tree first on the import path; both read the replies of this file's
``bench/guard.py`` (``cpu_cases``), so both trees read the same text. Per reply, the child switches counting on
(``callgrind_control``), zeroes the counters, runs ``ReplyGuard.check`` ``--calls`` times, dumps them; an empty
window's count (the control calls themselves) is subtracted. PYTHONHASHSEED=0. Counted: every instruction of the
process (the interpreter, re's C engine, the allocator).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def child(out: str, calls: int) -> None:
    """Under callgrind: count each case's calls in a window of its own; print {case: instructions per call}."""
    import guard as guard_bench  # bench/guard.py (this script's directory is first on the path)

    from countersign.guard import ReplyGuard

    guard = ReplyGuard.load()
    cases = [(name, reply, ev) for name, reply, ev, _n in guard_bench.cpu_cases(1)]
    for _name, reply, ev in cases:
        for _ in range(20):
            guard.check(reply, "zh-CN", ev)
    pid = str(os.getpid())

    def control(*args: str) -> None:
        subprocess.run(["callgrind_control", *args, pid], check=True, capture_output=True, timeout=120)

    def window(reply: str, ev: Any, n: int) -> int:
        before = set(glob.glob(f"{out}.{pid}.*"))
        control("--zero")
        for _ in range(n):
            guard.check(reply, "zh-CN", ev)
        control("--dump")
        while True:
            for path in sorted(set(glob.glob(f"{out}.{pid}.*")) - before):
                text = Path(path).read_text(errors="replace")
                if "\ntotals:" in text:  # written last: the dump is complete
                    Path(path).unlink()
                    return int(text.split("\ntotals:")[1].split()[0])
            time.sleep(0.05)

    control("--instr=on")
    empty = min(window("", [], 0) for _ in range(3))
    per = {name: (window(reply, ev, calls) - empty) / calls for name, reply, ev in cases}
    print(json.dumps(per))


def counted(tree: Path, calls: int, work: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(tree)}
    out = work / f"cg-{tree.name}"
    done = subprocess.run(
        [
            *("valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-line=no", f"--callgrind-out-file={out}.%p"),
            *(sys.executable, str(Path(__file__).resolve()), "--child", str(out), "--calls", str(calls)),
        ],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, help="the tree before (e.g. a git archive of main)")
    ap.add_argument("--calls", type=int, default=20, help="calls per reply in each window")
    ap.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.calls)
        return
    if args.against is None:
        ap.error("--against TREE is required")
    with tempfile.TemporaryDirectory(prefix="guard-ir-") as tmp:
        got = {
            label: counted(tree.resolve(), args.calls, Path(tmp))
            for label, tree in (("before", args.against), ("after", ROOT))
        }
    print(f"instructions per reply (callgrind, {args.calls} calls per reply; before {args.against}, after {ROOT})")
    print(f"  {'reply':<32} {'before':>12} {'after':>12} {'change':>8}")
    for name, after in got["after"].items():
        before = got["before"][name]
        print(f"  {name:<32} {before:12,.0f} {after:12,.0f} {after / before - 1:+8.1%}")
    if args.out:
        args.out.write_text(json.dumps({"calls": args.calls, "against": str(args.against), **got}, indent=1) + "\n")


if __name__ == "__main__":
    main()
