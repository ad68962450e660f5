"""The walkthrough end to end: real todo service, real sidecar with its embedded redis-server."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from countersign.testing.processes import ROOT

COUNTERSIGN = ROOT / ".venv" / "bin" / "countersign"

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server on PATH")


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)


def _assert_behaved(done: subprocess.CompletedProcess[str]) -> None:
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "all" in done.stdout and "steps behaved" in done.stdout, output
    assert "✗" not in done.stdout, output


def test_walkthrough_module() -> None:
    done = _run([sys.executable, "-m", "examples.walkthrough"])
    _assert_behaved(done)
    # the undo is a card of its own: nothing reached the service before the user confirmed it
    assert "Compensate proposes the declared inverse as a card of its own" in done.stdout, done.stdout
    assert "the service saw 0 request(s)" in done.stdout and "the user confirms the undo → SUCCEEDED" in done.stdout
    # the countersignature (issue 13): the agent's own Confirm of a signed tool is refused and the card waits;
    # the app's signed approval runs it; a grant of 2 uses covers two writes and not a third
    assert "PERMISSION_DENIED APPROVAL_REQUIRED; the card is READY, the service saw 0 request(s)" in done.stdout
    assert "it needs alice's approval (SIGNED)" in done.stdout
    assert done.stdout.count("under grant") == 2 and "confirmation: the grant is spent" in done.stdout
    # the back door (issue 15): one tools/call at the MCP server, the key in _meta and in the header
    assert "the MCP server saw 1 tools/call create_todo" in done.stdout, done.stdout


@pytest.mark.skipif(not COUNTERSIGN.exists(), reason="the countersign console script is not installed")
def test_countersign_demo() -> None:
    _assert_behaved(_run([str(COUNTERSIGN), "demo"]))


def test_the_walkthrough_deadline_is_in_the_future_at_every_hour() -> None:
    """The demo runs at any time of day: its todo's deadline must pass the service's window at every hour.

    CI once failed here at 20:03 UTC: "今晚 9 点" is in the past after 21:00 in Shanghai, so the prepare was
    refused and seven steps lost their card.
    """
    from datetime import datetime, timedelta

    from examples.todo_service import SERVICE_TZ, resolve_due_at
    from examples.walkthrough import DEADLINE

    midnight = datetime(2026, 12, 1, 0, 0, tzinfo=SERVICE_TZ)
    for minutes in range(0, 24 * 60, 15):
        now = midnight + timedelta(minutes=minutes)
        due = resolve_due_at(DEADLINE, now)  # raises TODO_DUE_AT_SUSPICIOUS when in the past
        assert due > now and due.hour == 21, (now, due)
