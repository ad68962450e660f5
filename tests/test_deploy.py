"""The deployment artefacts: the Dockerfile (hadolint, and its Python part built for real by
scripts/check_image.sh) and the Helm chart (lint, render, schema, Kubernetes validation, the sidecar's shape).

Rendering goes through helm-python-sdk (Helm's Go SDK over ctypes, no helm binary). Its public
``Chart.render`` takes no API versions; the native ``helm_render`` it wraps accepts ``api_versions`` and
``kube_version`` in the same options JSON, so ``render`` below passes them there (the equivalent of
``helm template --api-versions ... --kube-version ...``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from helm_python import _native

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "countersign"
AGENT_CHART = ROOT / "helm" / "examples" / "agent"
EXAMPLES = sorted((CHART / "examples").glob("*.yaml"))
MONITORING_API = "monitoring.coreos.com/v1"
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}
KUBE_VERSIONS = ["1.29.0", kubernetes_validate.latest_version()]
BASE = {"redis": {"url": "redis://redis:6379/0"}, "keys": {"existingSecret": "countersign-keys"}}
STANDALONE = {**BASE, "example": {"enabled": True}}


def bin_path(name: str) -> str:
    found = shutil.which(name, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    assert found, f"{name} is not installed (pip install -e '.[dev]')"
    return found


def render(values: dict[str, Any] | None = None, *, chart: Path = CHART, api_versions: list[str] | None = None,
           kube_version: str | None = None) -> list[dict[str, Any]]:
    """Every object the chart renders for these values, as dicts."""
    opts: dict[str, Any] = {"name": "demo", "namespace": "agents"}
    if api_versions:
        opts["api_versions"] = api_versions
    if kube_version:
        opts["kube_version"] = f"v{kube_version}"
    with helm.Chart.load(chart) as loaded:
        out = json.loads(_native.call_string("helm_render", loaded._raw(),
                                             None if values is None else json.dumps(values), json.dumps(opts)))
    return [doc for text in out.values() for doc in yaml.safe_load_all(text) if doc]


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(d["kind"] for d in docs)


def only(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"want one {kind}, got {kinds(docs)}"
    return found[0]


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = only(docs, "Deployment")["spec"]["template"]["spec"]
    return spec


def sidecar(docs: list[dict[str, Any]]) -> dict[str, Any]:
    containers = [c for c in pod_spec(docs).get("initContainers", []) if c["name"] == "countersign"]
    assert len(containers) == 1
    return containers[0]


def env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def example_values(path: Path) -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(path.read_text())
    return values


@pytest.fixture(scope="module")
def agent_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """helm/examples/agent with the countersign chart in charts/ (what `helm dependency update` does)."""
    root = tmp_path_factory.mktemp("agent") / "agent"
    shutil.copytree(AGENT_CHART, root)
    shutil.copytree(CHART, root / "charts" / "countersign", ignore=shutil.ignore_patterns("examples"))
    return root


# ---- the image ---------------------------------------------------------------------------------------------


IMAGE_LABELS = ("org.opencontainers.image.title", "org.opencontainers.image.description",
                "org.opencontainers.image.version", "org.opencontainers.image.revision",
                "org.opencontainers.image.created", "org.opencontainers.image.licenses",
                "org.opencontainers.image.base.name", "org.opencontainers.image.base.digest")


def hadolint(dockerfile: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([bin_path("hadolint"), "--no-color", *flags, str(dockerfile)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_hadolint_passes_without_warnings_and_requires_the_oci_labels(tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / ".hadolint.yaml").read_text())
    assert set(config) == {"label-schema", "strict-labels"}, "fix findings rather than ignoring them"
    assert tuple(config["label-schema"]) == IMAGE_LABELS and config["strict-labels"] is True
    required = [f"--require-label={label}:{kind}" for label, kind in config["label-schema"].items()]
    result = hadolint(ROOT / "Dockerfile", "--strict-labels", *required)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr
    text = (ROOT / "Dockerfile").read_text()
    for label in IMAGE_LABELS:   # each label is really checked: without it hadolint fails
        broken = tmp_path / f"Dockerfile.{label}"
        broken.write_text(text.replace(f"{label}=", f"x-{label}="))
        assert hadolint(broken).returncode != 0 and label in hadolint(broken).stdout


def test_dockerfile_shape() -> None:
    text = (ROOT / "Dockerfile").read_text()
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    froms = [line for line in lines if line.startswith("FROM ")]
    assert froms == ["FROM ${PYTHON_IMAGE} AS builder", "FROM ${PYTHON_IMAGE}"]
    (base,) = [line.split("=", 1)[1] for line in lines if line.startswith("ARG PYTHON_IMAGE=")]
    name, digest = base.split("@")
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", name) and re.fullmatch(r"sha256:[0-9a-f]{64}", digest), \
        "the base is pinned by digest"
    assert f'org.opencontainers.image.base.digest="{digest}"' in text
    assert f'org.opencontainers.image.base.name="docker.io/library/{name}"' in text
    assert "--require-hashes --no-deps --only-binary=:all:" in text and "-r requirements.lock" in text
    assert "pip wheel --no-deps --no-build-isolation --wheel-dir /wheels ." in text
    assert 'ENTRYPOINT ["countersign", "serve"]' in lines
    assert "USER 10001:10001" in lines
    assert any(line.startswith("EXPOSE ") and "50051" in line and "9464" in line for line in lines)
    healthcheck = next(line for line in lines if line.startswith("HEALTHCHECK "))
    assert 'CMD ["countersign-healthcheck"]' in healthcheck
    runtime = text.split("FROM ${PYTHON_IMAGE}\n", 1)[1]
    assert "apt-get" not in runtime and "gcc" not in runtime and "pip install" not in runtime, \
        "no build tools and no resolution in the runtime stage"
    assert "COUNTERSIGN_LISTEN=unix:/run/countersign/countersign.sock" in runtime
    # The build context is an allow-list: everything COPY'd must be let in by .dockerignore.
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in ignore
    for needed in ("pyproject.toml", "README.md", "countersign/", "deploy/docker/healthcheck.py", "requirements.lock",
                   "requirements-build.lock"):
        assert f"!{needed}" in ignore


def _locked(path: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of a `uv pip compile --generate-hashes` file."""
    entries: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=[a-z0-9])", path.read_text()):
        match = re.match(r"([a-z0-9][a-z0-9._-]*)==([^ ;\\\n]+)", block)
        if match:
            entries[match.group(1)] = (match.group(2), re.findall(r"--hash=sha256:([0-9a-f]{64})", block))
    return entries


