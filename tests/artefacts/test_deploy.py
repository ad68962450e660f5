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

from countersign.testing.charts import CHART, STANDALONE, render
from countersign.testing.processes import ROOT

AGENT_CHART = ROOT / "helm" / "examples" / "agent"
EXAMPLES = sorted((CHART / "examples").glob("*.yaml"))
MONITORING_API = "monitoring.coreos.com/v1"
OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
KUBE_VERSIONS = ["1.29.0", kubernetes_validate.latest_version()]


def bin_path(name: str) -> str:
    found = shutil.which(name, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    assert found, f"{name} is not installed (pip install -e '.[dev]')"
    return found


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


IMAGE_LABELS = (
    "org.opencontainers.image.title",
    "org.opencontainers.image.description",
    "org.opencontainers.image.version",
    "org.opencontainers.image.revision",
    "org.opencontainers.image.created",
    "org.opencontainers.image.licenses",
    "org.opencontainers.image.base.name",
    "org.opencontainers.image.base.digest",
)


def hadolint(dockerfile: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [bin_path("hadolint"), "--no-color", *flags, str(dockerfile)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_hadolint_passes_without_warnings_and_requires_the_oci_labels(tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / ".hadolint.yaml").read_text())
    assert set(config) == {"label-schema", "strict-labels"}, "fix findings rather than ignoring them"
    assert tuple(config["label-schema"]) == IMAGE_LABELS and config["strict-labels"] is True
    required = [f"--require-label={label}:{kind}" for label, kind in config["label-schema"].items()]
    result = hadolint(ROOT / "Dockerfile", "--strict-labels", *required)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr
    text = (ROOT / "Dockerfile").read_text()
    for label in IMAGE_LABELS:  # each label is really checked: without it hadolint fails
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
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", name) and re.fullmatch(r"sha256:[0-9a-f]{64}", digest), (
        "the base is pinned by digest"
    )
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
    assert "apt-get" not in runtime and "gcc" not in runtime and "pip install" not in runtime, (
        "no build tools and no resolution in the runtime stage"
    )
    assert "COUNTERSIGN_LISTEN=unix:/run/countersign/countersign.sock" in runtime
    # Bytecode (issue 17, exec -> listening): the base image ships its standard library without .pyc and the
    # runtime user can write none, so without this every start compiles asyncio, email, json, ssl... again
    # (~0.7 s on 2 cores, notes/lean-mem.md). Hash-checked, so a rewritten file time never makes them stale.
    stdlib = next(line for line in runtime.split("RUN ")[1:] if "compileall" in line and "stdlib" in line)
    assert "--invalidation-mode checked-hash" in stdlib
    builder = text.split("FROM ${PYTHON_IMAGE}\n", 1)[0]
    venv = next(line for line in builder.split("RUN ")[1:] if "compileall" in line)
    assert "--invalidation-mode checked-hash" in venv and "/opt/venv" in venv
    # The build context is an allow-list: everything COPY'd must be let in by .dockerignore.
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in ignore
    for needed in (
        "pyproject.toml",
        "README.md",
        "countersign/",
        "deploy/docker/healthcheck.py",
        "requirements.lock",
        "requirements-build.lock",
    ):
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
            f"{name}=={locked[name][0]} breaks {line!r}: run 'make lock'"
        )
    build = _locked(ROOT / "requirements-build.lock")
    assert {"setuptools", "wheel"} <= build.keys() and all(h for _, h in build.values())


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_check_image_script_builds_installs_serves_and_stops() -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "check_image.sh")],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=170,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "check_image: OK" in result.stderr
    assert "SBOM lists" in result.stderr and "grpcio" in result.stderr


# ---- the chart: lint and Kubernetes validation -------------------------------------------------------------


CASES = [pytest.param(None, id="default"), pytest.param(STANDALONE, id="standalone-inline")] + [
    pytest.param(example_values(p), id=p.stem) for p in EXAMPLES
]


def test_examples_cover_the_ways_to_deploy() -> None:
    assert {p.stem for p in EXAMPLES} >= {
        "standalone-values",
        "unix-socket-values",
        "sentinel-values",
        "cluster-values",
        "monitoring-values",
        "mtls-values",
    }


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


