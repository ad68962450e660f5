"""A downstream's free text never becomes a metric label (issue 11, the small ones; docs/design.md §10).

A downstream's refusal reason is passed on to the caller (its ErrorInfo says what the service said), but a
label value is one of a fixed set of the sidecar's own reasons, or OTHER: a downstream answering a hundred
different reasons adds one series, not a hundred.
"""

from __future__ import annotations

import ast
import re

from countersign.observability import metrics
from countersign.testing.processes import ROOT

ERRORS = {
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "FailedPrecondition",
    "DataLoss",
    "Unavailable",
    "ResourceExhausted",
    "CountersignError",
    "PrepareRefused",
    "NotSendable",
}


def _raised_reasons() -> set[str]:
    """Every reason literal the sidecar raises itself (the first argument of an error of the tree), and every
    literal reason of a FAILED outcome (which a read passes on as its refusal)."""
    found: set[str] = set()
    for path in (ROOT / "countersign").rglob("*.py"):
        if "/v1/" in str(path):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            args = node.args[1:] if name == "Outcome" else node.args
            if (
                (name in ERRORS or name == "Outcome")
                and args
                and isinstance(args[0], ast.Constant)
                and isinstance(args[0].value, str)
                and re.fullmatch(r"[A-Z][A-Z0-9_]+", args[0].value)
            ):
                found.add(args[0].value)
            elif (
                (name in ERRORS or name == "Outcome")
                and args
                and isinstance(args[0], ast.Attribute)
                and isinstance(args[0].value, ast.Name)
                and args[0].value.id == "Reason"
            ):
                found.add(args[0].attr)  # the enum's members are named as their values
    return found


def test_every_reason_the_sidecar_raises_is_a_known_label() -> None:
    raised = _raised_reasons()
    assert {"ARGS_INVALID", "OVERLOADED", "DOWNSTREAM_REDIRECT", "NOT_SENT"} <= raised, "the scan finds reasons"
    missing = raised - metrics.REASONS
    assert not missing, f"add these to metrics.REASONS (or they are counted as OTHER): {sorted(missing)}"
    assert metrics.Metrics().reason("SOMETHING_A_DOWNSTREAM_SAID") == "OTHER"
    assert metrics.Metrics().reason("ARGS_INVALID") == "ARGS_INVALID"
    assert "STORE_UNAVAILABLE" in metrics.REASONS  # raised through super().__init__, which the scan skips
