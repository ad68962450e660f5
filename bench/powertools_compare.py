"""The same race against Countersign and against AWS Powertools' idempotency utility, side by side.

    .venv/bin/python bench/powertools_compare.py [--seconds 5] [--concurrency 16] [--venv DIR]

Powertools for AWS Lambda (Python) is installed from PyPI (`aws-lambda-powertools[redis,aws-sdk]`) into a
separate virtual environment in the temp dir (--venv; created on first use, reused after). Both
sides get the same redis-server (unix socket) and the same example todo service (loopback), and
the same work: a function that POSTs /todos with an Idempotency-Key.

1. race: 50 concurrent duplicate calls of one action (Powertools: 50 threads calling one
   @idempotent_function with the same payload, released by a barrier; Countersign: 50 concurrent
   Confirms of one card over gRPC). Run with the downstream answering at once, and with the
   downstream taking 300 ms (so the duplicates arrive while the first call is in flight).
   Counted: POSTs that reached the todo service for that key, rows created, and what each of the
   50 callers got.
2. stream: unique calls back to back for --seconds at --concurrency (Powertools: threads; the bare
   function without the decorator as the floor; Countersign: Confirm of cards Invoked beforehand,
   and Invoke+Confirm pairs).

Powertools runs inside the caller's process: no network hop, no card, no policy, no MAC, no audit;
the sidecar is a separate process reached over gRPC. The numbers say what that costs, not which is
"better". Results: bench/results/powertools_compare-<UTC>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc

from countersign.testing import processes
from countersign.testing.faults import pct
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent

RESULTS = ROOT / "bench" / "results"
# the idempotency package imports its DynamoDB layer too, so boto3 (aws-sdk; in every Lambda runtime) comes along
PACKAGE = "aws-lambda-powertools[redis,aws-sdk]"
DUPLICATES = 50

# Runs in the Powertools virtual environment; prints one JSON document.
RUNNER = r"""
import http.client, json, sys, threading, time, uuid, warnings
from collections import Counter
warnings.simplefilter("ignore")
import redis
from importlib.metadata import version
from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent_function
from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError
from aws_lambda_powertools.utilities.idempotency.persistence.redis import RedisCachePersistenceLayer

args = json.loads(sys.argv[1])
host, port = args["todo"].split(":")
layer = RedisCachePersistenceLayer(client=redis.Redis(unix_socket_path=args["socket"]))
config = IdempotencyConfig(event_key_jmespath="key", expires_after_seconds=3600)
local = threading.local()

def post(order):
    conn = getattr(local, "conn", None)
    if conn is None:
        conn = local.conn = http.client.HTTPConnection(host, int(port), timeout=10)
    body = json.dumps({"title": order["title"]})
    conn.request("POST", "/todos", body, {"Content-Type": "application/json",
                                          "Idempotency-Key": '"' + order["key"] + '"'})
    resp = conn.getresponse()
    data = resp.read()
    return {"status": resp.status, "body": json.loads(data)}

@idempotent_function(data_keyword_argument="order", config=config, persistence_store=layer)
def create_todo(order):
    local.executed = True
    return post(order)

def race(key):
    outcomes, lock = Counter(), threading.Lock()
    barrier = threading.Barrier(args["duplicates"])
    def one():
        local.executed = False
        barrier.wait()
        try:
            result = create_todo(order={"key": key, "title": "race " + key})
            kind = "executed" if local.executed else "stored result returned"
            kind += f" ({result['status']})"
        except IdempotencyAlreadyInProgressError:
            kind = "IdempotencyAlreadyInProgressError"
        except Exception as exc:
            kind = type(exc).__name__
        with lock:
            outcomes[kind] += 1
    threads = [threading.Thread(target=one) for _ in range(args["duplicates"])]
    start = time.perf_counter()
    for t in threads: t.start()
    for t in threads: t.join()
    return {"key": key, "outcomes": dict(outcomes), "seconds": round(time.perf_counter() - start, 4)}

def stream(fn, seconds, concurrency):
    lat, errors, lock = [], Counter(), threading.Lock()
    deadline = time.perf_counter() + seconds
    def worker():
        while time.perf_counter() < deadline:
            order = {"key": uuid.uuid4().hex, "title": "stream"}
            t0 = time.perf_counter()
            try:
                result = fn(order=order)
                ok = result["status"] == 201
            except Exception as exc:
                ok = False
                with lock: errors[type(exc).__name__] += 1
            if ok:
                with lock: lat.append(time.perf_counter() - t0)
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    start = time.perf_counter()
    for t in threads: t.start()
    for t in threads: t.join()
    return {"calls": len(lat), "seconds": time.perf_counter() - start, "latencies_s": lat, "errors": dict(errors)}