def agent_variant(root: Path, *, alias: str = "", parent_keys: dict[str, Any] | None = None) -> Path:
    """The example agent chart, its dependency aliased (values and include under the alias) and/or with
    top-level keys of its own (a parent's `listen:` once broke the templates' guess of whose values they read)."""
    if alias:
        chart = root / "Chart.yaml"
        chart.write_text(
            chart.read_text().replace(
                "    repository: file://../../countersign",
                f"    repository: file://../../countersign\n    alias: {alias}",
            )
        )
        values = root / "values.yaml"
        values.write_text(values.read_text().replace("\ncountersign:\n", f"\n{alias}:\n"))
        deployment = root / "templates" / "deployment.yaml"
        deployment.write_text(deployment.read_text().replace(".Values.countersign", f".Values.{alias}"))
    if parent_keys:
        values = root / "values.yaml"
        values.write_text(values.read_text() + yaml.safe_dump(parent_keys))
    return root


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param({}, id="as-is"),
        pytest.param({"alias": "guard"}, id="aliased"),
        pytest.param(
            {"parent_keys": {"listen": {"port": 8080}, "metrics": {"enabled": False}, "redis": "elsewhere"}},
            id="parent-listen-key",
        ),
        pytest.param(
            {"alias": "guard", "parent_keys": {"listen": "0.0.0.0:8080", "registry": "not ours"}},
            id="aliased-and-parent-keys",
        ),
    ],
)
def test_the_agent_chart_patched_by_one_include_renders_valid_objects(
    agent_chart: Path, tmp_path: Path, variant: dict[str, Any]
) -> None:
    root = agent_variant(copy_chart(agent_chart, tmp_path), **variant)
    alias = variant.get("alias", "countersign")
    report = helm.lint(root, strict=True)
    assert not [m for m in report["messages"] if m["severity"] >= 2] + report["errors"], report
    for kube in KUBE_VERSIONS:
        docs = render(chart=root, kube_version=kube)
        for doc in docs:
            validate(doc, kube)
    spec = pod_spec(docs)
    assert [c["name"] for c in spec["initContainers"]] == ["countersign"]
    side = spec["initContainers"][0]
    assert side["image"] == "registry.example.com/countersign:0.1.0", "the subchart's appVersion, found by its values"
    assert side["restartPolicy"] == "Always" and side["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert env(side)["COUNTERSIGN_REDIS_URL"] == "redis://redis.data.svc:6379/0"
    assert env(spec["containers"][0])["COUNTERSIGN_ADDRESS"] == "127.0.0.1:50051"
    assert spec["containers"][0]["image"] == "registry.example.com/my-agent:1.0.0", "the agent's own spec is kept"
    assert spec["securityContext"]["runAsNonRoot"] is True
    registry = only(docs, "ConfigMap")
    assert registry["metadata"]["name"] == f"demo-{alias}-registry"
    assert {v["name"] for v in spec["volumes"]} >= {"countersign-registry", "countersign-keys", "countersign-tmp"}
    assert (
        next(v for v in spec["volumes"] if v["name"] == "countersign-registry")["configMap"]["name"]
        == registry["metadata"]["name"]
    )
    meta = only(docs, "Deployment")["spec"]["template"]["metadata"]
    text = registry["data"]["registry.yaml"].rstrip("\n")
    assert meta["annotations"]["checksum/countersign-registry"] == hashlib.sha256(text.encode()).hexdigest()
    assert meta["labels"]["app.kubernetes.io/name"] == "my-agent"
    assert meta["labels"]["countersign.io/sidecar"] == f"demo-{alias}"


def copy_chart(chart: Path, tmp_path: Path) -> Path:
    root = tmp_path / "agent"
    shutil.copytree(chart, root)
    return root


def test_the_include_names_what_to_pass_when_given_something_else(agent_chart: Path, tmp_path: Path) -> None:
    root = copy_chart(agent_chart, tmp_path)
    deployment = root / "templates" / "deployment.yaml"
    deployment.write_text(deployment.read_text().replace('"values" .Values.countersign', '"values" .Values'))
    with pytest.raises(helm.HelmError, match=r"pass \.Values\.<dependency name or alias>"):
        render(chart=root)


AGENT_POD_EXTRAS = """  initContainers:
    - name: migrate
      image: busybox:1.36
  volumes:
    - name: cache
      emptyDir: {}
  containers:
    - name: metrics-exporter
      image: busybox:1.36
    - name: agent
      env:
        - name: OWN
          value: "1"
      volumeMounts:
        - name: cache
          mountPath: /cache"""


def test_the_include_adds_to_the_agents_pod_and_leaves_the_rest(agent_chart: Path, tmp_path: Path) -> None:
    """Its own init containers first, then the sidecar; its volumes, env and mounts kept; only the named
    containers get COUNTERSIGN_ADDRESS; a unix socket adds the mount and fsGroup."""
    root = copy_chart(agent_chart, tmp_path)
    pod = root / "templates" / "_pod.tpl"
    pod.write_text(pod.read_text().replace("  containers:\n    - name: agent", AGENT_POD_EXTRAS))
    deployment = root / "templates" / "deployment.yaml"
    deployment.write_text(
        deployment.read_text().replace(
            '(include "my-agent.pod" . | fromYaml))',
            '(include "my-agent.pod" . | fromYaml) "containers" (list "agent"))',
        )
    )
    values = root / "values.yaml"
    values.write_text(values.read_text() + "  listen:\n    unixSocket: true\n")
    spec = pod_spec(render(chart=root))
    assert [c["name"] for c in spec["initContainers"]] == ["migrate", "countersign"]
    assert {v["name"] for v in spec["volumes"]} >= {"cache", "countersign-socket", "countersign-registry"}
    agent = next(c for c in spec["containers"] if c["name"] == "agent")
    exporter = next(c for c in spec["containers"] if c["name"] == "metrics-exporter")
    assert env(agent) == {"OWN": "1", "COUNTERSIGN_ADDRESS": "unix:/run/countersign/countersign.sock"}
    assert [m["name"] for m in agent["volumeMounts"]] == ["cache", "countersign-socket"]
    assert "env" not in exporter and "volumeMounts" not in exporter
    assert spec["securityContext"]["fsGroup"] == 10001 and spec["securityContext"]["runAsNonRoot"] is True


def validate(doc: dict[str, Any], kube: str) -> None:
    if doc["kind"] in OPERATOR_KINDS:
        # Not a core kind: kubernetes-validate has no schema; check the structure the Operator needs.
        assert doc["apiVersion"] == MONITORING_API
        assert doc["metadata"]["name"] and set(doc) == {"apiVersion", "kind", "metadata", "spec"}
        if doc["kind"] == "ServiceMonitor":
            assert doc["spec"]["selector"]["matchLabels"] and doc["spec"]["endpoints"][0]["port"]
        elif doc["kind"] == "PodMonitor":
            assert doc["spec"]["selector"]["matchLabels"] and doc["spec"]["podMetricsEndpoints"][0]["port"]
        else:
            for group in doc["spec"]["groups"]:
                assert group["name"] and all("expr" in rule for rule in group["rules"])
        return
    try:
        kubernetes_validate.validate(doc, kube, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(
            f"{doc['kind']} {doc['metadata']['name']} invalid for Kubernetes {kube}: {exc.message} "
            f"at {'.'.join(map(str, exc.path))}"
        )


# ---- the values schema -------------------------------------------------------------------------------------


def schema_rejects(values: dict[str, Any]) -> str:
    with helm.Chart.load(CHART) as chart:
        with pytest.raises(helm.HelmError) as caught:
            chart.validate_schema(values)
        with pytest.raises(helm.HelmError):
            chart.render(values, name="demo")
    return str(caught.value)


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"resourses": {"limits": {"memory": "1Gi"}}}, "resourses"),
        ({"resources": {"limits": {"memroy": "1Gi"}}}, "memroy"),
        ({"securityContext": {"runAsNonroot": True}}, "runAsNonroot"),
        ({"redis": {"sentinal": {"masterName": "m"}}}, "sentinal"),
        ({"monitoring": {"serviceMonitor": {"enable": True}}}, "enable"),
        ({"monitoring": {"prometheusRule": {"enabled": True}}}, "prometheusRule"),
        ({"monitoring": {"dashboard": {"enabled": True}}}, "dashboard"),
        ({"example": {"agent": {"imag": "x"}}}, "imag"),
        ({"registry": {"policy_version": "1", "tool": []}}, "registry"),
    ],
    ids=[
        "top-level",
        "nested",
        "securityContext",
        "redis",
        "monitoring",
        "rules-moved",
        "dashboard-moved",
        "example",
        "registry-top-keys",
    ],
)
def test_schema_rejects_misspelled_keys(values: dict[str, Any], needle: str) -> None:
    assert needle in schema_rejects(values)