def test_the_lock_pins_every_dependency_with_hashes_and_satisfies_pyproject() -> None:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    locked = {canonicalize_name(k): v for k, v in _locked(ROOT / "requirements.lock").items()}
    assert {"grpcio", "redis", "protobuf", "opentelemetry-sdk", "python-json-logger"} <= locked.keys()
    assert all(hashes for _, hashes in locked.values()), "every entry has its sha256"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for line in project:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{name} is in pyproject.toml but not in requirements.lock: run 'make lock'"
        assert requirement.specifier.contains(locked[name][0], prereleases=True), (
            f"{name}=={locked[name][0]} breaks {line!r}: run 'make lock'")
    build = _locked(ROOT / "requirements-build.lock")
    assert {"setuptools", "wheel"} <= build.keys() and all(h for _, h in build.values())


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_check_image_script_builds_installs_serves_and_stops() -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    result = subprocess.run(["bash", str(ROOT / "scripts" / "check_image.sh")], cwd="/", capture_output=True,
                            text=True, timeout=170, env={**os.environ, "PYTHON": sys.executable})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "check_image: OK" in result.stderr
    assert "SBOM lists" in result.stderr and "grpcio" in result.stderr


# ---- the chart: lint and Kubernetes validation -------------------------------------------------------------


CASES = [pytest.param(None, id="default"), pytest.param(STANDALONE, id="standalone-inline")] + [
    pytest.param(example_values(p), id=p.stem) for p in EXAMPLES]


def test_examples_cover_the_ways_to_deploy() -> None:
    assert {p.stem for p in EXAMPLES} >= {"standalone-values", "unix-socket-values", "sentinel-values",
                                          "cluster-values", "monitoring-values"}


