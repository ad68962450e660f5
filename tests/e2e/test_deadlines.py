"""A write's downstream call never outlives its claim's lease (issue 11 item 5).

With --lease 2s and a tool whose adapter.timeout_ms is 5000, a duplicate Confirm at 2.4 s saw
LEASE_LAPSED, a reconciler took the claim over, and the caller's own settle was lost. The combination
is refused at start, with the registry's message format naming file, tool and rule (the value at fault
is the tool's); the sidecar-wide --downstream-deadline is held to the same margin.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from countersign import registry
from countersign.errors import RegistryError
from countersign.sidecar import settings
from countersign.testing import processes
from countersign.testing.processes import ROOT

SERVE = [sys.executable, "-m", "countersign.sidecar.cli", "serve", "--listen", "127.0.0.1:0", "--metrics-listen", ""]


POST_ADAPTER = 'adapter: {kind: http, execute: {method: POST, url: "http://127.0.0.1:9/todos"},'
GET_ADAPTER = 'adapter: {kind: http, execute: {method: GET, url: "http://127.0.0.1:9/todos?status={status}"}}'


def _registry(work: Path, timeout_ms: int) -> Path:
    """The example registry, with create_todo's adapter given its own timeout."""
    return processes.write_registry(
        work,
        "http://127.0.0.1:9",
        **{POST_ADAPTER: POST_ADAPTER.replace("{kind: http,", f"{{kind: http, timeout_ms: {timeout_ms},")},
    )


def _serve(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SERVE, *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_a_tool_timeout_beyond_the_lease_stops_the_start_naming_file_tool_and_rule(tmp_path: Path) -> None:
    path = _registry(tmp_path, 5000)
    done = _serve(
        [
            "--registry",
            str(path),
            "--keys-file",
            str(processes.write_keys(tmp_path)),
            "--lease",
            "2s",
            "--downstream-deadline",
            "1s",
        ]
    )
    assert done.returncode == 2, done
    assert '"listening"' not in done.stdout and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        f"countersign: {path}: tool 'create_todo': deadline-below-lease: adapter.timeout_ms 5000 ms plus a 500 ms "
        "margin must not exceed --lease (2 s), or a call still running when the lease lapses is reported UNKNOWN "
        "and reconciled under it; lower timeout_ms or raise --lease"
    )


@pytest.mark.parametrize(
    ("timeout_ms", "lease", "fits"),
    [
        (5000, 5.0, False),
        (4600, 5.0, False),
        (4500, 5.0, True),
        (1000, 2.0, True),
        (0, 1.5, True),
        (0, 1.4, False),
    ],
)
def test_the_margin_is_half_a_second(tmp_path: Path, timeout_ms: int, lease: float, fits: bool) -> None:
    reg = registry.load(str(_registry(tmp_path, timeout_ms)))
    if fits:
        registry.check_deadlines(reg, lease, 1.0, settings.LEASE_MARGIN)
        return
    with pytest.raises(RegistryError) as info:
        registry.check_deadlines(reg, lease, 1.0, settings.LEASE_MARGIN)
    # create_todo: the first write tool, whether its own timeout or the sidecar's deadline is too long
    assert (info.value.tool, info.value.rule) == ("create_todo", "deadline-below-lease")


def test_a_read_tool_may_take_longer_than_the_lease(tmp_path: Path) -> None:
    path = processes.write_registry(
        tmp_path,
        "http://127.0.0.1:9",
        **{GET_ADAPTER: GET_ADAPTER.replace("{kind: http,", "{kind: http, timeout_ms: 60000,")},
    )
    assert "timeout_ms: 60000" in path.read_text()
    registry.check_deadlines(registry.load(str(path)), 2.0, 1.0, settings.LEASE_MARGIN)


def test_the_sidecar_deadline_needs_the_same_margin(tmp_path: Path) -> None:
    done = _serve(["--registry", str(processes.EXAMPLE_REGISTRY), "--lease", "2s", "--downstream-deadline", "1800ms"])
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "countersign: --lease must be longer than --downstream-deadline by at least 500 ms, "
        "or a live call would be reported UNKNOWN while it still runs"
    )