@pytest.mark.parametrize(
    "values",
    [
        {"listen": {"port": "50051"}},
        {"listen": {"port": 70000}},
        {"metrics": {"enabled": "yes"}},
        {"redis": {"mode": "replica"}},
        {"redis": {"url": "http://redis:6379"}},
        {"redis": {"sentinel": {"addresses": "a:26379"}}},
        {"settings": {"lease": "30"}},
        {"securityContext": {"runAsNonRoot": False}},
        {"probes": {"type": "tcp"}},
        {"probes": {"readinessPath": "/metrics"}},
        {"redis": {"url": "rediss+cluster://a:6379"}},
        {"extraVolumeMounts": [{"name": "ca", "mountPath": "relative"}]},
        {"example": {"podDisruptionBudget": {"maxUnavailable": 0}}},
        {"registry": 42},
        {"example": {"replicas": "2"}},
    ],
    ids=lambda v: json.dumps(v, separators=(",", ":")),
)
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


def test_sidecar_is_a_native_sidecar_non_root_read_only_with_three_http_probes() -> None:
    docs = render(STANDALONE)
    spec = pod_spec(docs)
    side = sidecar(docs)
    assert side["restartPolicy"] == "Always"
    assert [c["name"] for c in spec["containers"]] == ["agent"]
    sc = side["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 10001
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"] and sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert side["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "cs-metrics"}
    assert side["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "cs-metrics"}
    assert side["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "cs-metrics"}
    assert "cs-metrics" in {p["name"] for p in side["ports"]}
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
    side = sidecar(render({**STANDALONE, "listen": {"host": "0.0.0.0", "insecure": True}, "probes": {"type": "grpc"}}))
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert side[probe]["grpc"] == {"port": 50051, "service": ""}
    for listen in ({"host": "127.0.0.1"}, {"host": "0.0.0.0", "unixSocket": True}):
        with pytest.raises(helm.HelmError, match="pod IP"):
            render({**STANDALONE, "listen": listen, "probes": {"type": "grpc"}})


def test_a_wildcard_listener_needs_tls_or_an_acknowledged_plaintext() -> None:
    with pytest.raises(helm.HelmError, match=r"listen\.insecure"):
        render({**STANDALONE, "listen": {"host": "0.0.0.0"}})
    insecure = env(sidecar(render({**STANDALONE, "listen": {"host": "0.0.0.0", "insecure": True}})))
    assert insecure["COUNTERSIGN_INSECURE_LISTEN"] == "yes"
    assert "COUNTERSIGN_INSECURE_LISTEN" not in env(sidecar(render(STANDALONE)))


def test_mtls_approvals_and_downstream_tls_are_mounted_read_only_and_named_to_the_sidecar() -> None:
    docs = render(example_values(CHART / "examples" / "mtls-values.yaml"))
    side, spec = sidecar(docs), pod_spec(docs)
    e = env(side)
    assert (e["COUNTERSIGN_LISTEN"], "COUNTERSIGN_INSECURE_LISTEN" in e) == ("0.0.0.0:50051", False)
    assert (e["COUNTERSIGN_TLS_CERT"], e["COUNTERSIGN_TLS_KEY"], e["COUNTERSIGN_TLS_CLIENT_CA"]) == (
        "/etc/countersign/tls/tls.crt",
        "/etc/countersign/tls/tls.key",
        "/etc/countersign/tls/ca.crt",
    )
    assert e["COUNTERSIGN_TLS_ALLOWED_PEERS"] == "spiffe://cluster.local/ns/agents/sa/agent"
    assert e["COUNTERSIGN_APPROVALS"] == "/etc/countersign/approvals/approvals.yaml"
    assert e["COUNTERSIGN_VERIFIED_CONTEXT"] == "required"
    assert (e["COUNTERSIGN_DOWNSTREAM_CA"], e["COUNTERSIGN_DOWNSTREAM_CERT"], e["COUNTERSIGN_DOWNSTREAM_KEY"]) == (
        "/etc/countersign/downstream-tls/ca.crt",
        "/etc/countersign/downstream-tls/tls.crt",
        "/etc/countersign/downstream-tls/tls.key",
    )
    mounts = {m["name"]: m for m in side["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    for name, source in (
        ("countersign-tls", {"secretName": "countersign-grpc-tls", "defaultMode": 0o444}),
        ("countersign-downstream-tls", {"secretName": "countersign-downstream-tls", "defaultMode": 0o444}),
    ):
        assert mounts[name]["readOnly"] is True and volumes[name]["secret"] == source
    assert volumes["countersign-approvals"]["configMap"] == {"name": "countersign-approvals"}
    assert mounts["countersign-approvals"] == {
        "name": "countersign-approvals",
        "mountPath": "/etc/countersign/approvals",
        "readOnly": True,
    }
    # nothing of it without the values: loopback, no issuer, verified context off
    plain = env(sidecar(render(STANDALONE)))
    assert not {
        k
        for k in plain
        if k.startswith(("COUNTERSIGN_TLS", "COUNTERSIGN_DOWNSTREAM_CA", "COUNTERSIGN_DOWNSTREAM_CERT"))
        or k in ("COUNTERSIGN_DOWNSTREAM_KEY", "COUNTERSIGN_APPROVALS")
    }
    assert "COUNTERSIGN_VERIFIED_CONTEXT" not in plain  # the sidecar's default, off


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"tls": {"existingSecret": "s"}, "probes": {"type": "grpc"}, "listen": {"host": "0.0.0.0"}},
            "probes.type http",
        ),
        ({"tls": {"existingSecret": "s"}, "probes": {"type": "exec"}}, "probes.type http"),
        ({"tls": {"existingSecret": "s", "clientAuth": False, "allowedPeers": ["spiffe://x"]}}, "needs tls.clientAuth"),
        ({"approvals": {"verifiedContext": "required"}}, "needs approvals.existingConfigMap"),
    ],
)
def test_identity_values_that_cannot_work_fail_the_render(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=message):
        render({**STANDALONE, **values})


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
    assert side["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert "cs-grpc" not in {p["name"] for p in side.get("ports", [])}


def test_redis_modes() -> None:
    sentinel = env(sidecar(render(example_values(CHART / "examples" / "sentinel-values.yaml"))))
    assert sentinel["COUNTERSIGN_REDIS_MODE"] == "sentinel"
    assert sentinel["COUNTERSIGN_REDIS_URL"].startswith("redis+sentinel://redis-sentinel-0.")
    assert sentinel["COUNTERSIGN_REDIS_URL"].endswith(":26379/countersign/0")
    cluster = env(sidecar(render(example_values(CHART / "examples" / "cluster-values.yaml"))))
    assert cluster["COUNTERSIGN_REDIS_MODE"] == "cluster"
    assert cluster["COUNTERSIGN_REDIS_URL"] == {"secretKeyRef": {"name": "countersign-redis", "key": "url"}}
    tls = env(
        sidecar(
            render(
                {
                    **STANDALONE,
                    "redis": {
                        "mode": "sentinel",
                        "sentinel": {"masterName": "m", "addresses": ["s:26379"], "db": 2, "tls": True},
                    },
                }
            )
        )
    )
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


# ---- monitoring: this release's scrape target only --------------------------------------------------------


MONITORING_ON = {**STANDALONE, "monitoring": {"serviceMonitor": {"enabled": True}}}
POD_MONITOR_ON = {**STANDALONE, "monitoring": {"podMonitor": {"enabled": True}}}


def test_monitoring_objects_need_the_value_and_the_api() -> None:
    with_api = kinds(render(MONITORING_ON, api_versions=[MONITORING_API]))
    assert {"ServiceMonitor", "Service"} <= set(with_api)
    assert not {"ServiceMonitor", "PodMonitor", "Service"} & set(kinds(render(MONITORING_ON)))
    assert not {"ServiceMonitor", "PodMonitor", "Service"} & set(
        kinds(render(STANDALONE, api_versions=[MONITORING_API]))
    )
    pod_monitor = kinds(render(POD_MONITOR_ON, api_versions=[MONITORING_API]))
    assert "PodMonitor" in pod_monitor and not {"ServiceMonitor", "Service"} & set(pod_monitor)
    with pytest.raises(helm.HelmError, match="not both"):
        render({**STANDALONE, "monitoring": {"podMonitor": {"enabled": True}, "serviceMonitor": {"enabled": True}}})


def test_an_agent_release_ships_no_rules_and_no_dashboard() -> None:
    """Rules and dashboard are cluster-wide (helm/countersign-monitoring): two releases must not both ship them."""
    for values in (MONITORING_ON, POD_MONITOR_ON, example_values(CHART / "examples" / "monitoring-values.yaml")):
        docs = render(values, api_versions=[MONITORING_API])
        assert "PrometheusRule" not in kinds(docs)
        assert not [d for d in docs if "grafana_dashboard" in d["metadata"].get("labels", {})]
    assert not (CHART / "files").exists()


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
    assert "countersign" in service["metadata"]["name"], "the job name the rules' default selector matches"


def test_pod_monitor_finds_the_sidecar_pods() -> None:
    docs = render(POD_MONITOR_ON, api_versions=[MONITORING_API])
    monitor = only(docs, "PodMonitor")
    pod_labels = only(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["agents"]}
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] in {p["name"] for p in sidecar(docs)["ports"]}
    assert "countersign" in monitor["metadata"]["name"], "the job name the rules' default selector matches"


