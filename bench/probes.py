"""What one health probe costs: the exec probe of before against the httpGet probe of now.

    .venv/bin/python bench/probes.py [--runs 20] [--spacing 1.1]

Starts redis-server, the example todo service and one sidecar (stopped by PID at the end), then runs each
probe --runs times, --spacing seconds apart (more than the 1 s for which /readyz reuses an answer, so each
probe does its real check, a Redis PING included, as the kubelet's probes 10 s apart do):

  exec     the image's countersign-healthcheck (deploy/docker/healthcheck.py: a Python process that imports
           grpc and calls grpc.health.v1 Check), what the chart's exec probes ran every 10 s;
  curl     `curl -sf http://<metrics>/readyz`: an httpGet probe done by a separate process (an upper bound:
           the kubelet's httpGet runs inside the kubelet and spawns nothing);
  http     GET /readyz from this process (what the kubelet's in-process HTTP client costs the pod: only the
           sidecar's side).

Per probe: the CPU of the probe process (user+sys of the children, from getrusage), its peak RSS, the
sidecar's own CPU (from /proc/<pid>/stat) and the wall time. Also the pod's continuous cost of two probes
(liveness + readiness) every 10 s, in millicores. Results: bench/results/probes-<UTC>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from countersign.testing import processes

ROOT = Path(__file__).resolve().parent.parent

TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def children_cpu() -> tuple[float, int]:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def measure(
    name: str, probe: Callable[[], None], runs: int, spacing: float, sidecar_pid: int
) -> dict[str, float | str]:
    probe()  # warm: connections, page cache
    client = side = wall = 0.0
    for _ in range(runs):
        time.sleep(spacing)
        child_before, _ = children_cpu()
        side_before = proc_cpu(sidecar_pid)
        started = time.perf_counter()
        probe()
        wall += time.perf_counter() - started
        side += proc_cpu(sidecar_pid) - side_before
        client += children_cpu()[0] - child_before
    child_rss = children_cpu()[1]
    side, client, wall = side / runs, client / runs, wall
    return {
        "probe": name,
        "client_cpu_ms": round(client * 1000, 2),
        "sidecar_cpu_ms": round(side * 1000, 2),
        "wall_ms": round(wall / runs * 1000, 2),
        "client_peak_rss_mb": round(child_rss / 1024, 1) if name != "http" else 0.0,
        "pod_millicores_2_probes_per_10s": round((client + side) * 0.2 * 1000, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--spacing", type=float, default=1.1)
    args = parser.parse_args()
    work = processes.workdir("countersign-probes-")
    redis, todo, registry, keys = processes.start_backends(work)
    sidecar = None
    try:
        sidecar = processes.start_sidecar(
            work, registry, redis_url=redis.info["url"], keys=keys, flags=["--log-level", "warning"]
        )
        grpc_addr, metrics = sidecar.info["grpc"], sidecar.info["metrics"]
        healthcheck = [sys.executable, str(ROOT / "deploy" / "docker" / "healthcheck.py"), "--address", grpc_addr]

        def exec_probe() -> None:
            subprocess.run(healthcheck, check=True)

        def curl_probe() -> None:
            subprocess.run(["curl", "-sf", "-o", "/dev/null", f"http://{metrics}/readyz"], check=True)

        def http_probe() -> None:
            with urllib.request.urlopen(f"http://{metrics}/readyz", timeout=10) as resp:
                resp.read()

        # the exec probe last: getrusage's peak RSS of the children is a maximum over all of them
        rows = [
            measure(name, probe, args.runs, args.spacing, sidecar.pid)
            for name, probe in (("http", http_probe), ("curl", curl_probe), ("exec", exec_probe))
        ]
    finally:
        for proc in (sidecar, todo, redis):
            if proc is not None:
                proc.stop()
    for row in rows:
        print(json.dumps(row))
    out = ROOT / "bench" / "results" / f"probes-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(
        json.dumps(
            {
                "runs": args.runs,
                "spacing_s": args.spacing,
                "machine": platform.platform(),
                "cpus": os.cpu_count(),
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"written {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
