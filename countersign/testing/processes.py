"""Start the real parts as real processes, on free ports or unix sockets, and stop them by PID.

Used by the walkthrough, the tests and the benchmarks alike: redis-server, the example todo
service and the sidecar itself (``python -m countersign.sidecar.cli serve``). The examples run from the source
checkout (``ROOT``): this kit is for a checkout, not for an installed package.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the checkout: countersign/testing/processes.py
EXAMPLE_REGISTRY = ROOT / "examples" / "registry.yaml"
TEMPLATE_URL = "http://127.0.0.1:8081"
MCP_REGISTRY = ROOT / "examples" / "registry_mcp.yaml"  # the back door: the example MCP todo server's tools
MCP_TEMPLATE_URL = "http://127.0.0.1:8082/mcp"
TEST_KEYS: dict[str, Any] = {"active": "k1", "keys": {"k1": "11" * 32, "k0": "22" * 32}}


@dataclass
class Proc:
    """A child process we started; stop() ends it by its PID (and only it)."""

    popen: subprocess.Popen[bytes]
    info: dict[str, Any] = field(default_factory=dict)
    log_path: Path | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        return self.popen.returncode

    def kill9(self) -> None:
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
            self.popen.wait(5)

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _start(cmd: list[str], log_dir: Path, name: str, timeout: float = 20.0) -> Proc:
    """Start cmd; wait for its one JSON 'listening' line on stdout; keep stderr in a log file."""
    log_path = log_dir / f"{name}-{time.monotonic_ns()}.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed when the process ends
    popen = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=_env(), cwd=ROOT)
    proc = Proc(popen, log_path=log_path)
    assert popen.stdout is not None
    deadline = time.monotonic() + timeout
    os.set_blocking(popen.stdout.fileno(), False)
    buf = b""
    while time.monotonic() < deadline:
        chunk = popen.stdout.read() or b""
        buf += chunk
        for line in buf.splitlines():
            if line.startswith(b"{") and b'"listening"' in line:
                proc.info = json.loads(line)
                return proc
        if popen.poll() is not None:
            raise RuntimeError(f"{name} exited with {popen.returncode}: {proc.log()[-2000:]}")
        time.sleep(0.02)
    proc.stop()
    raise RuntimeError(f"{name} did not report listening within {timeout}s: {proc.log()[-2000:]}")


def require(binary: str, package: str) -> str:
    """The path of a tool a test or bench starts; a clear error naming the package when it is missing."""
    found = shutil.which(binary)
    if found is None:
        raise RuntimeError(
            f"{binary} is not installed (Debian/Ubuntu: apt-get install {package}); `make test` "
            "installs what the tests need"
        )
    return found


def promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Prometheus's promtool (rule checks and rule unit tests)."""
    return subprocess.run(
        [require("promtool", "prometheus"), *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def _accepts(sock: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(sock))
        except OSError:
            return False
    return True


def start_redis(work: Path, *, extra: list[str] | None = None) -> Proc:
    """A private redis-server on a unix socket in work/ (no TCP port at all unless extra asks)."""
    require("redis-server", "redis-server")
    sock = work / f"redis-{time.monotonic_ns()}.sock"
    cmd = [
        "redis-server",
        "--port",
        "0",
        "--unixsocket",
        str(sock),
        "--unixsocketperm",
        "700",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(work),
        *(extra or []),
    ]
    log_path = work / f"redis-{time.monotonic_ns()}.log"
    popen = subprocess.Popen(cmd, stdout=open(log_path, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    proc = Proc(popen, {"url": f"unix://{sock}", "socket": str(sock)}, log_path)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if sock.exists() and _accepts(sock):  # the file appears at bind(), before listen(): connect to be sure
            return proc
        if popen.poll() is not None:
            raise RuntimeError(f"redis-server exited: {proc.log()}")
        time.sleep(0.01)
    proc.stop()
    raise RuntimeError("redis-server did not start")


def start_todo_service(work: Path, *, grpc: bool = False, tls: list[str] | None = None) -> Proc:
    """The example todo service; ``tls``: its --tls-* flags (then its url is https://)."""
    cmd = [
        sys.executable,
        "-m",
        "examples.todo_service",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--db",
        str(work / f"todos-{time.monotonic_ns()}.db"),
    ]
    if grpc:
        cmd += ["--grpc-port", "0"]
    cmd += tls or []
    proc = _start(cmd, work, "todo")
    proc.info["url"] = f"{'https' if tls else 'http'}://127.0.0.1:{proc.info['port']}"
    return proc


def start_mcp_todo(work: Path, *, port: int = 0, db: Path | None = None, json_response: bool = False) -> Proc:
    """The example MCP todo server (python -m examples.mcp_todo_server); info["url"] is its /mcp endpoint. Give
    the port and db of a server that stopped to start it again where it was, with what it had written."""
    db = db or work / f"mcp-todos-{time.monotonic_ns()}.db"
    cmd = [
        sys.executable,
        "-m",
        "examples.mcp_todo_server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--db",
        str(db),
    ]
    if json_response:
        cmd.append("--json-response")
    proc = _start(cmd, work, "mcp-todo")
    proc.info["db"] = str(db)
    return proc


def write_mcp_registry(work: Path, mcp_url: str, *, source: Path = MCP_REGISTRY) -> Path:
    """The example MCP registry pointing at the MCP server at ``mcp_url``."""
    return write_registry(work, mcp_url, source=source, **{MCP_TEMPLATE_URL: mcp_url})


def write_registry(work: Path, todo_url: str, *, source: Path = EXAMPLE_REGISTRY, **replace: str) -> Path:
    text = source.read_text(encoding="utf-8").replace(TEMPLATE_URL, todo_url)
    for old, new in replace.items():
        text = text.replace(old, new)
    path = work / f"registry-{time.monotonic_ns()}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def write_keys(work: Path, keys: dict[str, Any] | None = None) -> Path:
    path = work / f"keys-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(keys or TEST_KEYS))
    return path


def start_sidecar(
    work: Path,
    registry: Path,
    *,
    redis_url: str = "",
    keys: Path | None = None,
    flags: list[str] | None = None,
    listen: str = "127.0.0.1:0",
) -> Proc:
    cmd = [
        sys.executable,
        "-m",
        "countersign.sidecar.cli",
        "serve",
        "--registry",
        str(registry),
        "--listen",
        listen,
        "--metrics-listen",
        "127.0.0.1:0",
        *(flags or []),
    ]
    if redis_url:
        cmd += ["--redis-url", redis_url]
    if keys is not None:
        cmd += ["--keys-file", str(keys)]
    return _start(cmd, work, "sidecar")


def start_backends(work: Path) -> tuple[Proc, Proc, Path, Path]:
    """What every sidecar here runs against: redis-server, the todo service, a registry pointing at it and a keys
    file. Returns (redis, todo, registry, keys); the caller stops the two processes."""
    redis = start_redis(work)
    try:
        todo = start_todo_service(work)
    except BaseException:
        redis.stop()
        raise
    return redis, todo, write_registry(work, todo.info["url"]), write_keys(work)


def workdir(prefix: str = "countersign-") -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


class PersistentRedis:
    """redis-server on a fixed unix socket with an fsync-always AOF: a restart keeps what it acknowledged."""

    def __init__(self, work: Path, name: str = "redis") -> None:
        self.work = work
        self.dir = work / f"{name}-data"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.socket = work / f"{name}.sock"
        self.url = f"unix://{self.socket}"
        self.popen: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.paused = False

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def start(self, timeout: float = 15.0) -> None:
        import redis  # the project's own dependency

        self.starts += 1
        log = open(self.work / f"redis-{self.starts}.log", "wb")  # noqa: SIM115 - lives with the process
        self.popen = subprocess.Popen(
            [
                "redis-server",
                "--port",
                "0",
                "--unixsocket",
                str(self.socket),
                "--unixsocketperm",
                "700",
                "--dir",
                str(self.dir),
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"redis-server exited: {(self.work / f'redis-{self.starts}.log').read_text()}")
            if self.socket.exists():
                try:
                    client = redis.Redis(unix_socket_path=str(self.socket), socket_timeout=1)
                    client.ping()
                    client.close()
                    return
                except redis.RedisError:
                    pass
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("redis-server did not answer PING")

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            os.kill(self.pid, signal.SIGCONT)
            self.paused = False

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.resume()
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(5)

    def restart(self) -> None:
        self.stop()
        self.start()

    def client(self) -> Any:
        import redis

        return redis.Redis(unix_socket_path=str(self.socket), socket_timeout=2)