# ---- robustness: volumes, Redis URLs, disruption, network, the registry check ------------------------------


def test_extra_volumes_mount_a_redis_ca_into_the_sidecar() -> None:
    values = {
        **STANDALONE,
        "redis": {"url": "rediss://redis:6380/0?ssl_ca_certs=/etc/countersign/redis-ca/ca.crt"},
        "extraVolumes": [{"name": "redis-ca", "secret": {"secretName": "redis-ca"}}],
        "extraVolumeMounts": [{"name": "redis-ca", "mountPath": "/etc/countersign/redis-ca", "readOnly": True}],
    }
    docs = render(values)
    for doc in docs:
        validate(doc, KUBE_VERSIONS[-1])
    assert {"name": "redis-ca", "secret": {"secretName": "redis-ca"}} in pod_spec(docs)["volumes"]
    assert {"name": "redis-ca", "mountPath": "/etc/countersign/redis-ca", "readOnly": True} in sidecar(docs)[
        "volumeMounts"
    ]


@pytest.mark.parametrize(
    ("url", "mode"),
    [
        ("redis://redis:6379/0", "standalone"),
        ("rediss://redis:6380/0", "standalone"),
        ("unix:///run/redis/redis.sock", "standalone"),
        ("redis+sentinel://s1:26379,s2:26379/m/0", "sentinel"),
        ("rediss+sentinel://s1:26379/m/0", "sentinel"),
        ("redis+cluster://n1:6379,n2:6379", "cluster"),
        ("rediss://n1:6379", "cluster"),
    ],
)
def test_the_schema_accepts_every_redis_url_the_sidecar_accepts(url: str, mode: str) -> None:
    from countersign.store.redis_store import RedisStore

    side = env(sidecar(render({**STANDALONE, "redis": {"url": url, "mode": mode}})))
    assert side["COUNTERSIGN_REDIS_URL"] == url and side["COUNTERSIGN_REDIS_MODE"] == mode
    RedisStore.from_url(url, socket_timeout=1, connect_timeout=1, retries=0, mode=mode)  # parses: the sidecar starts


