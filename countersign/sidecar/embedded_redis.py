"""The embedded default: a private redis-server on a unix socket in a temporary directory.

For trying Countersign on one machine. It keeps nothing on disk and lives as long as the sidecar;
production points --redis-url at a real Redis (or Sentinel, or Cluster).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from countersign.errors import SettingsError


class EmbeddedRedis:
    def __init__(self, binary: str = "redis-server") -> None:
        path = shutil.which(binary)
        if path is None:
            raise SettingsError(
                "no --redis-url was given and no redis-server binary is on PATH; install it "
                "(Debian/Ubuntu: apt-get install redis-server) or point --redis-url at a Redis"
            )
        self.binary = path
        self.dir = Path(tempfile.mkdtemp(prefix="countersign-redis-"))
        self.socket = self.dir / "redis.sock"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                "0",
                "--unixsocket",
                str(self.socket),
                "--unixsocketperm",
                "700",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                raise SettingsError(f"the embedded redis-server exited at start: {err.strip()[:300]}")
            if self._ping():
                return self
            time.sleep(0.02)
        self.stop()
        raise SettingsError("the embedded redis-server did not answer within 10 s")

    def _ping(self) -> bool:
        if not self.socket.exists():
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(0.5)
                s.connect(str(self.socket))
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)
