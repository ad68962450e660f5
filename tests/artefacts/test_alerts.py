"""Alert rules, their promtool unit tests, their runbook entries, and the Grafana dashboard.

promtool comes from Debian's `prometheus` package (apt-get install prometheus).
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from countersign.observability.metrics import RPCS
from countersign.testing import processes
from countersign.testing.processes import ROOT, promtool

RULES = ROOT / "deploy" / "prometheus" / "countersign-alerts.yaml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "countersign-alerts.test.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "countersign-dashboard.json"
RUNBOOK = ROOT / "docs" / "runbook.md"
CHART_FILES = ROOT / "helm" / "countersign-monitoring" / "files"
RUNBOOK_BASE = "https://countersign.invalid/docs/runbook.md"

# The families the sidecar exports (countersign/sidecar/observability/metrics.py, docs/design.md §10), as exposed.
COUNTERS = {
    "countersign_invocations_total",
    "countersign_claims_total",
    "countersign_replay_hits_total",
    "countersign_executions_total",
    "countersign_refusals_total",
    "countersign_fail_closed_total",
    "countersign_reconciliations_total",
    "countersign_compensations_total",
    "countersign_reply_guard_total",
    "countersign_audit_write_failures_total",
    "countersign_settle_retries_total",
}
HISTOGRAMS = {
    "countersign_stage_duration_seconds",
    "countersign_downstream_duration_seconds",
    "countersign_rpc_server_duration_seconds",
    "countersign_redis_duration_seconds",
}
GAUGES = {"countersign_actions", "countersign_in_flight", "countersign_max_in_flight"}
METRICS = COUNTERS | GAUGES | {f"{h}{s}" for h in HISTOGRAMS for s in ("_bucket", "_sum", "_count")}
METRIC_NAME = re.compile(r"\bcountersign_[a-z_]+\b")
SELECTOR = 'job=~".*countersign.*"'
SERIES = re.compile(r"\b(up|countersign_[a-z_]+|countersign:[a-z_:0-9]+)(?:\{([^}]*)\})?")
EQUALS = re.compile(r'(\w+)\s*=\s*"([^"]*)"')
TARGET_LABELS = {"namespace", "job", "cluster", "pod", "instance"}  # added by the scrape, not the sidecar
SETTINGS = {"countersign_max_in_flight"}  # a configured value, not a count of events: never 0 on a fresh sidecar


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def alerts() -> list[dict[str, Any]]:
    return [rule for rule in rules() if "alert" in rule]


def anchor(heading: str) -> str:
    """GitHub's anchor for a markdown heading."""
    return re.sub(r"[^a-z0-9_ -]", "", heading.strip().lower()).replace(" ", "-")


def selectors(expr: str) -> list[tuple[str, str]]:
    """(metric, matchers text) of every series selector in a PromQL expression."""
    return [(m.group(1), m.group(2) or "") for m in SERIES.finditer(expr)]


def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_unit_tests_pass() -> None:
    result = promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_alerts_we_promised_exist() -> None:
    names = {a["alert"] for a in alerts()}
    assert names >= {
        "CountersignUnknownRateHigh",
        "CountersignFailClosed",
        "CountersignLeaseLapsed",
        "CountersignManualReviewWaiting",
        "CountersignCompensationFailed",
        "CountersignAuditWriteFailures",
        "CountersignDown",
        "CountersignClaimConflicts",
    }
    assert len(names) == len(alerts()), "duplicate alert names"


def test_each_alert_fires_on_bad_series_and_stays_silent_on_healthy_traffic() -> None:
    doc = yaml.safe_load(RULE_TESTS.read_text())
    assert doc["rule_files"] == [RULES.name]
    fires: set[str] = set()
    silent_in_healthy: set[str] = set()
    for test in doc["tests"]:
        for case in test.get("alert_rule_test", []):
            if case["exp_alerts"]:
                fires.add(case["alertname"])
            elif test["name"].startswith("healthy"):
                silent_in_healthy.add(case["alertname"])
    names = {a["alert"] for a in alerts()}
    assert fires == names, f"no firing test for {names - fires}"
    assert silent_in_healthy == names, f"no healthy-traffic test for {names - silent_in_healthy}"


def test_every_input_series_is_absent_until_the_sidecar_starts_and_then_starts_at_zero() -> None:
    """The sidecar exports nothing before it runs and every counter at 0 from its start: the tests model that,
    so an alert that only fires when the series was already there at 0 before the event is caught."""
    doc = yaml.safe_load(RULE_TESTS.read_text())
    for test in doc["tests"]:
        for series in test["input_series"]:
            tokens = str(series["values"]).split()
            assert tokens[0].startswith("_"), f"{test['name']}: {series['series']} starts present"
            first = next(t for t in tokens if not t.startswith("_"))
            if series["series"].startswith("countersign_") and "_total{" in series["series"]:
                assert first.split("+")[0].split("x")[0] == "0", f"{test['name']}: {series['series']} starts at {first}"


