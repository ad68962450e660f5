"""The short soak with faults (bench/soak.py): two sidecars, one Redis, a fault schedule (with a key rotation and a
registry change in the middle), then the checker."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

from countersign.testing.processes import ROOT


def test_short_soak_with_faults_keeps_every_invariant() -> None:
    # The soak's own --reconcile-window (20 s): the background reconcilers work from their index of open
    # actions, so an applied write is found by its lookups long before the window ends.
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench" / "soak.py"),
            "--seconds",
            "45",
            "--workers",
            "12",
            "--passive",
            "8",
            "--settle-timeout",
            "25",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=110)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # the soak stops what it started, by PID, on its way out
        out, err = proc.communicate(timeout=30)
        raise AssertionError("the soak did not finish in 110 s:\n" + out[-3000:]) from None
    assert proc.returncode == 0, out[-4000:] + err[-4000:]
    assert "RESULT: PASS" in out
    attempted = int(re.search(r"^writes attempted \(cards confirmed\): (\d+)", out, re.M).group(1))  # type: ignore[union-attr]
    assert attempted >= 1000, out[-3000:]
    assert re.search(r"^side effects per idempotency key: max [01] .*OK$", out, re.M), out[-3000:]
    assert re.search(r"^receipts without a side effect: 0  OK$", out, re.M)
    assert re.search(r"^side effects without a receipt: 0  OK$", out, re.M)
    assert re.search(r"^unknowns left: 0 .*OK$", out, re.M)
    replays = re.search(r"^replays byte-identical: (\d+)/(\d+)  OK$", out, re.M)
    assert replays and replays.group(1) == replays.group(2) and int(replays.group(2)) > 0
    dup = re.search(r"confirmed 2-5 times: \d+ = ([\d.]+) %", out)
    assert dup and float(dup.group(1)) >= 30
    assert re.search(r"failed to inject: 0$", out, re.M), "every fault of the schedule was injected"
    assert "rotate_key_sidecar_0" in out and "registry_change_sidecar_1" in out
    assert re.search(r"model retries \d+, other card/action 0  OK$", out, re.M), "one call, one action, mid-rotation"
    assert re.search(r"needs manual review 0\)  OK$", out, re.M), (
        "no unknown was swept to review by a sidecar whose registry lacks its tool"
    )
