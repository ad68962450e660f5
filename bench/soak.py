"""Soak with faults: thousands of writes through two sidecars sharing one Redis, then a checker.

    .venv/bin/python bench/soak.py [--seconds 60] [--writes N] [--workers 16]

Starts, as their own processes on loopback: redis-server (unix socket, AOF fsync always, so a
restart keeps what it acknowledged), the example todo service with a SQLite file, a TCP proxy
(countersign/testing/faults.py) in front of the todo service's execute/lookup/fence endpoints, and two sidecars
(--lease 2s --downstream-deadline 1s --reconcile-interval 500ms --reconcile-window 20s, one keys
file). Agent workers (grpc.aio) Invoke and Confirm writes over both sidecars, with duplicate
confirms (concurrent, and after settle) and model retries (the same Invoke in the same turn), while
a fault schedule runs: kill -9 of each sidecar (restarted), Redis paused (SIGSTOP) past a lease,
Redis restarted, SCRIPT FLUSH, the proxy delaying requests past the deadline, dropping answers,
resetting before forwarding, and cutting every connection. Two restarts change what the sidecars run
with: a key rotation (sidecar 0 restarted with another active key: from then on the two sidecars
disagree on `active`, and must still give one call one action), and a registry change (sidecar 1
restarted with a registry that no longer has `create_task`, the tool a fifth of the writes use: it
refuses those, and its reconciler must leave their unknowns to sidecar 0).

Then reconciliation is let finish (background reconcilers first, then the Reconcile RPC), and a
checker compares the todo service's own SQLite records and request log with every action's
outcome. Exit 1 when an invariant fails. Results: bench/results/soak-<UTC>.json.
Every loop is bounded in time and count; every process is stopped by its PID.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shutil
import sqlite3
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import grpc

from countersign.testing import processes
from countersign.testing.faults import ProxyControl, free_port
from countersign.testing.processes import PersistentRedis
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent

RESULTS = ROOT / "bench" / "results"
T = TypeVar("T")
S = common_pb2
TERMINAL = {
    S.ACTION_STATE_SUCCEEDED,
    S.ACTION_STATE_FAILED,
    S.ACTION_STATE_NEEDS_MANUAL_REVIEW,
    S.ACTION_STATE_REJECTED,
    S.ACTION_STATE_EXPIRED,
    S.ACTION_STATE_COMPENSATED,
}
OPEN = {S.ACTION_STATE_UNKNOWN, S.ACTION_STATE_RUNNING}
RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,
}
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
    ("grpc.enable_retries", 0),
]
SIDECAR_FLAGS = [
    "--lease",
    "2s",
    "--downstream-deadline",
    "1s",
    "--reconcile-interval",
    "500ms",
    "--log-level",
    "warning",
]


def name(state: int) -> str:
    return S.ActionState.Name(state).removeprefix("ACTION_STATE_")  # type: ignore[arg-type]


def canon(action: common_pb2.Action, replayed: bool = True) -> bytes:
    """The action's bytes with the replayed flag set as given (GetAction answers replayed=false)."""
    copy = common_pb2.Action()
    copy.CopyFrom(action)
    copy.replayed = replayed
    return copy.SerializeToString(deterministic=True)


@dataclass
class Answer:
    at: float
    action: common_pb2.Action
    phase: str  # first | concurrent | after_settle | retry | final


@dataclass
class Write:
    index: int
    title: str
    context: common_pb2.CallContext
    plan: str = "single"  # single | concurrent | after_settle
    copies: int = 1  # deliberate Confirms of the card
    token: str = ""
    action_id: str = ""
    confirms_sent: int = 0
    settled_before_dups: bool = False
    answers: list[Answer] = field(default_factory=list)
    invoke_replays: list[common_pb2.Action] = field(default_factory=list)
    model_retries: int = 0
    model_retry_mismatch: list[str] = field(default_factory=list)
    tool: str = "create_todo"
    refused_by_registry: int = 0  # create_task Invokes a sidecar without the tool refused (a Refusal)


TOOLS = ("create_todo", "create_task")  # create_task: the same service, a tool the registry change removes


def soak_registries(work: Path, proxied: str, direct: str) -> tuple[Path, Path]:
    """The registry the soak starts with (create_todo and create_task, both through the proxy; prepare
    straight to the service), and the one sidecar 1 is restarted with (create_task gone, a new policy
    version: a rolling registry change)."""
    import copy

    import yaml

    text = processes.write_registry(work, proxied, **{f"{proxied}/todos/prepare": f"{direct}/todos/prepare"})
    doc = yaml.safe_load(text.read_text(encoding="utf-8"))
    todo_cap = next(c for c in doc["capabilities"] if c["tool"] == "create_todo")
    todo_tool = next(t for t in doc["tools"] if t["name"] == "create_todo")
    doc["capabilities"].append({**copy.deepcopy(todo_cap), "id": "task.create", "tool": "create_task"})
    doc["tools"].append({**copy.deepcopy(todo_tool), "name": "create_task", "capability": "task.create"})
    before = work / "registry-soak.yaml"
    before.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    doc["policy_version"] = doc["policy_version"] + "-soak"
    doc["tools"] = [t for t in doc["tools"] if t["name"] != "create_task"]
    cap = next(c for c in doc["capabilities"] if c["id"] == "task.create")
    cap.update(status="planned", guidance={"en": "Tasks are todos now."})
    for key in ("risk", "confirmation"):
        cap.pop(key, None)
    after = work / "registry-soak-changed.yaml"
    after.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    return before, after


