"""The claim protocol's model (spin): every property holds, and the two counterexamples that justify
the fence and the WAIT are still found (model/README.md)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from countersign.testing.processes import ROOT

EXPECTED = {
    **{
        f"protocol.pml FENCE=1 {p}": 0
        for p in (
            "at_most_once",
            "never_ready_after_send",
            "failed_means_not_applied",
            "succeeded_means_applied",
            "settled_is_final",
        )
    },
    **{
        f"protocol.pml FENCE=0 {p}": 0
        for p in ("at_most_once", "never_ready_after_send", "succeeded_means_applied", "settled_is_final")
    },
    "protocol.pml FENCE=0 failed_means_not_applied": 1,
    "failover.pml WAIT=1 one_send": 0,
    "failover.pml WAIT=1 one_effect": 0,
    "failover.pml WAIT=1 never_ready_after_send": 0,
    "failover.pml WAIT=0 one_send": 1,
    "failover.pml WAIT=0 one_effect": 0,
    "failover.pml WAIT=0 never_ready_after_send": 1,
    **{
        f"continuation.pml CHECK_CLAIM={c} {p}": 0
        for c in (1, 0)
        for p in ("reply_once", "only_the_holder", "never_without_receipt", "settled_is_final")
    },
    "continuation.pml CHECK_CLAIM=0 only_the_holder": 1,
    **{f"grants.pml ATOMIC=1 {p}": 0 for p in ("uses_bounded", "grant_writes_bounded", "at_most_once")},
    # a check-then-set outside one script: both read the counter before either writes; two writes, one use counted
    "grants.pml ATOMIC=0 uses_bounded": 0,
    "grants.pml ATOMIC=0 grant_writes_bounded": 1,
    "grants.pml ATOMIC=0 at_most_once": 0,
}


@pytest.mark.timeout(600)  # spin compiles and explores 30 variants; slow on a busy 2-core machine
def test_the_protocol_model_checks() -> None:
    if shutil.which("spin") is None or shutil.which("gcc") is None:
        pytest.fail("spin and gcc are needed (apt-get install spin gcc; `make test` installs spin)")
    done = subprocess.run(["bash", str(ROOT / "model" / "check.sh")], capture_output=True, text=True, timeout=300)
    found = {}
    for line in done.stdout.splitlines():
        name, _, result = line.rpartition(": errors=")
        if name:
            found[name] = int(result) if result.isdigit() else -1
    assert found == EXPECTED, done.stdout + done.stderr


def test_the_transition_table_names_the_scripts_that_enforce_it() -> None:
    import re

    from countersign.store import states

    named = {
        m
        for targets in states.TRANSITIONS.values()
        for how in targets.values()
        for m in re.findall(r"[a-z_]+\.lua", how)
    }
    scripts = {p.name for p in (ROOT / "countersign" / "store" / "lua").glob("*.lua")}
    assert named <= scripts, named - scripts
    # the continuation, audit, quota, grant and turn scripts keep state of their own, outside the action state
    # machine (grant_run.lua is the action's: none -> running)
    action_scripts = {s for s in scripts if not s.startswith(("cont_", "audit", "quota", "grant_", "turn_"))} - {
        "issue.lua"
    }
    action_scripts |= {"grant_run.lua"}
    assert action_scripts <= named, (
        f"a script of the action state machine is missing from states.py: {action_scripts - named}"
    )
