"""Instructions of one statement: callgrind of a fresh interpreter running SETUP and then STMT N times, minus the
same with ``pass``, divided by N (the statement counter of notes/lean-cpu7.md and notes/lean-cpu8.md).

    .venv/bin/python bench/statement_ir.py [--repo TREE] [--n 200] SETUP.py 'stmt' ['stmt2' ...]

SETUP is a Python file run first (imports, the objects the statements use); it runs with TREE (default: this
repository) as its working directory and on PYTHONPATH, so its paths are relative to TREE and ``--repo`` counts the
same statement in another tree (a worktree of main, for a side-by-side figure). PYTHONHASHSEED=0. Examples:
notes/lean-cpu7-count/, notes/lean-cpu8-count/.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def count(setup: str, stmt: str, n: int, repo: Path) -> int:
    """The callgrind total of SETUP then ``stmt`` n times, in a fresh interpreter."""
    code = f"{setup}\nfor _i in range({n}):\n    {stmt}\n"
    with tempfile.TemporaryDirectory() as d:
        script, out = Path(d) / "s.py", Path(d) / "cg.out"
        script.write_text(code, encoding="utf-8")
        env = dict(os.environ, PYTHONPATH=str(repo), PYTHONHASHSEED="0")
        cmd = ["valgrind", "--tool=callgrind", "--dump-line=no", f"--callgrind-out-file={out}", sys.executable]
        r = subprocess.run([*cmd, str(script)], cwd=repo, env=env, capture_output=True, text=True, check=False)
        if r.returncode:
            sys.exit(r.stderr[-3000:])
        total = re.search(r"^totals:\s+(\d+)", out.read_text(), re.M)
        if total is None:
            sys.exit(f"no totals in {out}")
        return int(total.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, default=ROOT)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("setup", type=Path)
    ap.add_argument("stmts", nargs="+")
    a = ap.parse_args()
    setup = a.setup.read_text(encoding="utf-8")
    base = count(setup, "pass", a.n, a.repo.resolve())
    for stmt in a.stmts:
        print(f"{(count(setup, stmt, a.n, a.repo.resolve()) - base) / a.n:>12,.0f}  {stmt}")


if __name__ == "__main__":
    main()