class Sidecars:
    """The two sidecars on fixed loopback ports (a restart keeps its address), and one channel to each. Each
    has its own registry and keys file, so a restart after a rotation or registry change keeps them."""

    def __init__(self, work: Path, registry: Path, keys: Path, redis_url: str, window: str) -> None:
        self.work, self.redis_url = work, redis_url
        self.registries, self.keys = [registry, registry], [keys, keys]
        self.window = window
        self.addresses = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
        self.procs: list[processes.Proc | None] = [None, None]
        self.all_procs: list[processes.Proc] = []
        self.channels: list[grpc.aio.Channel] = []
        self.stubs: list[gateway_pb2_grpc.ToolGatewayServiceStub] = []
        self.down: set[int] = set()

    def start(self, i: int) -> processes.Proc:
        proc = processes.start_sidecar(
            self.work,
            self.registries[i],
            redis_url=self.redis_url,
            keys=self.keys[i],
            flags=[*SIDECAR_FLAGS, "--reconcile-window", self.window],
            listen=self.addresses[i],
        )
        self.procs[i] = proc
        self.all_procs.append(proc)
        return proc

    def open_channels(self) -> None:
        self.channels = [grpc.aio.insecure_channel(a, options=CHANNEL_OPTIONS) for a in self.addresses]
        self.stubs = [gateway_pb2_grpc.ToolGatewayServiceStub(c) for c in self.channels]

    def pick(self, rng: random.Random, avoid: int | None = None) -> tuple[int, gateway_pb2_grpc.ToolGatewayServiceStub]:
        choices = (
            [i for i in range(len(self.stubs)) if i not in self.down and i != avoid]
            or [i for i in range(len(self.stubs)) if i != avoid]
            or [0]
        )
        i = rng.choice(choices)
        return i, self.stubs[i]

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()

    def stop_all(self) -> None:
        for proc in self.all_procs:
            proc.stop()