@pytest.mark.parametrize("values", CASES)
def test_lint_strict(values: dict[str, Any] | None) -> None:
    for kube in (None, "v1.29.0"):
        report = helm.lint(CHART, values, strict=True, namespace="agents", kube_version=kube)
        problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
        assert not problems, problems


@pytest.mark.parametrize("values", CASES)
@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_every_rendered_object_is_valid_kubernetes(values: dict[str, Any] | None, kube: str) -> None:
    docs = render(values, api_versions=[MONITORING_API], kube_version=kube)
    assert docs
    for doc in docs:
        validate(doc, kube)


def test_the_agent_chart_including_the_templates_renders_valid_objects(agent_chart: Path) -> None:
    report = helm.lint(agent_chart, strict=True)
    assert not [m for m in report["messages"] if m["severity"] >= 2] + report["errors"], report
    for kube in KUBE_VERSIONS:
        docs = render(chart=agent_chart, kube_version=kube)
        for doc in docs:
            validate(doc, kube)
    spec = pod_spec(docs)
    assert [c["name"] for c in spec["initContainers"]] == ["countersign"]
    assert spec["initContainers"][0]["image"] == "registry.example.com/countersign:0.1.0"
    assert env(spec["containers"][0])["COUNTERSIGN_ADDRESS"] == "127.0.0.1:50051"
    registry = only(docs, "ConfigMap")
    assert {v["name"] for v in spec["volumes"]} >= {"countersign-registry", "countersign-keys", "countersign-tmp"}
    assert next(v for v in spec["volumes"] if v["name"] == "countersign-registry")["configMap"]["name"] == \
        registry["metadata"]["name"]
    annotations = only(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    text = registry["data"]["registry.yaml"].rstrip("\n")
    assert annotations["checksum/countersign-registry"] == hashlib.sha256(text.encode()).hexdigest()


def validate(doc: dict[str, Any], kube: str) -> None:
    if doc["kind"] in OPERATOR_KINDS:
        # Not a core kind: kubernetes-validate has no schema; check the structure the Operator needs.
        assert doc["apiVersion"] == MONITORING_API
        assert doc["metadata"]["name"] and set(doc) == {"apiVersion", "kind", "metadata", "spec"}
        if doc["kind"] == "ServiceMonitor":
            assert doc["spec"]["selector"]["matchLabels"] and doc["spec"]["endpoints"][0]["port"]
        else:
            for group in doc["spec"]["groups"]:
                assert group["name"] and all("expr" in rule for rule in group["rules"])
        return
    try:
        kubernetes_validate.validate(doc, kube, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{doc['kind']} {doc['metadata']['name']} invalid for Kubernetes {kube}: {exc.message} "
                    f"at {'.'.join(map(str, exc.path))}")


# ---- the values schema -------------------------------------------------------------------------------------


def schema_rejects(values: dict[str, Any]) -> str:
    with helm.Chart.load(CHART) as chart:
        with pytest.raises(helm.HelmError) as caught:
            chart.validate_schema(values)
        with pytest.raises(helm.HelmError):
            chart.render(values, name="demo")
    return str(caught.value)


@pytest.mark.parametrize(("values", "needle"), [
    ({"resourses": {"limits": {"memory": "1Gi"}}}, "resourses"),
    ({"resources": {"limits": {"memroy": "1Gi"}}}, "memroy"),
    ({"securityContext": {"runAsNonroot": True}}, "runAsNonroot"),
    ({"redis": {"sentinal": {"masterName": "m"}}}, "sentinal"),
    ({"monitoring": {"serviceMonitor": {"enable": True}}}, "enable"),
    ({"example": {"agent": {"imag": "x"}}}, "imag"),
    ({"registry": {"policy_version": "1", "tool": []}}, "registry"),
], ids=["top-level", "nested", "securityContext", "redis", "monitoring", "example", "registry-top-keys"])
def test_schema_rejects_misspelled_keys(values: dict[str, Any], needle: str) -> None:
    assert needle in schema_rejects(values)


@pytest.mark.parametrize("values", [
    {"listen": {"port": "50051"}},
    {"listen": {"port": 70000}},
    {"metrics": {"enabled": "yes"}},
    {"redis": {"mode": "replica"}},
    {"redis": {"url": "http://redis:6379"}},
    {"redis": {"sentinel": {"addresses": "a:26379"}}},
    {"settings": {"lease": "30"}},
    {"securityContext": {"runAsNonRoot": False}},
    {"probes": {"type": "http"}},
    {"registry": 42},
    {"example": {"replicas": "2"}},
], ids=lambda v: json.dumps(v, separators=(",", ":")))
def test_schema_rejects_mistyped_values(values: dict[str, Any]) -> None:
    schema_rejects(values)


def test_every_object_level_of_the_schema_is_closed() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                assert node.get("additionalProperties") is False, f"{where} is open"
            for key, child in node.items():
                walk(child, f"{where}.{key}")
        elif isinstance(node, list):
            for i, child in enumerate(node):
                walk(child, f"{where}[{i}]")

    walk(schema, "$")
    with helm.Chart.load(CHART) as chart:
        assert set(chart.values) == set(schema["properties"]) - {"global"}
        chart.validate_schema(None)
        for path in EXAMPLES:
            chart.validate_schema(example_values(path))


# ---- the sidecar's shape -----------------------------------------------------------------------------------


def test_sidecar_is_a_native_sidecar_non_root_read_only_with_three_probes() -> None:
    docs = render(STANDALONE)
    spec = pod_spec(docs)
    side = sidecar(docs)
    assert side["restartPolicy"] == "Always"
    assert [c["name"] for c in spec["containers"]] == ["agent"]
    sc = side["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 10001
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"] and sc["seccompProfile"]["type"] == "RuntimeDefault"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert side[probe]["exec"]["command"][0] == "/usr/local/bin/countersign-healthcheck"
    assert side["resources"]["limits"]["memory"]
    e = env(side)
    assert e["COUNTERSIGN_LISTEN"] == "127.0.0.1:50051"
    assert e["COUNTERSIGN_KEYS_FILE"] == "/etc/countersign/keys/keys.json"
    assert e["COUNTERSIGN_REGISTRY"] == "/etc/countersign/registry/registry.yaml"
    assert e["COUNTERSIGN_REDIS_URL"] == "redis://redis:6379/0" and e["COUNTERSIGN_REDIS_MODE"] == "standalone"
    mounts = {m["name"]: m for m in side["volumeMounts"]}
    assert mounts["countersign-keys"]["readOnly"] and mounts["countersign-tmp"]["mountPath"] == "/tmp"
    keys = next(v for v in spec["volumes"] if v["name"] == "countersign-keys")
    assert keys["secret"]["secretName"] == "countersign-keys"
    assert env(spec["containers"][0])["COUNTERSIGN_ADDRESS"] == "127.0.0.1:50051"


def test_keys_come_only_from_an_existing_secret() -> None:
    for values in [None, STANDALONE, *(example_values(p) for p in EXAMPLES)]:
        assert "Secret" not in kinds(render(values, api_versions=[MONITORING_API]))
    side = sidecar(render({**STANDALONE, "keys": {"existingSecret": ""}}))
    assert "COUNTERSIGN_KEYS_FILE" not in env(side)
    assert "countersign-keys" not in {m["name"] for m in side["volumeMounts"]}


def test_grpc_probes_need_a_wildcard_tcp_listener() -> None:
    side = sidecar(render({**STANDALONE, "listen": {"host": "0.0.0.0"}, "probes": {"type": "grpc"}}))
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert side[probe]["grpc"] == {"port": 50051, "service": ""}
    for listen in ({"host": "127.0.0.1"}, {"host": "0.0.0.0", "unixSocket": True}):
        with pytest.raises(helm.HelmError, match="pod IP"):
            render({**STANDALONE, "listen": listen, "probes": {"type": "grpc"}})


def test_unix_socket_is_shared_with_the_agent() -> None:
    docs = render(example_values(CHART / "examples" / "unix-socket-values.yaml"))
    spec = pod_spec(docs)
    side = sidecar(docs)
    agent = spec["containers"][0]
    assert env(side)["COUNTERSIGN_LISTEN"] == "unix:/run/countersign/countersign.sock"
    assert env(agent)["COUNTERSIGN_ADDRESS"] == "unix:/run/countersign/countersign.sock"
    assert {"name": "countersign-socket", "mountPath": "/run/countersign"} in side["volumeMounts"]
    assert {"name": "countersign-socket", "mountPath": "/run/countersign"} in agent["volumeMounts"]
    assert side["command"][-1] == "umask 0007 && exec countersign serve"
    assert spec["securityContext"]["fsGroup"] == 10001
    assert side["livenessProbe"]["exec"]["command"][0] == "/usr/local/bin/countersign-healthcheck"
    assert "cs-grpc" not in {p["name"] for p in side.get("ports", [])}


def test_redis_modes() -> None:
    sentinel = env(sidecar(render(example_values(CHART / "examples" / "sentinel-values.yaml"))))
    assert sentinel["COUNTERSIGN_REDIS_MODE"] == "sentinel"
    assert sentinel["COUNTERSIGN_REDIS_URL"].startswith("redis+sentinel://redis-sentinel-0.")
    assert sentinel["COUNTERSIGN_REDIS_URL"].endswith(":26379/countersign/0")
    cluster = env(sidecar(render(example_values(CHART / "examples" / "cluster-values.yaml"))))
    assert cluster["COUNTERSIGN_REDIS_MODE"] == "cluster"
    assert cluster["COUNTERSIGN_REDIS_URL"] == {"secretKeyRef": {"name": "countersign-redis", "key": "url"}}
    tls = env(sidecar(render({**STANDALONE, "redis": {"mode": "sentinel", "sentinel": {
        "masterName": "m", "addresses": ["s:26379"], "db": 2, "tls": True}}})))
    assert tls["COUNTERSIGN_REDIS_URL"] == "rediss+sentinel://s:26379/m/2"
    with pytest.raises(helm.HelmError, match=r"redis\.url"):
        render({"example": {"enabled": True}})
    with pytest.raises(helm.HelmError, match=r"sentinel\.addresses"):
        render({**STANDALONE, "redis": {"mode": "sentinel", "sentinel": {"masterName": "m"}}})


def test_registry_change_changes_the_checksum_annotation() -> None:
    def annotation(values: dict[str, Any]) -> str:
        meta = only(render(values), "Deployment")["spec"]["template"]["metadata"]
        return str(meta["annotations"]["checksum/countersign-registry"])

    registry = {"policy_version": "1", "capabilities": [], "tools": []}
    first = annotation({**STANDALONE, "registry": registry})
    assert first == annotation({**STANDALONE, "registry": copy.deepcopy(registry)})
    assert first != annotation({**STANDALONE, "registry": {**registry, "policy_version": "2"}})
    as_text = {**STANDALONE, "registry": 'policy_version: "1"\ncapabilities: []\ntools: []\n'}
    assert annotation(as_text) != annotation({**as_text, "registry": 'policy_version: "2"\ncapabilities: []\n'})
    cm = only(render(as_text), "ConfigMap")
    assert yaml.safe_load(cm["data"]["registry.yaml"]) == registry


# ---- monitoring gating -------------------------------------------------------------------------------------


MONITORING_ON = {**STANDALONE, "monitoring": {"serviceMonitor": {"enabled": True},
                                              "prometheusRule": {"enabled": True}}}


def test_monitoring_objects_need_the_value_and_the_api() -> None:
    with_api = kinds(render(MONITORING_ON, api_versions=[MONITORING_API]))
    assert {"ServiceMonitor", "PrometheusRule", "Service"} <= set(with_api)
    assert not {"ServiceMonitor", "PrometheusRule", "Service"} & set(kinds(render(MONITORING_ON)))
    assert not {"ServiceMonitor", "PrometheusRule", "Service"} & set(
        kinds(render(STANDALONE, api_versions=[MONITORING_API])))
    rule_only = {**STANDALONE, "monitoring": {"prometheusRule": {"enabled": True}}}
    assert kinds(render(rule_only, api_versions=[MONITORING_API])).count("PrometheusRule") == 1
    assert "ServiceMonitor" not in kinds(render(rule_only, api_versions=[MONITORING_API]))


def test_service_monitor_finds_the_sidecar_pods() -> None:
    docs = render(MONITORING_ON, api_versions=[MONITORING_API])
    service = only(docs, "Service")
    monitor = only(docs, "ServiceMonitor")
    pod_labels = only(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    port = monitor["spec"]["endpoints"][0]["port"]
    assert port in {p["name"] for p in service["spec"]["ports"]}
    assert port in {p["name"] for p in sidecar(docs)["ports"]}
    assert env(sidecar(docs))["COUNTERSIGN_METRICS_LISTEN"] == "0.0.0.0:9464"


def test_prometheus_rule_carries_the_rules_file_with_the_runbook_base() -> None:
    base = "https://runbooks.example.com/countersign/runbook.md"
    values = {**STANDALONE, "monitoring": {"prometheusRule": {"enabled": True, "runbookBaseUrl": base}}}
    rule = only(render(values, api_versions=[MONITORING_API]), "PrometheusRule")
    text = (ROOT / "deploy" / "prometheus" / "countersign-alerts.yaml").read_text()
    expected = yaml.safe_load(text.replace("https://countersign.invalid/docs/runbook.md", base))
    assert rule["spec"]["groups"] == expected["groups"]


def test_dashboard_config_map() -> None:
    values = {"monitoring": {"dashboard": {"enabled": True, "namespace": "monitoring"}}}
    cm = next(d for d in render(values) if d["metadata"]["name"].endswith("-dashboard"))
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1" and cm["metadata"]["namespace"] == "monitoring"
    dashboard = json.loads((ROOT / "deploy" / "grafana" / "countersign-dashboard.json").read_text())
    assert json.loads(cm["data"]["countersign-dashboard.json"]) == dashboard
    assert not [d for d in render(None) if d["metadata"]["name"].endswith("-dashboard")]


def test_tracing_is_off_until_an_endpoint_is_given_and_then_head_sampled() -> None:
    plain = env(sidecar(render(STANDALONE)))
    assert not any(name.startswith("OTEL_") for name in plain
                   if name not in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES")), "no exporter, no sampler"
    assert plain["COUNTERSIGN_MAX_IN_FLIGHT"] == "64"
    traced = env(sidecar(render({**STANDALONE, "tracing": {"endpoint": "http://otel-agent:4317", "sampleRatio": 0.25},
                                 "settings": {"maxInFlight": 200}})))
    assert traced["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-agent:4317"
    assert traced["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio"
    assert traced["OTEL_TRACES_SAMPLER_ARG"] == "0.25"
    assert traced["COUNTERSIGN_MAX_IN_FLIGHT"] == "200"
    for bad in ({"tracing": {"sampleRatio": 2}}, {"tracing": {"endpoint": "otel-agent:4317"}},
                {"settings": {"maxInFlight": 0}}):
        with pytest.raises(helm.HelmError):
            render({**STANDALONE, **bad})


def test_spans_name_the_agent_release_and_carry_pod_namespace_and_node(agent_chart: Path) -> None:
    """OTEL_SERVICE_NAME per agent release (not one "countersign" for every agent in the cluster), and the
    pod, namespace and node from the downward API, defined before OTEL_RESOURCE_ATTRIBUTES refers to them."""
    for docs, name in ((render(STANDALONE), "demo-countersign"), (render(chart=agent_chart), "demo-countersign"),
                       (render({**STANDALONE, "tracing": {"serviceName": "billing-agent"}}), "billing-agent")):
        container = sidecar(docs)
        names = [e["name"] for e in container["env"]]
        values = env(container)
        assert values["OTEL_SERVICE_NAME"] == name
        assert {values[k]["fieldRef"]["fieldPath"] for k in ("K8S_POD_NAME", "K8S_NAMESPACE_NAME", "K8S_NODE_NAME")} \
            == {"metadata.name", "metadata.namespace", "spec.nodeName"}
        attributes = dict(kv.split("=") for kv in values["OTEL_RESOURCE_ATTRIBUTES"].split(","))
        assert attributes == {"k8s.pod.name": "$(K8S_POD_NAME)", "k8s.namespace.name": "$(K8S_NAMESPACE_NAME)",
                              "k8s.node.name": "$(K8S_NODE_NAME)", "k8s.container.name": "countersign"}
        assert all(names.index(ref) < names.index("OTEL_RESOURCE_ATTRIBUTES")
                   for ref in ("K8S_POD_NAME", "K8S_NAMESPACE_NAME", "K8S_NODE_NAME")), "$(VAR) sees earlier ones"
