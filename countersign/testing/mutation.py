"""Mutation testing of the core modules against their fast tests: ``make mutate`` (notes/mutate.md).

    python -m countersign.testing.mutation run   [--sample 60|all] [--jobs N]   make the mutants, test them, score
    python -m countersign.testing.mutation rerun [--sample 60|all] [--jobs N]   after adding tests: only what lived
    python -m countersign.testing.mutation score [--sample 60|all]              score the last run again

mutmut (its settings: ``[tool.mutmut]`` in pyproject.toml) copies ``countersign/`` and ``tests/`` into
``mutants/``, makes every mutant of the modules ``only_mutate`` lists (policy, cards, keyring, the store's Python
side), and runs against each one the tests of tests/unit and tests/store that reach the mutated function. The
store's tests start their own redis-server (a unix socket, no TCP port), so parallel workers never collide.

The sample is fixed: mutmut numbers the mutants of each function in source order, and the 60 % sample is those
whose number ends in 0 to 5 (``*__mutmut_*[0-5]``); ``all`` is every mutant. The score counts a mutant killed
when a test failed (or it ran out of time), over every mutant of the sample less the equivalent ones listed, with
the reason, in tests/mutation_equivalents.txt (no test can tell them from the original). Below 90 % it fails.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from countersign.testing.processes import ROOT

MUTANTS = ROOT / "mutants"
EQUIVALENTS = ROOT / "tests" / "mutation_equivalents.txt"
SAMPLES = {"60": ["*__mutmut_*[0-5]"], "all": ["*"]}
TARGET = 90.0
# mutmut's exit codes (mutmut/stats.py): a failing test kills; running out of CPU time is a kill too (the
# mutant made the tests loop), and so is the SIGKILL that follows it
KILLED = {1: "killed", 3: "killed", 36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout"}
KILLED |= {-9: "timeout", -11: "crashed"}
STATUS = {0: "survived", 5: "no tests", 33: "no tests", None: "not run"}


def equivalents(path: Path = EQUIVALENTS) -> dict[str, str]:
    """Mutant name -> why no test can tell it from the original (one per line: ``name  reason``; # comments)."""
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition(" ")
        out[name] = reason.strip()
    return out


def results(sample: str) -> dict[str, dict[str, int | None]]:
    """Module path -> {mutant name: mutmut's exit code}, for the mutants of the sample."""
    patterns = SAMPLES[sample]
    out: dict[str, dict[str, int | None]] = {}
    for meta in sorted(MUTANTS.rglob("*.py.meta")):
        module = str(meta.relative_to(MUTANTS))[: -len(".meta")]
        codes = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
        chosen = {k: v for k, v in codes.items() if any(fnmatch.fnmatch(k, p) for p in patterns)}
        if chosen:
            out[module] = chosen
    return out


def status(code: int | None) -> str:
    return KILLED.get(code, STATUS.get(code, "suspicious")) if code is not None else "not run"  # type: ignore[arg-type]


def score(sample: str) -> float:
    """Print the score per module and in all; return the overall percentage."""
    listed = equivalents()
    found = results(sample)
    total = Counter[str]()
    print(f"{'module':40} {'mutants':>8} {'equiv.':>7} {'killed':>7} {'survived':>9} {'no test':>8} {'score':>7}")
    for module, codes in found.items():
        count = Counter[str]()
        for name, code in codes.items():
            if name in listed:
                count["equivalent"] += 1
            elif code in KILLED:
                count["killed"] += 1
            else:
                count[status(code)] += 1
        total.update(count)
        print(_row(module, len(codes), count))
    print(_row("all", sum(len(c) for c in found.values()), total))
    every = {name for codes in results("all").values() for name in codes}
    stale = sorted(set(listed) - every)
    if stale:
        print(f"\n{len(stale)} listed equivalent(s) are no mutant of this run (the code moved: review the list):")
        print("\n".join(f"  {n}" for n in stale))
    left = [(m, n, status(c)) for m, codes in found.items() for n, c in codes.items() if n not in listed]
    alive = [f"  {n}  ({s})" for _, n, s in left if s not in ("killed", "timeout", "crashed")]
    if alive:
        print(f"\nnot killed ({len(alive)}; `mutmut show NAME` shows one):")
        print("\n".join(alive))
    considered = sum(total.values()) - total["equivalent"]
    return 100.0 * total["killed"] / considered if considered else 0.0


def _row(module: str, mutants: int, count: Counter[str]) -> str:
    considered = mutants - count["equivalent"]
    pct = 100.0 * count["killed"] / considered if considered else 0.0
    return (
        f"{module:40} {mutants:>8} {count['equivalent']:>7} {count['killed']:>7} {count['survived']:>9} "
        f"{count['no tests']:>8} {pct:>6.1f}%"
    )


def _leftovers(marker: str) -> Iterator[int]:
    """Processes a killed mutant's tests left running (a redis-server whose test timed out): those whose command
    line names our private temporary folder, and only those."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            yield int(entry.name)


def run(sample: str, jobs: int) -> int:
    """A fresh run: mutants/ made anew, the sample tested, the score printed (0 when it reaches the target)."""
    shutil.rmtree(MUTANTS, ignore_errors=True)
    MUTANTS.mkdir()
    venv = ROOT / ".venv"
    if venv.exists():  # tests/unit runs the CLI as ROOT/.venv/bin/countersign; ROOT is mutants/ there
        (MUTANTS / ".venv").symlink_to(venv)
    return _mutmut(SAMPLES[sample], jobs, sample)


def _mutmut(names: list[str], jobs: int, sample: str) -> int:
    """mutmut run on the mutants ``names`` (globs), its output in mutants/run.log; the score of the sample."""
    mutmut = Path(sys.executable).with_name("mutmut")
    if not mutmut.exists():
        print("mutmut is not installed: `make mutate` installs it (pip install -e '.[dev]')", file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="cs-mutate-")  # short (unix socket paths), and ours alone
    env = {**os.environ, "TMPDIR": tmp}
    log = MUTANTS / "run.log"
    print(f"mutmut: sample {sample}, {len(names)} pattern(s), {jobs} workers; progress in {log}", flush=True)
    try:
        with log.open("ab") as out:
            done = subprocess.run(
                [str(mutmut), "run", "--max-children", str(jobs), *names],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                check=False,
            )
    finally:
        for pid in _leftovers(tmp):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)
    if done.returncode != 0:
        print(f"mutmut exited {done.returncode}; the end of {log}:", file=sys.stderr)
        tail = log.read_bytes()[-3000:].decode(errors="replace").replace("\r", "\n").splitlines()
        print("\n".join(line for line in tail if line.strip())[-2000:], file=sys.stderr)
        return 1
    return _verdict(score(sample))


def rerun(sample: str, jobs: int) -> int:
    """After adding tests: the tests copied over mutants/ again, and only the last run's mutants that were neither
    killed nor listed equivalent tested again (mutmut collects what the new tests reach first); the score printed.
    Tests only: a changed module under countersign/ is not mutated again (mutmut keeps its copy), so after a
    fix, ``run``. Not the number to quote either: that is a fresh ``run``'s."""
    listed = equivalents()
    names = [n for codes in results(sample).values() for n, c in codes.items() if c not in KILLED and n not in listed]
    if not names:
        return _verdict(score(sample))
    shutil.copytree(ROOT / "tests", MUTANTS / "tests", dirs_exist_ok=True)
    return _mutmut(names, jobs, sample)


def _verdict(pct: float) -> int:
    print(f"\nmutation score {pct:.1f}% of the non-equivalent mutants killed (target {TARGET:g}%)")
    return 0 if pct >= TARGET else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m countersign.testing.mutation", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("run", "rerun", "score"))
    parser.add_argument("--sample", choices=tuple(SAMPLES), default="60")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args(argv)
    if args.command == "score":
        return _verdict(score(args.sample))
    if args.command == "rerun":
        return rerun(args.sample, args.jobs)
    return run(args.sample, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