class Soak:
    def __init__(
        self, args: argparse.Namespace, sidecars: Sidecars, redis: PersistentRedis, proxy: ProxyControl, todo_url: str
    ) -> None:
        self.args, self.sidecars, self.redis, self.proxy, self.todo_url = args, sidecars, redis, proxy, todo_url
        self.run_id = uuid.uuid4().hex[:8]
        self.writes: list[Write] = []
        self.errors: Counter[str] = Counter()
        self.error_seconds: Counter[int] = Counter()  # second of the run -> errors the agents saw
        self.invoke_failed = 0
        self.refused_by_registry = 0
        self.faults: list[dict[str, Any]] = []
        self.t0 = 0.0
        self.next_index = 0
        self.stop_at = 0.0
        self.later_tasks: set[asyncio.Task[None]] = set()
        self.later_slots = asyncio.Semaphore(256)

    # -- calls that tolerate faults ------------------------------------------------------------

    async def call(
        self,
        rng: random.Random,
        what: str,
        fn: Callable[[gateway_pb2_grpc.ToolGatewayServiceStub], Awaitable[T]],
        attempts: int = 8,
        budget: float = 12.0,
    ) -> T | None:
        """fn against a sidecar; on a retryable status wait a little and try the other one. None: gave up."""
        deadline = time.monotonic() + budget
        avoid = None
        delay = 0.05
        for _ in range(attempts):
            i, stub = self.sidecars.pick(rng, avoid)
            try:
                return await fn(stub)
            except grpc.aio.AioRpcError as err:
                self.errors[f"{what} {err.code().name}"] += 1
                self.error_seconds[int(time.monotonic() - self.t0)] += 1
                if err.code() not in RETRYABLE or time.monotonic() + delay > deadline:
                    if err.code() not in RETRYABLE:
                        self.errors[f"{what} {err.code().name}: {err.details()[:80]}"] += 1
                    return None
                avoid = i
                await asyncio.sleep(delay * (0.5 + rng.random()))
                delay = min(delay * 2, 1.0)
        return None

    async def invoke(self, rng: random.Random, w: Write) -> gateway_pb2.InvokeResponse | None:
        request = gateway_pb2.InvokeRequest(
            context=w.context, tool_name=w.tool, arguments_json=json.dumps({"title": w.title}, ensure_ascii=False)
        )
        return await self.call(rng, "Invoke", lambda stub: stub.Invoke(request, timeout=4))

    async def confirm(self, rng: random.Random, w: Write, phase: str, wait_ms: int = 0) -> None:
        request = gateway_pb2.ConfirmRequest(context=w.context, token=w.token, wait_ms=wait_ms)
        w.confirms_sent += 1
        reply = await self.call(rng, "Confirm", lambda stub: stub.Confirm(request, timeout=6))
        if reply is not None:
            w.answers.append(Answer(time.monotonic(), reply.action, phase))

    async def get(self, rng: random.Random, w: Write) -> common_pb2.Action | None:
        request = gateway_pb2.GetActionRequest(context=w.context, action_id=w.action_id)
        reply = await self.call(rng, "GetAction", lambda stub: stub.GetAction(request, timeout=3), budget=4)
        return None if reply is None else reply.action

    # -- one agent turn with a write -----------------------------------------------------------

    async def one_write(self, rng: random.Random, worker: int, index: int) -> None:
        ctx = common_pb2.CallContext(
            tenant_id="t1",
            actor_id=f"user{worker % 8}",
            subject_id=f"user{worker % 8}",
            session_id=f"soak-{self.run_id}-{worker}",
            request_id=f"{self.run_id}-{index}",
            role="user",
            locale="zh-CN",
        )
        w = Write(index, f"soak {self.run_id} #{index}", ctx, tool=TOOLS[rng.random() < 0.2])
        r = rng.random()
        if r < 0.20:
            w.plan, w.copies = "concurrent", rng.randint(2, 5)
        elif r < 0.40:
            w.plan, w.copies = "after_settle", rng.randint(2, 5)
        first = await self.invoke(rng, w)
        if first is not None and first.WhichOneof("outcome") == "refusal":
            self.refused_by_registry += 1  # create_task at the sidecar whose registry dropped it
            return
        if first is None or first.WhichOneof("outcome") not in ("confirmation", "replay"):
            self.invoke_failed += 1
            return
        if first.WhichOneof("outcome") == "replay":  # an earlier attempt was issued and claimed: odd
            self.errors["Invoke answered replay on a first turn"] += 1
            return
        w.token, w.action_id = first.confirmation.token, first.confirmation.action_id
        self.writes.append(w)
        if rng.random() < 0.25:  # the model repeats its call in the same turn
            again = await self.invoke(rng, w)
            if again is not None and again.WhichOneof("outcome") == "refusal":
                w.refused_by_registry += 1
            elif again is not None:
                w.model_retries += 1
                if again.WhichOneof("outcome") != "confirmation" or again.confirmation.token != w.token:
                    w.model_retry_mismatch.append(f"before confirm: {again.WhichOneof('outcome')}")
        if w.plan == "concurrent":
            await asyncio.gather(
                *(self.confirm(rng, w, "concurrent", rng.choice((0, 0, 1500))) for _ in range(w.copies))
            )
        else:
            await self.confirm(rng, w, "first")
        if w.plan == "after_settle" or rng.random() < 0.15:
            # the user clicks again later, or the model calls again after the write: the agent moves on
            task = asyncio.create_task(self.later(random.Random(rng.random()), w))
            self.later_tasks.add(task)
            task.add_done_callback(self.later_tasks.discard)

    async def later(self, rng: random.Random, w: Write) -> None:
        """After the write settled: the planned duplicate Confirms, or the model's Invoke once more."""
        async with self.later_slots:
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline:
                action = await self.get(rng, w)
                if action is not None and action.state in TERMINAL:
                    w.settled_before_dups = True
                    break
                await asyncio.sleep(0.2)
            if w.plan == "after_settle":
                for _ in range(w.copies - 1):
                    await self.confirm(rng, w, "after_settle")
                if rng.random() >= 0.15:
                    return
            again = await self.invoke(rng, w)
            if again is not None and again.WhichOneof("outcome") == "refusal":
                w.refused_by_registry += 1
            elif again is not None:
                w.model_retries += 1
                kind = again.WhichOneof("outcome")
                if kind == "replay" and again.replay.action_id == w.action_id:
                    w.invoke_replays.append(again.replay)
                elif not (kind == "confirmation" and again.confirmation.token == w.token):
                    w.model_retry_mismatch.append(f"after confirm: {kind}")

    async def worker(self, worker: int) -> None:
        rng = random.Random(f"{self.run_id}-{worker}")
        while time.monotonic() < self.stop_at and self.next_index < self.args.writes:
            index = self.next_index
            self.next_index += 1
            await self.one_write(rng, worker, index)

    # -- the fault schedule --------------------------------------------------------------------

    def schedule(self) -> list[tuple[float, str]]:
        one = [
            (0.06, "proxy_delay"),
            (0.14, "proxy_cut"),
            (0.20, "proxy_drop_response"),
            (0.28, "redis_sigstop"),
            (0.35, "rotate_key_sidecar_0"),
            (0.40, "kill9_sidecar_0"),
            (0.50, "proxy_reset_before"),
            (0.56, "redis_restart"),
            (0.60, "registry_change_sidecar_1"),
            (0.64, "proxy_drop_response"),
            (0.69, "script_flush"),
            (0.72, "proxy_cut"),
            (0.78, "kill9_sidecar_1"),
            (0.88, "proxy_delay"),
        ]
        once = {"rotate_key_sidecar_0", "registry_change_sidecar_1"}  # the first cycle changes them for good
        cycles = max(1, round(self.args.seconds / 60))
        span = self.args.seconds / cycles
        return [(c * span + f * span, what) for c in range(cycles) for f, what in one if c == 0 or what not in once]

    async def fault(self, what: str) -> dict[str, Any]:
        info: dict[str, Any] = {}
        if what == "proxy_delay":
            info = await self.proxy.send(cmd="mode", mode="delay", seconds=3.0, delay=1.6)
            await asyncio.sleep(3.0)
        elif what == "proxy_drop_response":
            info = await self.proxy.send(cmd="mode", mode="drop_response", seconds=1.5)
            await asyncio.sleep(1.5)
        elif what == "proxy_reset_before":
            info = await self.proxy.send(cmd="mode", mode="reset_before", seconds=1.5)
            await asyncio.sleep(1.5)
        elif what == "proxy_cut":
            info = await self.proxy.send(cmd="cut")
        elif what == "redis_sigstop":
            # executions in flight (held 0.6 s by the proxy) try to settle while Redis is stopped
            pause = 3.5  # the lease is 2 s
            await self.proxy.send(cmd="mode", mode="delay", seconds=1.0, delay=0.6)
            await asyncio.sleep(0.3)
            self.redis.pause()
            try:
                await asyncio.sleep(pause)
            finally:
                self.redis.resume()
            info = {"paused_s": pause}
        elif what == "redis_restart":
            start = time.monotonic()
            await asyncio.to_thread(self.redis.restart)
            info = {"down_s": round(time.monotonic() - start, 3), "pid": self.redis.pid}
        elif what == "script_flush":
            client = self.redis.client()
            info = {"flushed": bool(await asyncio.to_thread(client.script_flush))}
            await asyncio.to_thread(client.close)
        elif what in ("rotate_key_sidecar_0", "registry_change_sidecar_1"):
            # a rolling change: one sidecar is stopped (SIGTERM, in-flight calls finish) and started again with
            # its new keys file or registry, while the other keeps the old one
            i = int(what[-1])
            proc = self.sidecars.procs[i]
            assert proc is not None
            if what.startswith("rotate"):
                doc = json.loads(self.sidecars.keys[i].read_text())
                doc["active"] = next(k for k in sorted(doc["keys"]) if k != doc["active"])
                self.sidecars.keys[i] = processes.write_keys(self.sidecars.work, doc)
                info = {"active": doc["active"]}
            else:
                self.sidecars.registries[i] = self.args.changed_registry
                info = {"registry": "without create_task"}
            self.sidecars.down.add(i)
            await asyncio.to_thread(proc.stop)
            start = time.monotonic()
            new = await asyncio.to_thread(self.sidecars.start, i)
            self.sidecars.down.discard(i)
            info.update(stopped_pid=proc.pid, new_pid=new.pid, restart_s=round(time.monotonic() - start, 2))
        elif what.startswith("kill9_sidecar_"):
            i = int(what[-1])
            proc = self.sidecars.procs[i]
            assert proc is not None
            if i == 0:  # with executions in flight: the proxy holds them 0.8 s (under the deadline)
                await self.proxy.send(cmd="mode", mode="delay", seconds=1.5, delay=0.8)
                await asyncio.sleep(1.0)
            self.sidecars.down.add(i)
            await asyncio.to_thread(proc.kill9)
            await asyncio.sleep(1.0)
            start = time.monotonic()
            new = await asyncio.to_thread(self.sidecars.start, i)
            self.sidecars.down.discard(i)
            info = {"killed_pid": proc.pid, "new_pid": new.pid, "restart_s": round(time.monotonic() - start, 2)}
        return info

    async def run_faults(self) -> None:
        for at, what in self.schedule():
            wait = self.t0 + at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if time.monotonic() >= self.stop_at:
                return
            start = time.monotonic() - self.t0
            try:
                info = await self.fault(what)
                ok = True
            except Exception as exc:  # a fault that could not be injected is reported, not fatal
                info, ok = {"error": f"{type(exc).__name__}: {exc}"}, False
            self.faults.append(
                {
                    "fault": what,
                    "at_s": round(start, 2),
                    "took_s": round(time.monotonic() - self.t0 - start, 2),
                    "ok": ok,
                    **info,
                }
            )
            print(f"  fault at {start:5.1f}s: {what} {json.dumps(info)[:120]}", flush=True)

    # -- the load ------------------------------------------------------------------------------

    async def load(self) -> None:
        self.t0 = time.monotonic()
        self.stop_at = self.t0 + self.args.seconds
        faults = asyncio.create_task(self.run_faults())
        workers = [asyncio.create_task(self.worker(i)) for i in range(self.args.workers)]
        progress = asyncio.create_task(self.progress())
        _, pending = await asyncio.wait(workers, timeout=self.args.seconds + 40)
        if self.later_tasks:
            _, late = await asyncio.wait(set(self.later_tasks), timeout=25)
            pending |= late
        for task in pending:  # bounded: a turn stuck past every budget is abandoned
            task.cancel()
            self.errors["turn abandoned"] += 1
        progress.cancel()
        faults.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await faults
        self.redis.resume()

    async def progress(self) -> None:
        while True:
            await asyncio.sleep(10)
            print(
                f"  {time.monotonic() - self.t0:5.1f}s: {len(self.writes)} cards, "
                f"{sum(w.confirms_sent for w in self.writes)} confirms",
                flush=True,
            )

    # -- reconciliation ------------------------------------------------------------------------

    async def states(self, rng: random.Random, writes: list[Write]) -> dict[str, common_pb2.Action]:
        out: dict[str, common_pb2.Action] = {}
        sem = asyncio.Semaphore(16)

        async def one(w: Write) -> None:
            async with sem:
                action = await self.get(rng, w)
                if action is not None:
                    out[w.action_id] = action

        await asyncio.gather(*(one(w) for w in writes))
        return out

    async def settle(self) -> dict[str, Any]:
        """Wait for background reconcilers (passive), then ask with Reconcile until nothing is open."""
        rng = random.Random(1)
        start = time.monotonic()
        passive_until = start + self.args.passive
        deadline = start + self.args.settle_timeout
        pending = list(self.writes)
        open_at_end: dict[str, int] = {}
        first_open: int | None = None
        open_ids: dict[str, tuple[str, str]] = {}
        passive_resolved = None
        rounds = 0
        while pending and time.monotonic() < deadline and rounds < 1000:
            rounds += 1
            states = await self.states(rng, pending)
            pending = [w for w in pending if w.action_id not in states or states[w.action_id].state in OPEN]
            if first_open is None:
                first_open = len(pending)
                open_ids = {
                    w.action_id: (
                        w.tool,
                        name(states[w.action_id].state) + " " + states[w.action_id].error.reason
                        if w.action_id in states
                        else "NO ANSWER",
                    )
                    for w in pending[:20]
                }
            if not pending:
                break
            if time.monotonic() >= passive_until:
                if passive_resolved is None:
                    passive_resolved = first_open - len(pending)

                async def ask(w: Write, sem: asyncio.Semaphore) -> None:
                    async with sem:
                        req = gateway_pb2.ReconcileRequest(context=w.context, action_id=w.action_id)
                        await self.call(rng, "Reconcile", lambda stub: stub.Reconcile(req, timeout=4), budget=4)

                slots = asyncio.Semaphore(8)
                await asyncio.gather(*(ask(w, slots) for w in pending))
            await asyncio.sleep(0.5)
        for w in pending:
            open_at_end[w.action_id] = 1
        return {
            "open_after_load": first_open or 0,
            "open_after_load_ids": open_ids if first_open else {},
            "resolved_by_background_in_passive_window": passive_resolved
            if passive_resolved is not None
            else (first_open or 0) - len(pending),
            "passive_window_s": self.args.passive,
            "seconds": round(time.monotonic() - start, 2),
            "still_open": len(pending),
        }

    # -- the checker ---------------------------------------------------------------------------

    async def final_replays(self, finals: dict[str, common_pb2.Action]) -> None:
        """One more Confirm of every settled card: it must replay the record byte for byte."""
        rng = random.Random(2)
        sem = asyncio.Semaphore(16)

        async def one(w: Write) -> None:
            async with sem:
                await self.confirm(rng, w, "final")

        await asyncio.gather(
            *(
                one(w)
                for w in self.writes
                if w.action_id in finals and finals[w.action_id].state != S.ACTION_STATE_READY
            )
        )

    def todo_records(self) -> dict[str, Any]:
        db = sqlite3.connect(self.args.todo_db, timeout=10)
        try:
            todos = {row[0]: row[1] for row in db.execute("SELECT id, title FROM todos")}
            idem = db.execute("SELECT key, status_code, body, fenced FROM idem").fetchall()
        finally:
            db.close()
        with urllib.request.urlopen(self.todo_url + "/_test/log", timeout=30) as resp:
            log = json.loads(resp.read())["requests"]
        return {"todos": todos, "idem": idem, "log": log}

    def check(self, finals: dict[str, common_pb2.Action], records: dict[str, Any]) -> dict[str, Any]:
        todos: dict[str, str] = records["todos"]
        applied: dict[str, str] = {}  # key -> todo id it created (a stored 2xx answer)
        fenced: set[str] = set()
        refused: dict[str, int] = {}
        for key, status, body, is_fenced in records["idem"]:
            if is_fenced:
                fenced.add(key)
            elif 200 <= int(status) < 300:
                applied[key] = json.loads(body)["id"]
            else:
                refused[key] = int(status)
        todo_rows_per_key = Counter(applied.values())  # a todo id claimed by two keys would show here
        executes = Counter(
            e["idempotency_key"] for e in records["log"] if e["method"] == "POST" and e["path"] == "/todos"
        )
        per_title = Counter(todos.values())
        orphan_todos = [tid for tid in todos if tid not in set(applied.values())]
        by_id = {w.action_id: w for w in self.writes}

        attempted = [w for w in self.writes if w.confirms_sent > 0]
        dup = [w for w in attempted if w.copies >= 2]
        outcomes: Counter[str] = Counter()
        receipts_without = []
        effects_without = []
        for w in attempted:
            action = finals.get(w.action_id)
            label = "NO ANSWER" if action is None else name(action.state)
            if action is not None and action.error.reason:
                label += " " + action.error.reason
            outcomes[label] += 1
            if action is not None and action.state == S.ACTION_STATE_SUCCEEDED:
                todo_id = applied.get(w.action_id)
                if todo_id is None or todo_id != action.receipt.resource_id or todo_id not in todos:
                    receipts_without.append(w.action_id)
        for key in applied:
            action = finals.get(key)
            if key in by_id and (action is None or action.state != S.ACTION_STATE_SUCCEEDED):
                effects_without.append(key)
        effects_in_review = [
            k
            for k in effects_without
            if finals.get(k) is not None and finals[k].state == S.ACTION_STATE_NEEDS_MANUAL_REVIEW
        ]
        foreign = [k for k in applied if k not in by_id]
        effects_without += foreign + orphan_todos
        unknown_left = [
            w.action_id for w in attempted if w.action_id not in finals or finals[w.action_id].state in OPEN
        ]
        review = [
            w.action_id
            for w in attempted
            if w.action_id in finals and finals[w.action_id].state == S.ACTION_STATE_NEEDS_MANUAL_REVIEW
        ]

        # replays: every replayed answer with a settled state, every Invoke replay, and the final Confirm,
        # must equal the record (GetAction) byte for byte; first answers must not contradict it.
        replays = replays_same = 0
        replay_diffs: list[dict[str, str]] = []
        first_differs = first_contradicts = 0
        contradictions: list[dict[str, str]] = []
        for w in attempted:
            final = finals.get(w.action_id)
            if final is None or final.state not in TERMINAL:
                continue
            want = canon(final, True)
            for ans in w.answers:
                if ans.action.state not in TERMINAL:
                    continue
                if ans.action.replayed:
                    replays += 1
                    if canon(ans.action, True) == want:
                        replays_same += 1
                    elif len(replay_diffs) < 5:
                        replay_diffs.append(
                            {
                                "action_id": w.action_id,
                                "phase": ans.phase,
                                "got": str(ans.action)[:300],
                                "record": str(final)[:300],
                            }
                        )
                else:
                    if canon(ans.action, True) != want:
                        first_differs += 1
                    if (ans.action.state, ans.action.receipt.resource_id) != (final.state, final.receipt.resource_id):
                        first_contradicts += 1
                        if len(contradictions) < 5:
                            contradictions.append(
                                {"action_id": w.action_id, "got": str(ans.action)[:300], "record": str(final)[:300]}
                            )
            for inv in w.invoke_replays:
                if inv.state in TERMINAL:
                    replays += 1
                    if canon(inv, True) == want:
                        replays_same += 1
                    elif len(replay_diffs) < 5:
                        replay_diffs.append(
                            {
                                "action_id": w.action_id,
                                "phase": "invoke",
                                "got": str(inv)[:300],
                                "record": str(final)[:300],
                            }
                        )

        model_retries = sum(w.model_retries for w in self.writes)
        model_mismatch = [m for w in self.writes for m in w.model_retry_mismatch]
        max_effects = max([*todo_rows_per_key.values(), *executes.values(), *per_title.values(), 0])
        concurrent = [w for w in dup if w.plan == "concurrent"]
        after = [w for w in dup if w.plan == "after_settle"]
        invariants = {
            "side_effects_per_key_max_le_1": max_effects <= 1,
            "receipts_without_side_effect_0": not receipts_without,
            "side_effects_without_receipt_0": not effects_without,
            "unknowns_left_0": not unknown_left,
            "replays_byte_identical": replays == replays_same,
            "first_answers_never_contradict_record": first_contradicts == 0,
            "model_retries_same_card": not model_mismatch,
            "duplicates_at_least_30pct": len(dup) >= 0.3 * max(1, len(attempted)),
        }
        return {
            "writes_attempted": len(attempted),
            "cards_issued": len(self.writes),
            "invoke_failed": self.invoke_failed,
            "confirm_calls": sum(w.confirms_sent for w in self.writes),
            "duplicated_writes": len(dup),
            "duplicated_pct": round(100 * len(dup) / max(1, len(attempted)), 1),
            "duplicated_concurrently": len(concurrent),
            "duplicated_after_settle": len(after),
            "duplicated_after_a_seen_settle": sum(w.settled_before_dups for w in after),
            "model_retries": model_retries,
            "model_retry_mismatches": model_mismatch[:10],
            "refused_by_changed_registry": self.refused_by_registry + sum(w.refused_by_registry for w in self.writes),
            "by_tool": dict(Counter(w.tool for w in attempted)),
            "outcomes": dict(outcomes.most_common()),
            "side_effects": {
                "todo_rows": len(todos),
                "keys_applied": len(applied),
                "keys_fenced": len(fenced),
                "keys_refused": refused,
                "max_todo_rows_per_key": max(todo_rows_per_key.values(), default=0),
                "max_execute_requests_per_key": max(executes.values(), default=0),
                "keys_with_2plus_execute_requests": [k for k, n in executes.items() if n > 1][:10],
                "max_todo_rows_per_title": max(per_title.values(), default=0),
                "execute_requests": sum(executes.values()),
            },
            "max_side_effects_per_key": max_effects,
            "receipts_without_side_effect": receipts_without[:20],
            "receipts_without_side_effect_n": len(receipts_without),
            "side_effects_without_receipt": effects_without[:20],
            "side_effects_without_receipt_n": len(effects_without),
            "side_effects_in_manual_review": effects_in_review[:20],
            "unknowns_left": len(unknown_left),
            "unknowns_left_ids": unknown_left[:20],
            "needs_manual_review": len(review),
            "replays": replays,
            "replays_identical": replays_same,
            "replay_differences": replay_diffs,
            "first_answers_differing_from_record": first_differs,
            "first_answers_contradicting_record": first_contradicts,
            "contradictions": contradictions,
            "errors_seen_by_agents": dict(self.errors.most_common()),
            "errors_per_second_of_run": dict(sorted(self.error_seconds.items())),
            "invariants": invariants,
            "passed": all(invariants.values()),
        }


