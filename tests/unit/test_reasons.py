"""One vocabulary: every reason the sidecar gives is a member of the Reason enum, drawn in the error tree, and
named in the runbook where it can page someone; the metric's label values derive from it."""

from __future__ import annotations

import ast
import re

from countersign import errors
from countersign.observability import metrics
from countersign.reasons import OTHER, PAGES, Reason, label
from countersign.testing.processes import ROOT

CODE = ROOT / "countersign"


def test_every_reason_is_in_the_error_tree() -> None:
    tree = errors.__doc__ or ""
    missing = [r.value for r in Reason if not re.search(rf"\b{r.value}\b", tree)]
    assert not missing, f"draw these in the error tree (countersign/errors.py's docstring): {missing}"


def test_every_reason_that_can_page_someone_is_in_the_runbook() -> None:
    runbook = (ROOT / "docs" / "runbook.md").read_text(encoding="utf-8")
    missing = sorted(r.value for r in PAGES if not re.search(rf"\b{r.value}\b", runbook))
    assert not missing, f"say in docs/runbook.md what to do about: {missing}"


def test_every_reason_an_alert_matches_can_page_someone() -> None:
    alerts = (ROOT / "deploy" / "prometheus" / "countersign-alerts.yaml").read_text(encoding="utf-8")
    matched = set(re.findall(r'reason="([A-Z_]+)"', alerts))
    assert matched, "the alerts match reasons"
    assert matched <= {r.value for r in PAGES}, matched - {r.value for r in PAGES}


def test_the_metric_label_values_are_the_enum_and_other() -> None:
    assert frozenset(Reason) == metrics.REASONS
    assert label("SOMETHING_A_DOWNSTREAM_SAID") == OTHER
    assert label(Reason.ARGS_INVALID) == "ARGS_INVALID"
    assert set(metrics.PRECREATED_REASONS) <= metrics.REASONS


def test_no_reason_is_spelled_as_a_bare_string_in_the_sidecar() -> None:
    """Raised errors and outcomes name their reason through the enum, so a misspelling fails at import."""
    names = {r.value for r in Reason}
    found = []
    for path in CODE.rglob("*.py"):
        if any(part in path.parts for part in ("v1", "guard", "approvals", "testing")) or path.name == "reasons.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and any(isinstance(a, ast.Constant) and a.value in names for a in node.args):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found
