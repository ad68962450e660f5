"""proto/ as a buf module with a name, and proto/buf.gen.yaml generating Go, Java and TypeScript stubs.

The template's plugins are remote (the Buf Schema Registry: network). Here they are replaced one for one by their
local equivalents (Debian's protoc-gen-go, protoc-gen-go-grpc and protoc for Java; npm's protoc-gen-es) and
`buf generate` runs for real into a temporary directory; the TypeScript output is type-checked with tsc against
@bufbuild/protobuf and @connectrpc/connect. grpc-java's plugin is only on Maven Central, which this machine cannot
reach: the Java gRPC service stubs are the one output not generated here. A missing tool fails with what to
install; it never skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from countersign.testing.processes import ROOT

PROTO = ROOT / "proto"
TS = ROOT / "examples" / "clients" / "typescript"
LOCAL = {  # remote plugin -> its local equivalent
    "buf.build/protocolbuffers/go": {"local": "protoc-gen-go"},
    "buf.build/grpc/go": {"local": "protoc-gen-go-grpc"},
    "buf.build/protocolbuffers/java": {"protoc_builtin": "java"},
    "buf.build/bufbuild/es": {"local": str(TS / "node_modules" / ".bin" / "protoc-gen-es")},
}


def _tool(name: str, hint: str) -> str:
    found = shutil.which(name, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        pytest.fail(f"{name} is not installed: {hint} (`make test` installs it)")
    return found


def _npm_ci() -> None:
    npm = _tool("npm", "apt-get install nodejs npm")
    lock, installed = TS / "package-lock.json", TS / "node_modules" / ".package-lock.json"
    if installed.exists() and installed.stat().st_mtime >= lock.stat().st_mtime:
        return
    done = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=TS, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_the_module_has_a_name_and_builds() -> None:
    config = yaml.safe_load((PROTO / "buf.yaml").read_text())
    assert config["version"] == "v2" and config["modules"][0]["name"] == "buf.build/countersign/countersign"
    done = subprocess.run(
        [_tool("buf", "pip install buf-bin"), "build", "-o", os.devnull],
        cwd=PROTO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_the_template_pins_go_java_and_typescript_plugins() -> None:
    template = yaml.safe_load((PROTO / "buf.gen.yaml").read_text())
    plugins = {p["remote"].split(":")[0]: p for p in template["plugins"]}
    assert set(plugins) == set(LOCAL) | {"buf.build/grpc/java"}
    assert all(":v" in p["remote"] for p in template["plugins"]), "remote plugins are pinned"
    assert {p["out"] for p in template["plugins"]} == {"gen/go", "gen/java", "gen/ts"}


def test_buf_generate_writes_go_java_and_typescript_with_local_plugins(tmp_path: Path) -> None:
    _tool("protoc", "apt-get install protobuf-compiler")
    for name, package in (("protoc-gen-go", "protoc-gen-go"), ("protoc-gen-go-grpc", "protoc-gen-go-grpc")):
        _tool(name, f"apt-get install {package}")
    _npm_ci()
    template: dict[str, Any] = yaml.safe_load((PROTO / "buf.gen.yaml").read_text())
    local = []
    for plugin in template["plugins"]:
        remote = plugin.pop("remote").split(":")[0]
        if remote in LOCAL:
            local.append({**LOCAL[remote], **plugin})
    template["plugins"] = local
    (tmp_path / "buf.gen.yaml").write_text(yaml.safe_dump(template))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        [_tool("buf", "pip install buf-bin"), "generate", str(PROTO), "--template", "buf.gen.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    go = tmp_path / "gen" / "go" / "countersign" / "v1"
    assert "package countersignv1" in (go / "gateway.pb.go").read_text()
    assert "ToolGatewayServiceClient" in (go / "gateway_grpc.pb.go").read_text()
    java = tmp_path / "gen" / "java" / "com" / "example" / "agent" / "countersign" / "v1"
    assert (java / "InvokeRequest.java").exists() and (java / "ConfirmationCard.java").exists()
    ts = (tmp_path / "gen" / "ts" / "countersign" / "v1" / "gateway_pb.ts").read_text()
    assert "ToolGatewayService" in ts and "@bufbuild/protobuf" in ts


def test_the_typescript_example_generates_and_typechecks() -> None:
    _npm_ci()
    npm = _tool("npm", "apt-get install nodejs npm")
    for script in ("generate", "check"):
        done = subprocess.run([npm, "run", "-s", script], cwd=TS, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"npm run {script}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