def test_every_alert_has_a_runbook_entry_and_points_at_it() -> None:
    text = RUNBOOK.read_text()
    headings = {m.group(1).strip(): m.start() for m in re.finditer(r"^## (.+)$", text, re.MULTILINE)}
    for alert in alerts():
        name = alert["alert"]
        assert name in headings, f"docs/runbook.md has no '## {name}'"
        body = text[headings[name] :].split("\n## ", 1)[0]
        for part in ("**Meaning.**", "**Check.**", "**Do.**"):
            assert part in body, f"runbook entry {name} lacks {part}"
        annotations = alert["annotations"]
        assert annotations["runbook_url"] == f"{RUNBOOK_BASE}#{anchor(name)}"
        assert annotations["summary"] and annotations["description"]
        assert alert["labels"]["severity"] in {"warning", "critical"}


def test_rules_reference_only_exported_metrics() -> None:
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    for rule in rules():
        used = set(METRIC_NAME.findall(rule["expr"])) - recorded
        assert used <= METRICS, f"{rule.get('alert') or rule.get('record')}: unknown {used - METRICS}"


def test_unknown_rate_is_the_designed_expression() -> None:
    record = next(r for r in rules() if r.get("record") == "countersign:unknown_rate:ratio_rate5m")
    expr = " ".join(record["expr"].split())
    assert expr == (
        f'sum by (namespace, job) (rate(countersign_executions_total{{{SELECTOR}, outcome="unknown"}}[5m]))'
        f" / sum by (namespace, job) (rate(countersign_executions_total{{{SELECTOR}}}[5m]))"
    )


def test_every_rule_selects_countersign_jobs_with_the_one_replaceable_selector() -> None:
    """The monitoring chart swaps SELECTOR for its own: every series selector in the rules must carry it."""
    for rule in rules():
        for metric, matchers in selectors(rule["expr"]):
            if ":" not in metric:
                assert matchers.startswith(SELECTOR), f"{rule.get('alert') or rule.get('record')}: {metric}"


def test_the_monitoring_charts_copies_are_identical() -> None:
    """deploy/ is what a team without Helm loads; the countersign-monitoring chart carries the same bytes."""
    assert (CHART_FILES / RULES.name).read_bytes() == RULES.read_bytes()
    assert (CHART_FILES / DASHBOARD.name).read_bytes() == DASHBOARD.read_bytes()
    assert sorted(p.name for p in CHART_FILES.iterdir()) == sorted([RULES.name, DASHBOARD.name])


def test_the_families_listed_here_are_the_ones_the_sidecar_exports() -> None:
    """METRICS above is what dashboards and rules may use; it must not drift from metrics.py."""
    from countersign.observability.metrics import Metrics

    families = list(Metrics(frozenset({"create_todo"})).registry.collect())
    exported = {f"{f.name}_total" if f.type == "counter" else f.name for f in families if f.type != "histogram"}
    exported |= {f"{f.name}{s}" for f in families if f.type == "histogram" for s in ("_bucket", "_sum", "_count")}
    assert exported == METRICS, (exported - METRICS, METRICS - exported)


def dashboard_targets() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel.get("targets", [])]