mode = args["mode"]
if mode == "race":
    out = race(args["key"])
elif mode == "stream":
    fn = create_todo if args["decorated"] else (lambda order: post(order))
    out = stream(fn, args["seconds"], args["concurrency"])
out["powertools"] = version("aws-lambda-powertools")
out["redis_py"] = version("redis")
print(json.dumps(out))
"""


def ensure_venv(path: Path) -> Path:
    python = path / "bin" / "python"
    stamp = path / ".countersign-installed"
    if not stamp.exists() or stamp.read_text() != PACKAGE:
        print(f"creating {path} and installing {PACKAGE} from PyPI (once)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(path)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", PACKAGE], check=True, timeout=600)
        stamp.write_text(PACKAGE)
    return python


CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy_s() -> float:
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / CLK_TCK


class Others:
    """CPU that processes outside this benchmark used during a window, % of the machine."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids

    def __enter__(self) -> Others:
        self.t0, self.m0 = time.monotonic(), machine_busy_s()
        self.o0 = sum(proc_cpu_s(p) for p in self.pids) + _children_s()
        return self

    def __exit__(self, *exc: object) -> None:
        ours = sum(proc_cpu_s(p) for p in self.pids) + _children_s() - self.o0
        busy = machine_busy_s() - self.m0
        self.pct = max(0.0, 100 * (busy - ours) / ((time.monotonic() - self.t0) * (os.cpu_count() or 1)))


def _children_s() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the Powertools runner, once it has exited
    return usage.ru_utime + usage.ru_stime


def run_powertools(python: Path, runner: Path, **params: Any) -> dict[str, Any]:
    done = subprocess.run(
        [str(python), str(runner), json.dumps(params)],
        capture_output=True,
        text=True,
        timeout=params.get("seconds", 0) + 120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"powertools runner failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


class Todo:
    def __init__(self, url: str, db: str) -> None:
        self.url, self.db = url, db

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def posts(self, key: str) -> int:
        return sum(
            1
            for e in self._call("GET", "/_test/log")["requests"]
            if e["idempotency_key"] == key and e["method"] == "POST" and e["path"] == "/todos"
        )

    def rows(self, title: str) -> int:
        """Rows with that title in the service's own SQLite file, whoever owns them."""
        db = sqlite3.connect(self.db, timeout=10)
        try:
            return int(db.execute("SELECT COUNT(*) FROM todos WHERE title = ?", (title,)).fetchone()[0])
        finally:
            db.close()

    def slow_next_post(self, seconds: float) -> None:
        self._call(
            "POST",
            "/_test/faults",
            {"path": "/todos", "method": "POST", "mode": "hang_before_commit", "seconds": seconds, "times": 1},
        )

    def clear(self) -> None:
        self._call("DELETE", "/_test/faults")
        self._call("DELETE", "/_test/log")


def context(request_id: str) -> common_pb2.CallContext:
    return common_pb2.CallContext(
        tenant_id="bench",
        actor_id="cmp",
        subject_id="cmp",
        session_id="cmp",
        request_id=request_id,
        role="user",
        locale="en",
    )


async def countersign_race(
    stub: gateway_pb2_grpc.ToolGatewayServiceStub, wait_ms: int, todo: Todo, slow: float
) -> dict[str, Any]:
    ctx = context(uuid.uuid4().hex)
    title = "race " + ctx.request_id
    card = (
        await stub.Invoke(
            gateway_pb2.InvokeRequest(context=ctx, tool_name="create_todo", arguments_json=json.dumps({"title": title}))
        )
    ).confirmation
    if slow:
        await asyncio.to_thread(todo.slow_next_post, slow)

    async def one() -> str:
        try:
            reply = await stub.Confirm(
                gateway_pb2.ConfirmRequest(context=ctx, token=card.token, wait_ms=wait_ms), timeout=10
            )
        except grpc.aio.AioRpcError as err:
            return f"error {err.code().name}"
        state = common_pb2.ActionState.Name(reply.action.state).removeprefix("ACTION_STATE_")
        return f"replayed {state}" if reply.action.replayed else f"executed {state}"

    start = time.perf_counter()
    answers = await asyncio.gather(*(one() for _ in range(DUPLICATES)))
    seconds = time.perf_counter() - start
    await asyncio.sleep(0.5 + slow)
    return {"key": card.action_id, "title": title, "outcomes": dict(Counter(answers)), "seconds": round(seconds, 4)}


async def countersign_stream(
    stub: gateway_pb2_grpc.ToolGatewayServiceStub, seconds: float, concurrency: int, pairs: bool, ours: list[int]
) -> dict[str, Any]:
    cards: list[tuple[common_pb2.CallContext, str]] = []
    if not pairs:  # cards Invoked before the timed window
        need = int(seconds * 1200) + 200

        async def issue() -> None:
            while len(cards) < need:
                ctx = context(uuid.uuid4().hex)
                reply = await stub.Invoke(
                    gateway_pb2.InvokeRequest(
                        context=ctx, tool_name="create_todo", arguments_json=json.dumps({"title": "stream"})
                    )
                )
                cards.append((ctx, reply.confirmation.token))

        await asyncio.gather(*(issue() for _ in range(16)))
    lat: list[float] = []
    errors: Counter[str] = Counter()
    starved = False
    start = time.perf_counter()
    deadline = start + seconds

    async def worker() -> None:
        nonlocal starved
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            try:
                if pairs:
                    ctx = context(uuid.uuid4().hex)
                    reply = await stub.Invoke(
                        gateway_pb2.InvokeRequest(
                            context=ctx, tool_name="create_todo", arguments_json=json.dumps({"title": "stream"})
                        )
                    )
                    token = reply.confirmation.token
                else:
                    if not cards:
                        starved = True
                        return
                    ctx, token = cards.pop()
                done = await stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx, token=token))
                if done.action.state != common_pb2.ACTION_STATE_SUCCEEDED:
                    errors[common_pb2.ActionState.Name(done.action.state)] += 1
                    continue
            except grpc.aio.AioRpcError as err:
                errors[err.code().name] += 1
                continue
            lat.append(time.perf_counter() - t0)

    with Others(ours) as others:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {
        "calls": len(lat),
        "seconds": time.perf_counter() - start,
        "latencies_s": lat,
        "errors": dict(errors),
        "starved": starved,
        "others_pct": round(others.pct, 1),
    }