def summary_lines(check: dict[str, Any], settle: dict[str, Any]) -> list[str]:
    ok = check["invariants"]

    def mark(flag: bool) -> str:
        return "OK" if flag else "FAILED"

    se = check["side_effects"]
    return [
        f"writes attempted (cards confirmed): {check['writes_attempted']}  "
        f"(cards issued {check['cards_issued']}, Invoke gave up {check['invoke_failed']}, "
        f"Confirm calls {check['confirm_calls']})",
        f"  confirmed 2-5 times: {check['duplicated_writes']} = {check['duplicated_pct']} % "
        f"(concurrently {check['duplicated_concurrently']}, after settle {check['duplicated_after_settle']} "
        f"of which {check['duplicated_after_a_seen_settle']} after a settled GetAction); "
        f"model retries {check['model_retries']}, other card/action {len(check['model_retry_mismatches'])}  "
        f"{mark(ok['duplicates_at_least_30pct'] and ok['model_retries_same_card'])}",
        f"  by tool: {check['by_tool']}; create_task Invokes refused by the sidecar whose registry dropped it: "
        f"{check['refused_by_changed_registry']}",
        "  outcomes: " + ", ".join(f"{k} {v}" for k, v in check["outcomes"].items()),
        f"side effects per idempotency key: max {check['max_side_effects_per_key']} "
        f"(todo rows per key {se['max_todo_rows_per_key']}, execute requests per key "
        f"{se['max_execute_requests_per_key']}, todo rows per title {se['max_todo_rows_per_title']}; "
        f"{se['todo_rows']} rows, {se['keys_fenced']} keys fenced)  {mark(ok['side_effects_per_key_max_le_1'])}",
        f"receipts without a side effect: {check['receipts_without_side_effect_n']}  "
        f"{mark(ok['receipts_without_side_effect_0'])}",
        f"side effects without a receipt: {check['side_effects_without_receipt_n']}"
        + (
            f" (in NEEDS_MANUAL_REVIEW after the reconcile window: {len(check['side_effects_in_manual_review'])})"
            if check["side_effects_in_manual_review"]
            else ""
        )
        + f"  {mark(ok['side_effects_without_receipt_0'])}",
        f"unknowns left: {check['unknowns_left']} (open after the load {settle['open_after_load']}, "
        f"{settle['resolved_by_background_in_passive_window']} resolved by the background reconcilers in "
        f"{settle['passive_window_s']:g} s, all settled after {settle['seconds']:g} s; "
        f"needs manual review {check['needs_manual_review']})  {mark(ok['unknowns_left_0'])}",
        f"replays byte-identical: {check['replays_identical']}/{check['replays']}  "
        f"{mark(ok['replays_byte_identical'])}",
        f"first answers contradicting the record: {check['first_answers_contradicting_record']} "
        f"(differing only in bytes, e.g. settled_at: {check['first_answers_differing_from_record']})  "
        f"{mark(ok['first_answers_never_contradict_record'])}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds of load with faults (default 60)")
    parser.add_argument("--writes", type=int, default=1_000_000, help="stop issuing new writes after this many")
    parser.add_argument("--workers", type=int, default=16, help="concurrent agent turns (default 16)")
    parser.add_argument(
        "--passive",
        type=float,
        default=15.0,
        help="seconds to leave reconciliation to the background reconcilers (default 15)",
    )
    parser.add_argument(
        "--settle-timeout", type=float, default=60.0, help="bound on the whole reconciliation wait (default 60)"
    )
    parser.add_argument(
        "--reconcile-window",
        default="20s",
        help="the sidecars' --reconcile-window (default 20s): after it, an unresolved action goes "
        "to NEEDS_MANUAL_REVIEW",
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory even when all passed")
    args = parser.parse_args(argv)

    started = datetime.now(UTC)
    wall = time.monotonic()
    work = processes.workdir("countersign-soak-")
    print(
        f"soak: {args.seconds:g} s of load, {args.workers} workers over 2 sidecars "
        f"({' '.join(SIDECAR_FLAGS[:6])} --reconcile-window {args.reconcile_window}), work dir {work}",
        flush=True,
    )
    redis = PersistentRedis(work)
    procs: list[processes.Proc] = []
    sidecars: Sidecars | None = None
    out: dict[str, Any] = {}
    try:
        redis.start()
        todo = processes.start_todo_service(work)
        procs.append(todo)
        args.todo_db = next(str(p) for p in work.glob("todos-*.db"))
        proxy_proc = processes._start(
            [sys.executable, "-m", "countersign.testing.faults", "proxy", "--target", f"127.0.0.1:{todo.info['port']}"],
            work,
            "proxy",
        )
        procs.append(proxy_proc)
        proxied = f"http://127.0.0.1:{proxy_proc.info['port']}"
        direct = todo.info["url"]
        # prepare goes straight to the service; execute, lookup and fence through the proxy
        registry, args.changed_registry = soak_registries(work, proxied, direct)
        keys = processes.write_keys(work)
        sidecars = Sidecars(work, registry, keys, redis.url, args.reconcile_window)
        sidecars.start(0)
        sidecars.start(1)
        print(
            f"pids: redis {redis.pid}, todo {todo.pid}, proxy {proxy_proc.pid}, sidecars "
            f"{[p.pid for p in sidecars.procs if p]}",
            flush=True,
        )

        async def go() -> dict[str, Any]:
            assert sidecars is not None
            sidecars.open_channels()
            control = ProxyControl(proxy_proc.info["control"])
            soak = Soak(args, sidecars, redis, control, direct)
            try:
                await soak.load()
                load_s = time.monotonic() - soak.t0
                print(f"load done after {load_s:.1f} s: {len(soak.writes)} cards; reconciling", flush=True)
                settle = await soak.settle()
                finals = await soak.states(random.Random(3), soak.writes)
                await soak.final_replays(finals)
                records = await asyncio.to_thread(soak.todo_records)
                check = soak.check(finals, records)
                proxy_stats = await control.send(cmd="stats")
                client = redis.client()
                check["redis_keys_at_end"] = int(await asyncio.to_thread(client.dbsize))
                await asyncio.to_thread(client.close)
                return {
                    "load_s": round(load_s, 2),
                    "settle": settle,
                    "check": check,
                    "faults": soak.faults,
                    "proxy": proxy_stats.get("stats", {}),
                }
            finally:
                await control.close()
                await sidecars.close()

        out = asyncio.run(go())
        for proc in [*procs, *[p for p in sidecars.procs if p]]:
            if not proc.alive():
                print(f"warning: pid {proc.pid} is not running at the end", file=sys.stderr)
    finally:
        if sidecars is not None:
            sidecars.stop_all()
        for proc in reversed(procs):
            proc.stop()
        redis.stop()

    check, settle = out["check"], out["settle"]
    runtime = time.monotonic() - wall
    print("\n--- checker: the todo service's own records against every action's outcome ---")
    lines = summary_lines(check, settle)
    for line in lines:
        print(line)
    print(
        f"faults injected: {len(out['faults'])} ({', '.join(f['fault'] for f in out['faults'])}); "
        f"failed to inject: {sum(not f['ok'] for f in out['faults'])}"
    )
    keys = check.get("redis_keys_at_end", 0)
    print(
        f"redis keys at the end: {keys}; the background sweep reads one SCAN COUNT 500 step per "
        f"--reconcile-interval, so one full pass over them takes about {keys / 500:.0f} intervals"
    )
    print(
        "errors the agents saw (retried): "
        + ", ".join(f"{k} {v}" for k, v in list(check["errors_seen_by_agents"].items())[:12])
    )
    print(f"RESULT: {'PASS' if check['passed'] else 'FAIL'}  (runtime {runtime:.1f} s)")

    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"soak-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    path.write_text(
        json.dumps(
            {
                "started_utc": started.isoformat(),
                "command": " ".join([Path(sys.executable).name, *sys.argv]),
                "settings": {
                    "seconds": args.seconds,
                    "writes": args.writes,
                    "workers": args.workers,
                    "passive": args.passive,
                    "settle_timeout": args.settle_timeout,
                    "sidecar_flags": [*SIDECAR_FLAGS, "--reconcile-window", args.reconcile_window],
                    "redis": "unix socket, appendonly yes, appendfsync always",
                },
                "machine": {
                    "cpus": os.cpu_count(),
                    "platform": platform.platform(),
                    "python": platform.python_version(),
                },
                "runtime_s": round(runtime, 1),
                **out,
                "summary": lines,
            },
            indent=2,
            default=str,
        )
        + "\n"
    )
    print(f"results: {path.relative_to(ROOT)}")
    if check["passed"] and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"work dir kept: {work}")
    return 0 if check["passed"] else 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