def test_a_cluster_or_sentinel_url_sets_its_mode_and_a_contradicting_mode_is_refused() -> None:
    for url, mode in (
        ("redis+cluster://n1:6379", "cluster"),
        ("redis+sentinel://s1:26379/m", "sentinel"),
        ("rediss+sentinel://s1:26379/m", "sentinel"),
    ):
        assert env(sidecar(render({**STANDALONE, "redis": {"url": url}})))["COUNTERSIGN_REDIS_MODE"] == mode
    with pytest.raises(helm.HelmError, match=r"is a cluster URL but redis\.mode is sentinel"):
        render({**STANDALONE, "redis": {"url": "redis+cluster://n1:6379", "mode": "sentinel"}})
    with pytest.raises(helm.HelmError, match=r"is a sentinel URL but redis\.mode is cluster"):
        render({**STANDALONE, "redis": {"url": "redis+sentinel://s1:26379/m", "mode": "cluster"}})


def test_http_probes_need_the_metrics_port() -> None:
    with pytest.raises(helm.HelmError, match=r"metrics\.enabled"):
        render({**STANDALONE, "metrics": {"enabled": False}})
    side = sidecar(render({**STANDALONE, "metrics": {"enabled": False}, "probes": {"type": "exec"}}))
    assert side["readinessProbe"]["exec"]["command"][0] == "/usr/local/bin/countersign-healthcheck"
    relaxed = sidecar(render({**STANDALONE, "probes": {"readinessPath": "/healthz"}}))
    assert relaxed["readinessProbe"]["httpGet"]["path"] == "/healthz"