def test_dashboard_parses_and_uses_only_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "countersign-sidecars" and dashboard["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    used: set[str] = set()
    for _title, expr in dashboard_targets():
        used |= set(METRIC_NAME.findall(expr))
    for variable in dashboard["templating"]["list"]:
        used |= set(METRIC_NAME.findall(json.dumps(variable.get("query", ""))))
    assert used <= METRICS, f"unknown metrics {used - METRICS}"


def test_dashboard_filters_every_panel_by_cluster_namespace_and_job() -> None:
    """One dashboard for every release of every cluster behind one Grafana: the variables chain and every query
    honours all three."""
    variables = {v["name"]: v for v in json.loads(DASHBOARD.read_text())["templating"]["list"]}
    assert {"cluster", "namespace", "job"} <= set(variables)
    assert "$cluster" in variables["namespace"]["definition"] and "$namespace" in variables["job"]["definition"]
    for name in ("cluster", "namespace", "job"):
        assert variables[name]["includeAll"] and variables[name]["allValue"] == ".*", name
    for title, expr in dashboard_targets():
        for selector in ('cluster=~"$cluster"', 'namespace=~"$namespace"', 'job=~"$job"'):
            assert selector in expr, f"{title}: {selector}"


@pytest.mark.parametrize(
    ("topic", "metric"),
    [
        ("Unknown rate", 'outcome="unknown"'),
        ("Replay hits", "countersign_replay_hits_total"),
        ("Executions by outcome", "countersign_executions_total"),
        ("Refusals by reason", "countersign_refusals_total"),
        ("Claims by result", "countersign_claims_total"),
        ("Stage latency", "countersign_stage_duration_seconds_bucket"),
        ("Downstream latency", "countersign_downstream_duration_seconds_bucket"),
        ("Fail-closed", "countersign_fail_closed_total"),
        ("Open unknowns", 'state="unknown"'),
        ("Manual reviews", 'state="needs_manual_review"'),
        ("Calls by method and code", "countersign_rpc_server_duration_seconds_count"),
        ("Server-fault ratio", 'code=~"UNKNOWN|INTERNAL|UNAVAILABLE|DATA_LOSS|DEADLINE_EXCEEDED|UNIMPLEMENTED"'),
        ("Call duration by method", "countersign_rpc_server_duration_seconds_bucket"),
        ("Calls held against --max-in-flight", "countersign_in_flight"),
        ("Calls held against --max-in-flight", "countersign_max_in_flight"),
        ("Redis round trip by script", "countersign_redis_duration_seconds_bucket"),
    ],
)
def test_dashboard_has_the_panels_we_promised(topic: str, metric: str) -> None:
    assert any(title.startswith(topic) and metric in expr for title, expr in dashboard_targets()), topic


def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    """promtool parses every panel query (Grafana's variables replaced by plain values)."""
    replace = {"$__rate_interval": "5m", "$cluster": ".*", "$namespace": ".*", "$job": ".*"}
    records = []
    for i, (_title, expr) in enumerate(dashboard_targets()):
        for key, value in replace.items():
            expr = expr.replace(key, value)
        records.append({"record": f"dashboard:panel_{i}", "expr": expr})
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


# ---- the series exist from the start ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def fresh_scrape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    """The /metrics text of a real sidecar that has served nothing yet, and its registry's tool names."""
    work = tmp_path_factory.mktemp("fresh-scrape")
    redis, todo, registry, keys = processes.start_backends(work)
    sidecar = None
    try:
        sidecar = processes.start_sidecar(
            work, registry, redis_url=redis.info["url"], keys=keys, flags=["--log-level", "warning"]
        )
        with urllib.request.urlopen(f"http://{sidecar.info['metrics']}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        tools = [t["name"] for t in yaml.safe_load(registry.read_text())["tools"]]
        yield text, tools
    finally:
        for proc in (sidecar, todo, redis):
            if proc is not None:
                proc.stop()


def panel_and_rule_selectors() -> list[tuple[str, str, dict[str, str]]]:
    """(where, metric, equality matchers on the sidecar's own labels) of every selector an alert or panel uses."""
    exprs = [(rule.get("alert") or rule["record"], rule["expr"]) for rule in rules()] + dashboard_targets()
    found = []
    for where, expr in exprs:
        for metric, matchers in selectors(expr):
            if metric == "up" or ":" in metric or metric.endswith(("_bucket", "_sum", "_count")):
                continue  # up: Prometheus's own; records: rules; histograms appear with their first observation
            labels = {k: v for k, v in EQUALS.findall(matchers) if k not in TARGET_LABELS}
            found.append((where, metric, labels))
    return found


def test_a_fresh_sidecar_exports_every_series_the_alerts_and_panels_match_at_zero_per_tool(
    fresh_scrape: tuple[str, list[str]],
) -> None:
    text, tools = fresh_scrape
    samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    checked = 0
    for where, metric, labels in panel_and_rule_selectors():
        matching = [s for s in samples if s.name == metric and labels.items() <= s.labels.items()]
        assert matching, f"{where}: no {metric}{labels} before the first event"
        if metric in SETTINGS:
            assert all(s.value > 0 for s in matching), f"{where}: {metric}{labels} does not show its setting"
        else:
            assert all(s.value == 0 for s in matching), f"{where}: {metric}{labels} is not 0 on a fresh sidecar"
        if "tool" in matching[0].labels:
            missing = set(tools) - {s.labels["tool"] for s in matching}
            assert not missing, f"{where}: {metric}{labels} missing for tools {missing}"
        checked += 1
    assert checked >= 20
    # the series the issue named, spelled out
    for metric, labels in [
        ("countersign_compensations_total", {"tool": "delete_todo", "result": "failed"}),
        ("countersign_claims_total", {"tool": "create_todo", "result": "tampered"}),
        ("countersign_claims_total", {"tool": "create_todo", "result": "running"}),
        ("countersign_refusals_total", {"rpc": "Confirm", "reason": "OVERLOADED"}),
    ]:
        assert [s for s in samples if s.name == metric and labels.items() <= s.labels.items() and s.value == 0]


def test_refusals_are_created_for_every_rpc_the_server_counts() -> None:
    source = (ROOT / "countersign" / "sidecar" / "server.py").read_text()
    assert set(re.findall(r'@rpc\("(\w+)"\)', source)) == set(RPCS)