def stream_row(label: str, r: dict[str, Any]) -> dict[str, Any]:
    lat = r["latencies_s"]
    return {
        "series": label,
        "calls": r["calls"],
        "per_s": round(r["calls"] / r["seconds"], 1),
        "p50_ms": round(1000 * pct(lat, 0.5), 2),
        "p99_ms": round(1000 * pct(lat, 0.99), 2),
        "errors": r["errors"],
        "starved": r.get("starved", False),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of each unique-call stream")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--slow", type=float, default=0.3, help="downstream delay of the second race, seconds")
    parser.add_argument(
        "--venv",
        default=str(Path(tempfile.gettempdir()) / "countersign-powertools-venv"),
        help="where the Powertools virtual environment lives (created once)",
    )
    args = parser.parse_args(argv)
    started = datetime.now(UTC)
    python = ensure_venv(Path(args.venv))
    work = processes.workdir("countersign-powertools-")
    runner = work / "powertools_runner.py"
    runner.write_text(RUNNER)
    procs: list[processes.Proc] = []
    races: list[dict[str, Any]] = []
    streams: list[dict[str, Any]] = []
    try:
        redis = processes.start_redis(work)
        procs.append(redis)
        todo_proc = processes.start_todo_service(work)
        procs.append(todo_proc)
        sidecar = processes.start_sidecar(
            work,
            processes.write_registry(work, todo_proc.info["url"]),
            redis_url=redis.info["url"],
            keys=processes.write_keys(work),
            flags=["--log-level", "warning"],
        )
        procs.append(sidecar)
        todo = Todo(todo_proc.info["url"], str(next(work.glob("todos-*.db"))))
        common = {
            "socket": redis.info["socket"],
            "todo": f"127.0.0.1:{todo_proc.info['port']}",
            "duplicates": DUPLICATES,
        }
        print(
            f"pids: redis {redis.pid}, todo {todo_proc.pid}, sidecar {sidecar.pid}; powertools venv {args.venv}",
            flush=True,
        )

        for slow in (0.0, args.slow):
            todo.clear()
            key = uuid.uuid4().hex
            if slow:
                todo.slow_next_post(slow)
            r = run_powertools(python, runner, mode="race", key=key, **common)
            time.sleep(0.2 + slow)
            races.append(
                {
                    "side": f"Powertools {r['powertools']} (RedisCachePersistenceLayer)",
                    "downstream_s": slow,
                    "outcomes": r["outcomes"],
                    "posts": todo.posts(key),
                    "rows": todo.rows("race " + key),
                    "seconds": r["seconds"],
                }
            )
            print(f"  race powertools downstream {slow:g}s: {r['outcomes']}", flush=True)

        async def cs_races() -> None:
            async with grpc.aio.insecure_channel(sidecar.info["grpc"]) as channel:
                stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
                for slow in (0.0, args.slow):
                    for wait_ms in (0,) if not slow else (0, 2000):
                        await asyncio.to_thread(todo.clear)
                        r = await countersign_race(stub, wait_ms, todo, slow)
                        races.append(
                            {
                                "side": f"Countersign (Confirm, wait_ms={wait_ms})",
                                "downstream_s": slow,
                                "outcomes": r["outcomes"],
                                "posts": await asyncio.to_thread(todo.posts, r["key"]),
                                "rows": await asyncio.to_thread(todo.rows, r["title"]),
                                "seconds": r["seconds"],
                            }
                        )
                        print(f"  race countersign downstream {slow:g}s wait_ms={wait_ms}: {r['outcomes']}", flush=True)

        asyncio.run(cs_races())
        todo.clear()

        ours = [redis.pid, todo_proc.pid, sidecar.pid, os.getpid()]
        for decorated in (False, True):
            with Others(ours) as others:
                r = run_powertools(
                    python,
                    runner,
                    mode="stream",
                    decorated=decorated,
                    seconds=args.seconds,
                    concurrency=args.concurrency,
                    **common,
                )
            label = (
                "Powertools @idempotent_function (in process)"
                if decorated
                else "bare function, no idempotency (in process)"
            )
            streams.append({**stream_row(label, r), "others_pct": round(others.pct, 1)})
            print(f"  stream {label}: {streams[-1]['per_s']}/s", flush=True)
            todo.clear()

        async def cs_streams() -> None:
            async with grpc.aio.insecure_channel(sidecar.info["grpc"]) as channel:
                stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
                for pairs in (False, True):
                    r = await countersign_stream(stub, args.seconds, args.concurrency, pairs, ours)
                    label = (
                        "Countersign Invoke+Confirm (gRPC hop)"
                        if pairs
                        else "Countersign Confirm of a prepared card (gRPC hop)"
                    )
                    streams.append({**stream_row(label, r), "others_pct": r["others_pct"]})
                    print(f"  stream {label}: {streams[-1]['per_s']}/s", flush=True)
                    await asyncio.to_thread(todo.clear)

        asyncio.run(cs_streams())
    finally:
        for proc in reversed(procs):
            proc.stop()

    print(
        f"\nrace: {DUPLICATES} concurrent duplicate calls of one action; what reached the todo service and what "
        "each caller got"
    )
    head = f"{'side':<52}{'downstream':>11}{'POSTs':>7}{'rows':>6}  callers got"
    print(head)
    print("-" * 120)
    for r in races:
        got = ", ".join(f"{n} {k}" for k, n in sorted(r["outcomes"].items(), key=lambda kv: -kv[1]))
        print(f"{r['side']:<52}{r['downstream_s']:>10g}s{r['posts']:>7}{r['rows']:>6}  {got}")
    print(f"\nstream of unique calls, concurrency {args.concurrency}, {args.seconds:g} s each")
    head = f"{'series':<52}{'calls':>7}{'calls/s':>9}{'p50 ms':>8}{'p99 ms':>8}{'others%':>8}  errors"
    print(head)
    print("-" * len(head))
    for s in streams:
        print(
            f"{s['series']:<52}{s['calls']:>7}{s['per_s']:>9.1f}{s['p50_ms']:>8.2f}{s['p99_ms']:>8.2f}"
            f"{s['others_pct']:>8.0f}  "
            f"{s['errors'] or ''}{' (ran out of cards)' if s['starved'] else ''}"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"powertools_compare-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(
        json.dumps(
            {
                "started_utc": started.isoformat(),
                "command": " ".join([Path(sys.executable).name, *sys.argv]),
                "settings": {
                    "seconds": args.seconds,
                    "concurrency": args.concurrency,
                    "duplicates": DUPLICATES,
                    "slow_downstream_s": args.slow,
                    "package": PACKAGE,
                },
                "machine": {
                    "cpus": os.cpu_count(),
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                    "loadavg_end": os.getloadavg(),
                },
                "races": races,
                "streams": streams,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"results: {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