def test_the_standalone_example_has_a_disruption_budget_and_admits_only_the_metrics_port() -> None:
    docs = render(example_values(CHART / "examples" / "monitoring-values.yaml"), api_versions=[MONITORING_API])
    pod_labels = only(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    budget = only(docs, "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    policy = only(docs, "NetworkPolicy")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    admitted = [port["port"] for rule in policy["spec"]["ingress"] for port in rule["ports"]]
    assert admitted == [9464], "the gRPC gateway (0.0.0.0:50051 here, for grpc probes) is not admitted"
    assert policy["spec"]["ingress"][0]["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    off = render(
        {
            **STANDALONE,
            "example": {
                "enabled": True,
                "podDisruptionBudget": {"enabled": False},
                "networkPolicy": {"enabled": False},
            },
        }
    )
    assert not {"PodDisruptionBudget", "NetworkPolicy"} & set(kinds(off))


def test_helm_test_checks_the_installed_registry_with_the_release_image() -> None:
    docs = render(STANDALONE)
    hook = next(d for d in docs if d["kind"] == "Pod")
    assert hook["metadata"]["annotations"]["helm.sh/hook"] == "test"
    container = hook["spec"]["containers"][0]
    assert container["command"] == ["countersign", "registry", "check", "/etc/countersign/registry/registry.yaml"]
    assert container["image"] == sidecar(docs)["image"]
    assert hook["spec"]["volumes"][0]["configMap"]["name"] == only(docs, "ConfigMap")["metadata"]["name"]
    assert "Pod" not in kinds(render({**STANDALONE, "helmTest": {"enabled": False}}))


def test_tracing_is_off_until_an_endpoint_is_given_and_then_head_sampled() -> None:
    plain = env(sidecar(render(STANDALONE)))
    assert not any(
        name.startswith("OTEL_") for name in plain if name not in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES")
    ), "no exporter, no sampler"
    assert plain["COUNTERSIGN_MAX_IN_FLIGHT"] == "64"
    traced = env(
        sidecar(
            render(
                {
                    **STANDALONE,
                    "tracing": {"endpoint": "http://otel-agent:4317", "sampleRatio": 0.25},
                    "settings": {"maxInFlight": 200},
                }
            )
        )
    )
    assert traced["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-agent:4317"
    assert traced["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio"
    assert traced["OTEL_TRACES_SAMPLER_ARG"] == "0.25"
    assert traced["COUNTERSIGN_MAX_IN_FLIGHT"] == "200"
    for bad in (
        {"tracing": {"sampleRatio": 2}},
        {"tracing": {"endpoint": "otel-agent:4317"}},
        {"settings": {"maxInFlight": 0}},
    ):
        with pytest.raises(helm.HelmError):
            render({**STANDALONE, **bad})


# ---- the countersign-monitoring chart: rules and dashboard, once per cluster ------------------------------

MONITORING_CHART = ROOT / "helm" / "countersign-monitoring"
MONITORING_EXAMPLE = example_values(MONITORING_CHART / "examples" / "values.yaml")
RULES_FILE = ROOT / "deploy" / "prometheus" / "countersign-alerts.yaml"
DASHBOARD_FILE = ROOT / "deploy" / "grafana" / "countersign-dashboard.json"


@pytest.mark.parametrize("values", [None, MONITORING_EXAMPLE], ids=["default", "example"])
def test_monitoring_chart_lints_and_renders_valid_objects(values: dict[str, Any] | None) -> None:
    for kube in (None, "v1.29.0"):
        report = helm.lint(MONITORING_CHART, values, strict=True, namespace="monitoring", kube_version=kube)
        assert not [m for m in report["messages"] if m["severity"] >= 2] + report["errors"], report
    for kube in KUBE_VERSIONS:
        docs = render(values, chart=MONITORING_CHART, api_versions=[MONITORING_API], kube_version=kube)
        assert kinds(docs) == ["ConfigMap", "PrometheusRule"]
        for doc in docs:
            validate(doc, kube)
    assert kinds(render(values, chart=MONITORING_CHART)) == ["ConfigMap"], "no PrometheusRule without the Operator"


def test_monitoring_chart_rules_are_the_rules_file_with_its_selector_and_runbook(tmp_path: Path) -> None:
    from countersign.testing.processes import promtool

    rule = only(render(MONITORING_EXAMPLE, chart=MONITORING_CHART, api_versions=[MONITORING_API]), "PrometheusRule")
    text = RULES_FILE.read_text().replace('job=~".*countersign.*"', MONITORING_EXAMPLE["selector"])
    text = text.replace("https://countersign.invalid/docs/runbook.md", MONITORING_EXAMPLE["runbookBaseUrl"])
    assert rule["spec"]["groups"] == yaml.safe_load(text)["groups"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # the rendered rules are valid, and the selector scopes them: the same failure fires in agents-a only
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    series = (
        'countersign_compensations_total{{namespace="{ns}", job="demo-countersign-metrics", tool="t", result="failed"}}'
    )
    up = 'up{{namespace="{ns}", job="demo-countersign-metrics"}}'
    (tmp_path / "rules.test.yaml").write_text(
        yaml.safe_dump(
            {
                "rule_files": ["rules.yaml"],
                "evaluation_interval": "1m",
                "tests": [
                    {
                        "interval": "1m",
                        "input_series": [
                            {"series": series.format(ns=ns), "values": "_x2 0x2 1x10"} for ns in ("agents-a", "other")
                        ]
                        + [{"series": up.format(ns=ns), "values": "_x2 1x12"} for ns in ("agents-a", "other")],
                        "alert_rule_test": [
                            {
                                "eval_time": "6m",
                                "alertname": "CountersignCompensationFailed",
                                "exp_alerts": [
                                    {
                                        "exp_labels": {
                                            "severity": "critical",
                                            "namespace": "agents-a",
                                            "job": "demo-countersign-metrics",
                                            "tool": "t",
                                        },
                                        "exp_annotations": {
                                            "summary": "A Countersign compensation of t failed in agents-a.",
                                            "description": "A compensating call for tool t (demo-countersign-metrics "
                                            "in agents-a) failed in the last 10 minutes: the original write stands "
                                            "and was not undone.",
                                            "runbook_url": "https://runbooks.example.com/countersign/runbook.md"
                                            "#countersigncompensationfailed",
                                        },
                                    }
                                ],
                            }
                        ],
                    }
                ],
            }
        )
    )
    result = promtool("test", "rules", "rules.test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_monitoring_chart_dashboard_is_the_dashboard_file_with_its_uid() -> None:
    values = {"dashboard": {"uid": "cs-prod", "namespace": "grafana", "annotations": {"grafana_folder": "Agents"}}}
    cm = only(render(values, chart=MONITORING_CHART), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1" and cm["metadata"]["namespace"] == "grafana"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Agents"}
    expected = {**json.loads(DASHBOARD_FILE.read_text()), "uid": "cs-prod"}
    assert json.loads(cm["data"]["countersign-dashboard.json"]) == expected
    assert not render({"dashboard": {"enabled": False}}, chart=MONITORING_CHART)


@pytest.mark.parametrize("selector", ['job=~"x"} or vector(1) # ', 'job=~"x"}', "job", 'job="a", '])
def test_monitoring_chart_refuses_a_selector_that_is_not_label_matchers(selector: str) -> None:
    with helm.Chart.load(MONITORING_CHART) as chart, pytest.raises(helm.HelmError):
        chart.validate_schema({"selector": selector})


# ---- the Kustomize component, for teams without Helm ------------------------------------------------------

KUSTOMIZE = ROOT / "deploy" / "kustomize"


def kustomize(path: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize` (kustomize built into kubectl) of a directory, as dicts."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with its built-in kustomize) is not installed")
    result = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_kustomize_component_patches_only_labelled_deployments_into_valid_objects() -> None:
    docs = kustomize(KUSTOMIZE / "example")
    for kube in KUBE_VERSIONS:
        for doc in docs:
            validate(doc, kube)
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    assert "initContainers" not in deployments["other"]["spec"]["template"]["spec"]
    spec = deployments["my-agent"]["spec"]["template"]["spec"]
    side = spec["initContainers"][0]
    assert side["name"] == "countersign" and side["restartPolicy"] == "Always"
    assert side["image"] == "registry.example.com/countersign:0.1.0"
    maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    registry = next(v for v in spec["volumes"] if v["name"] == "countersign-registry")["configMap"]["name"]
    assert registry.startswith("countersign-registry-") and registry in maps, "the hash-suffixed name: rolls pods"
    sources = [s["configMapRef"]["name"] for s in side["envFrom"]]
    assert all(name in maps for name in sources) and sources[0].startswith("countersign-settings-")
    assert maps[sources[1]]["data"]["COUNTERSIGN_REDIS_URL"] == "redis://redis.data.svc:6379/0", "overrides last"
    assert env(spec["containers"][0])["COUNTERSIGN_ADDRESS"] == "127.0.0.1:50051"
    checked = subprocess.run(
        [sys.executable, "-m", "countersign.sidecar.cli", "registry", "check", "-"],
        input=yaml.safe_dump_all(docs),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0 and f"ConfigMap/{registry}: ok" in checked.stdout, checked.stderr


def test_kustomize_component_is_the_charts_sidecar() -> None:
    """The component is written out by hand: this keeps it the chart's sidecar, field by field."""
    docs = kustomize(KUSTOMIZE / "example")
    spec = next(d for d in docs if d["metadata"]["name"] == "my-agent")["spec"]["template"]["spec"]
    ours = spec["initContainers"][0]
    chart_docs = render(STANDALONE)
    theirs = sidecar(chart_docs)
    for field in (
        "restartPolicy",
        "imagePullPolicy",
        "ports",
        "startupProbe",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "securityContext",
        "volumeMounts",
    ):
        assert ours[field] == theirs[field], field
    settings = next(d for d in docs if d["metadata"]["name"] == ours["envFrom"][0]["configMapRef"]["name"])
    overrides = next(d for d in docs if d["metadata"]["name"] == ours["envFrom"][1]["configMapRef"]["name"])
    chart_env = env(theirs)
    # the chart names the service per release; a component knows no release: the overlay names its agent
    assert chart_env.pop("OTEL_SERVICE_NAME") == "demo-countersign"
    assert overrides["data"]["OTEL_SERVICE_NAME"] == "my-agent-countersign"
    assert {**settings["data"], **env(ours)} == chart_env, "the component's default settings are the chart's"
    assert [e["name"] for e in ours["env"]] == [e["name"] for e in theirs["env"] if e["name"] in env(ours)], (
        "downward-API variables come before OTEL_RESOURCE_ATTRIBUTES refers to them"
    )
    volumes = {v["name"]: v for v in spec["volumes"]}
    for volume in pod_spec(chart_docs)["volumes"]:
        if volume["name"] != "countersign-registry":
            assert volumes[volume["name"]] == volume


def test_spans_name_the_agent_release_and_carry_pod_namespace_and_node(agent_chart: Path) -> None:
    """OTEL_SERVICE_NAME per agent release (not one "countersign" for every agent in the cluster), and the
    pod, namespace and node from the downward API, defined before OTEL_RESOURCE_ATTRIBUTES refers to them."""
    for docs, name in (
        (render(STANDALONE), "demo-countersign"),
        (render(chart=agent_chart), "demo-countersign"),
        (render({**STANDALONE, "tracing": {"serviceName": "billing-agent"}}), "billing-agent"),
    ):
        container = sidecar(docs)
        names = [e["name"] for e in container["env"]]
        values = env(container)
        assert values["OTEL_SERVICE_NAME"] == name
        assert {
            values[k]["fieldRef"]["fieldPath"] for k in ("K8S_POD_NAME", "K8S_NAMESPACE_NAME", "K8S_NODE_NAME")
        } == {"metadata.name", "metadata.namespace", "spec.nodeName"}
        attributes = dict(kv.split("=") for kv in values["OTEL_RESOURCE_ATTRIBUTES"].split(","))
        assert attributes == {
            "k8s.pod.name": "$(K8S_POD_NAME)",
            "k8s.namespace.name": "$(K8S_NAMESPACE_NAME)",
            "k8s.node.name": "$(K8S_NODE_NAME)",
            "k8s.container.name": "countersign",
        }
        assert all(
            names.index(ref) < names.index("OTEL_RESOURCE_ATTRIBUTES")
            for ref in ("K8S_POD_NAME", "K8S_NAMESPACE_NAME", "K8S_NODE_NAME")
        ), "$(VAR) sees earlier ones"
