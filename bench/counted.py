"""Instructions, not seconds: a server process run under valgrind's callgrind, counted over a window we choose.

On a shared, noisy machine two identical sidecars measured by wall clock or CPU time differ by 25-50 %; the
number of instructions a process executes for the same calls does not depend on what else the machine does.
``perf stat -e instructions`` is not available here (no PMU in the VM); callgrind counts guest instructions
(``Ir``) exactly, every thread of the process included (gRPC's own threads, the span exporter's).

How a window is counted:

- the process starts with ``--instr-atstart=no``: start-up runs uninstrumented (about 5x slower than native
  instead of 50-100x) and counts nothing;
- ``callgrind_control -i on`` switches instrumentation on (after the caller's warm-up), ``--zero`` empties the
  counters just before the measured calls, ``--dump`` writes them just after (once background work triggered
  by those calls, such as the audit writer's batch or a span export, has had time to finish);
- the dump's ``totals:`` line is the window's instruction count.

Processes are started and stopped by PID (``processes.Proc``); the counters are read by PID.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from countersign.testing import processes

START_TIMEOUT = 300.0  # an uninstrumented start under valgrind takes ~5-10 s here; a loaded machine, more


def valgrind_prefix(out: Path) -> list[str]:
    """The command prefix that runs a process under callgrind, uninstrumented until told otherwise."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise RuntimeError("valgrind is not installed (Debian/Ubuntu: apt-get install valgrind)")
    return [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",  # start-up uninstrumented: fast, and not counted
        "--dump-line=no",  # only the totals are read: keep the dumps small
        f"--callgrind-out-file={out}.%p",
    ]


def start(cmd: list[str], work: Path, name: str) -> tuple[processes.Proc, Path]:
    """Start cmd under callgrind; wait for its "listening" line. Returns the process and its dump prefix."""
    out = work / f"callgrind-{name}-{time.monotonic_ns()}"
    return processes._start(valgrind_prefix(out) + cmd, work, name, timeout=START_TIMEOUT), out


def _control(pid: int, *args: str) -> None:
    done = subprocess.run(
        ["callgrind_control", *args, str(pid)], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0 or "OK" not in done.stdout:
        raise RuntimeError(f"callgrind_control {' '.join(args)} {pid}: {done.stdout}{done.stderr}")


def instrument(pid: int) -> None:
    """Switch instrumentation on (counting starts; zero() before the window)."""
    _control(pid, "--instr=on")


def zero(pid: int) -> None:
    _control(pid, "--zero")


def dump(pid: int, out: Path, timeout: float = 60.0) -> dict[str, int]:
    """Dump the counters since the last zero; the window's instructions (Ir) by object file (see by_object)."""
    before = set(out.parent.glob(f"{out.name}.{pid}.*"))
    _control(pid, "--dump")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in sorted(set(out.parent.glob(f"{out.name}.{pid}.*")) - before):
            if "\ntotals:" in path.read_text(errors="replace"):  # written last: the dump is complete
                counts = by_object(path)
                path.unlink()  # the files add up over a run; what we keep is in the counts
                return counts
        time.sleep(0.05)
    raise RuntimeError(f"no callgrind dump of {pid} appeared under {out}")


# Where a window's instructions are counted, three ways. gRPC's C core (cygrpc, and the C/C++ runtime it calls
# into: malloc, memcpy, its libstdc++) does work per wake-up, not per call: how many completions one poll
# collects, how many frames one write carries. That varies with the timing of the machine (measured: 562k-759k
# instructions per Confirm over three identical windows of one sidecar, while the interpreter's 3.494-3.500M).
# The same RPCs and bytes reach it in every variant; the telemetry code runs in the interpreter and its
# extensions (prometheus_client, the OTel SDK, protobuf's upb for the OTLP messages).
MEASURES = {
    "all": "every instruction of the process",
    "outside gRPC core": "all but the cygrpc object itself",
    "interpreter+extensions": "all but cygrpc, libc and libstdc++ (the deterministic one: the verdict's)",
}
EXCLUDED = {
    "all": (),
    "outside gRPC core": ("cygrpc.",),
    "interpreter+extensions": ("cygrpc.", "/libc.so", "/libstdc++.so"),
}
VERDICT_MEASURE = "interpreter+extensions"


def measures(counts: dict[str, int]) -> dict[str, int]:
    """A window's instruction count by each of MEASURES."""
    return {
        name: sum(n for obj, n in counts.items() if not any(part in obj for part in EXCLUDED[name]))
        for name in MEASURES
    }


def by_object(path: Path) -> dict[str, int]:
    """Self instructions per object file (libpython, cygrpc, libc, libcrypto, ...) of one callgrind dump: where a
    window's instructions went. Inclusive costs of calls (the line after ``calls=``) are skipped."""
    names: dict[str, str] = {}
    out: dict[str, int] = {}
    ob = ""
    skip_next = False
    for line in path.read_text(errors="replace").splitlines():
        if not line:
            continue
        if line.startswith(("ob=", "cob=")):  # an object's name is given once, at its first mention
            ref, _, name = line.partition("=")[2].partition(" ")
            if name:
                names[ref] = name
            if line.startswith("ob="):
                ob = names.get(ref, ref)
        elif line.startswith("calls="):
            skip_next = True
        elif line[0].isdigit() or line[0] in "+-*":
            if skip_next:
                skip_next = False
                continue
            parts = line.split()
            if len(parts) >= 2:
                out[ob] = out.get(ob, 0) + int(parts[1])
    return {names.get(ob, ob): n for ob, n in out.items()}
