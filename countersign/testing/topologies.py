"""Real Redis topologies on loopback for the tests: a three-master Redis Cluster, and a primary with one
replica watched by three Sentinels. Free ports are found by binding port 0; every process is ours and is
stopped by its PID (processes.Proc) in ``stop()``.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from countersign.testing import processes

HOST = "127.0.0.1"
SERVICE = "mymaster"


def free_port(*, with_bus: bool = False) -> int:
    """A TCP port nobody listens on (and, for a cluster node, port + 10000 free too: its bus port)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind((HOST, 0))
            port = int(s.getsockname()[1])
        if not with_bus:
            return port
        if port + 10000 > 65535:
            continue
        try:
            with socket.socket() as bus:
                bus.bind((HOST, port + 10000))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port")


def cli(port: int, *args: str, timeout: float = 5.0) -> str:
    """redis-cli against 127.0.0.1:port; the reply as text ('' when the server does not answer)."""
    try:
        done = subprocess.run(
            ["redis-cli", "-h", HOST, "-p", str(port), *args], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def info(port: int, section: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in cli(port, "INFO", section).splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _wait(what: str, check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def start_server(work: Path, port: int, name: str, *extra: str) -> processes.Proc:
    """One redis-server on 127.0.0.1:port, no persistence, its own dir; returns once it answers PING."""
    node_dir = work / name
    node_dir.mkdir(parents=True, exist_ok=True)
    log_path = node_dir / f"{name}-{time.monotonic_ns()}.log"
    cmd = [
        "redis-server",
        "--bind",
        HOST,
        "--port",
        str(port),
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(node_dir),
        "--protected-mode",
        "no",
        *extra,
    ]
    popen = subprocess.Popen(cmd, stdout=open(log_path, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    proc = processes.Proc(popen, {"port": port, "name": name}, log_path)
    try:
        _wait(f"{name} to answer PING", lambda: popen.poll() is not None or cli(port, "PING") == "PONG", 10)
    except RuntimeError:
        proc.stop()
        raise
    if popen.poll() is not None:
        raise RuntimeError(f"{name} exited: {proc.log()[-2000:]}")
    return proc


@dataclass
class Cluster:
    """Three masters, no replicas, all 16384 slots covered."""

    work: Path
    ports: list[int] = field(default_factory=list)
    nodes: list[processes.Proc] = field(default_factory=list)

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"{HOST}:{p}" for p in self.ports)

    def keyslot(self, key: str) -> int:
        return int(cli(self.ports[0], "CLUSTER", "KEYSLOT", key))

    def owner_of(self, key: str) -> int:
        """The port of the master that serves key's slot (from CLUSTER NODES)."""
        slot = self.keyslot(key)
        for line in cli(self.ports[0], "CLUSTER", "NODES").splitlines():
            fields = line.split()
            if len(fields) < 9 or "master" not in fields[2]:
                continue
            port = int(fields[1].split("@", 1)[0].rsplit(":", 1)[1])
            for span in fields[8:]:
                low, _, high = span.partition("-")
                if low.isdigit() and int(low) <= slot <= int(high or low):
                    return port
        raise RuntimeError(f"no node serves slot {slot}")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def start_cluster(work: Path, masters: int = 3) -> Cluster:
    cluster = Cluster(work)
    try:
        for i in range(masters):
            port = free_port(with_bus=True)
            cluster.ports.append(port)
            cluster.nodes.append(
                start_server(
                    work,
                    port,
                    f"cluster-{i}",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    str(work / f"cluster-{i}" / "nodes.conf"),
                    "--cluster-node-timeout",
                    "2000",
                )
            )
        done = subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(f"{HOST}:{p}" for p in cluster.ports),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout}{done.stderr}")
        _wait(
            "cluster_state:ok on every node",
            lambda: all(info_cluster(p).get("cluster_state") == "ok" for p in cluster.ports),
            30,
        )
        return cluster
    except BaseException:
        cluster.stop()
        raise


def info_cluster(port: int) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in cli(port, "CLUSTER", "INFO").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


@dataclass
class SentinelSetup:
    """A primary, one replica and three Sentinels (quorum 2) on loopback."""

    work: Path
    servers: dict[int, processes.Proc] = field(default_factory=dict)  # port -> redis-server
    sentinel_ports: list[int] = field(default_factory=list)
    sentinels: list[processes.Proc] = field(default_factory=list)

    @property
    def url(self) -> str:
        return "redis+sentinel://" + ",".join(f"{HOST}:{p}" for p in self.sentinel_ports) + f"/{SERVICE}"

    def master_port(self) -> int:
        """The primary as the Sentinels see it (the majority's answer)."""
        votes: dict[int, int] = {}
        for port in self.sentinel_ports:
            reply = cli(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE, timeout=2).splitlines()
            if len(reply) == 2:
                votes[int(reply[1])] = votes.get(int(reply[1]), 0) + 1
        if not votes:
            raise RuntimeError("no sentinel answered")
        return max(votes, key=lambda p: votes[p])

    def replica_port(self) -> int:
        master = self.master_port()
        return next(p for p in self.servers if p != master)

    def sentinel_view(self, port: int) -> dict[str, str]:
        flat = cli(port, "SENTINEL", "MASTER", SERVICE, timeout=2).splitlines()
        return dict(zip(flat[::2], flat[1::2], strict=False))

    def wait_healthy(self, timeout: float = 30.0) -> None:
        """Every Sentinel agrees on the primary, sees one online replica and the two other Sentinels."""

        def ok() -> bool:
            try:
                master = self.master_port()
            except RuntimeError:
                return False
            replica = next((p for p in self.servers if p != master), None)
            if replica is None or info(replica, "replication").get("master_link_status") != "up":
                return False
            if info(master, "replication").get("role") != "master":
                return False
            for port in self.sentinel_ports:
                view = self.sentinel_view(port)
                if (
                    view.get("port") != str(master)
                    or view.get("num-slaves") != "1"
                    or view.get("num-other-sentinels") != "2"
                    or "down" in view.get("flags", "")
                ):
                    return False
                flat = cli(port, "SENTINEL", "REPLICAS", SERVICE, timeout=2).splitlines()
                seen = dict(zip(flat[::2], flat[1::2], strict=False))
                if seen.get("port") != str(replica) or "down" in seen.get("flags", "down"):
                    return False
            return True

        _wait("the sentinels to see the primary, its replica and each other", ok, timeout)

    def restart_as_replica(self, port: int) -> None:
        """Bring a stopped server back on its port as a replica of the current primary."""
        old = self.servers.get(port)
        if old is not None:
            old.stop()
        master = self.master_port()
        self.servers[port] = start_server(
            self.work, port, f"redis-{port}-{time.monotonic_ns()}", "--replicaof", HOST, str(master)
        )

    def stop(self) -> None:
        for proc in [*self.sentinels, *self.servers.values()]:
            if proc.alive() and _stopped(proc):
                proc.resume()
            proc.stop()


def _stopped(proc: processes.Proc) -> bool:
    try:
        state = Path(f"/proc/{proc.pid}/stat").read_text().split(") ", 1)[1][0]
    except (OSError, IndexError):
        return False
    return state == "T"


def start_sentinel_setup(work: Path, *, down_after_ms: int = 1000, failover_timeout_ms: int = 3000) -> SentinelSetup:
    setup = SentinelSetup(work)
    try:
        primary = free_port()
        setup.servers[primary] = start_server(work, primary, "primary")
        replica = free_port()
        setup.servers[replica] = start_server(work, replica, "replica", "--replicaof", HOST, str(primary))
        for i in range(3):
            port = free_port()
            sdir = work / f"sentinel-{i}"
            sdir.mkdir(parents=True, exist_ok=True)
            conf = sdir / "sentinel.conf"
            conf.write_text(
                "\n".join(
                    [
                        f"port {port}",
                        f"bind {HOST}",
                        "protected-mode no",
                        "daemonize no",
                        f"dir {sdir}",
                        f"sentinel monitor {SERVICE} {HOST} {primary} 2",
                        f"sentinel down-after-milliseconds {SERVICE} {down_after_ms}",
                        f"sentinel failover-timeout {SERVICE} {failover_timeout_ms}",
                        f"sentinel parallel-syncs {SERVICE} 1",
                        "",
                    ]
                )
            )
            log_path = sdir / "sentinel.log"
            binary = shutil.which("redis-sentinel")
            cmd = [binary, str(conf)] if binary else ["redis-server", str(conf), "--sentinel"]
            popen = subprocess.Popen(cmd, stdout=open(log_path, "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
            setup.sentinel_ports.append(port)
            setup.sentinels.append(processes.Proc(popen, {"port": port}, log_path))
        setup.wait_healthy()
        return setup
    except BaseException:
        setup.stop()
        raise
