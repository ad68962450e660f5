"""The Redis-facing guarantees on real topologies started on loopback (docs/design.md §7):

- a three-master Redis Cluster: the claim race, replay, expiry, fail-closed, and one slot per action;
- a primary + one replica + three Sentinels: the race and replay, a failover in the middle of traffic
  (without and with ``--redis-wait-replicas 1``), and WAIT not met -> UNAVAILABLE, nothing executed.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from countersign.testing import processes
from countersign.testing import topologies as topo
from countersign.testing.calls import ctx, error_info
from countersign.testing.stack import Todo
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

S = common_pb2  # action states

SETTLED = {S.ACTION_STATE_SUCCEEDED, S.ACTION_STATE_FAILED}
SUBJECT = {"X-Countersign-Subject": "alice"}


@dataclass
class Env:
    work: Path
    todo: Todo
    registry: Path
    keys: Path
    url: str
    sidecars: list[processes.Proc] = field(default_factory=list)
    todo_proc: processes.Proc | None = None  # stopped by stop() when this Env started it

    def start_sidecar(self, *flags: str) -> processes.Proc:
        proc = processes.start_sidecar(
            self.work, self.registry, redis_url=self.url, keys=self.keys, flags=["--log-level", "warning", *flags]
        )
        self.sidecars.append(proc)
        return proc

    def stub(self, i: int = 0, proc: processes.Proc | None = None) -> gateway_pb2_grpc.ToolGatewayServiceStub:
        address = (proc or self.sidecars[i]).info["grpc"]
        return gateway_pb2_grpc.ToolGatewayServiceStub(grpc.insecure_channel(address))

    def stop(self) -> None:
        for proc in [*reversed(self.sidecars), *([self.todo_proc] if self.todo_proc else [])]:
            proc.stop()


def _env(work: Path, url: str, sidecars: int) -> Env:
    todo = processes.start_todo_service(work)
    env = Env(
        work,
        Todo(todo),
        processes.write_registry(work, todo.info["url"]),
        processes.write_keys(work),
        url,
        todo_proc=todo,
    )
    try:
        for _ in range(sidecars):
            env.start_sidecar()
    except BaseException:
        env.stop()
        raise
    return env


def _invoke(
    stub: gateway_pb2_grpc.ToolGatewayServiceStub, title: str, request_id: str | None = None, timeout: float = 5.0
) -> gateway_pb2.ConfirmationCard:
    response = stub.Invoke(
        gateway_pb2.InvokeRequest(
            context=ctx(request_id=request_id or uuid.uuid4().hex),
            tool_name="create_todo",
            arguments_json=json.dumps({"title": title}),
        ),
        timeout=timeout,
    )
    assert response.WhichOneof("outcome") == "confirmation", response
    return response.confirmation


def _confirm(stub: gateway_pb2_grpc.ToolGatewayServiceStub, token: str, timeout: float = 5.0) -> common_pb2.Action:
    return stub.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=token), timeout=timeout).action


def _reason(exc: grpc.RpcError) -> str:
    try:
        return str(error_info(exc).reason)
    except AssertionError:
        return str(exc.code().name)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------- shared checks


async def _race(addresses: list[str], token: str, count: int) -> list[tuple[str, bytes]]:
    channels = [grpc.aio.insecure_channel(a) for a in addresses]
    try:
        stubs = [gateway_pb2_grpc.ToolGatewayServiceStub(c) for c in channels]
        for c in channels:
            await c.channel_ready()

        async def one(i: int) -> tuple[str, bytes]:
            try:
                response = await stubs[i % len(stubs)].Confirm(
                    gateway_pb2.ConfirmRequest(context=ctx(), token=token, wait_ms=0 if i % 3 else 3000), timeout=30
                )
                return ("ok", response.action.SerializeToString(deterministic=True))
            except grpc.aio.AioRpcError as exc:
                return (exc.code().name, (exc.details() or "").encode())

        return list(await asyncio.gather(*(one(i) for i in range(count))))
    finally:
        for c in channels:
            await c.close()


def check_claim_race(env: Env, count: int = 100) -> None:
    """count concurrent Confirms over every sidecar: one executes, the downstream sees one request."""
    sidecars = env.sidecars[:2]
    card = _invoke(env.stub(proc=sidecars[0]), f"并发确认-{uuid.uuid4().hex[:8]}")
    env.todo.fault(path="/todos", method="POST", mode="hang_before_commit", seconds=0.3, times=1)
    try:
        results = asyncio.run(_race([p.info["grpc"] for p in sidecars], card.token, count))
    finally:
        env.todo.clear_faults()
    assert [r for r in results if r[0] != "ok"] == []
    actions = [common_pb2.Action.FromString(raw) for _, raw in results]
    assert {a.state for a in actions} <= {S.ACTION_STATE_RUNNING, S.ACTION_STATE_SUCCEEDED}
    receipts = {a.receipt.SerializeToString(deterministic=True) for a in actions if a.state in SETTLED}
    assert len(receipts) == 1, "every caller that saw the outcome saw the identical receipt"
    assert sum(1 for a in actions if not a.replayed) == 1, "exactly one caller executed"
    assert len(env.todo.writes(card.action_id)) == 1, "the downstream saw exactly one request"
    final = _confirm(env.stub(proc=sidecars[-1]), card.token)
    assert final.replayed and final.receipt.SerializeToString(deterministic=True) in receipts


def check_replay(env: Env) -> None:
    """After settle: every replay is byte-identical (Confirm and the same Invoke), nothing is sent again."""
    stub = env.stub()
    request_id, title = uuid.uuid4().hex, f"重放-{uuid.uuid4().hex[:8]}"
    card = _invoke(stub, title, request_id)
    first = _confirm(stub, card.token)
    assert first.state == S.ACTION_STATE_SUCCEEDED and not first.replayed and first.receipt.resource_id
    replays = {
        _confirm(env.stub(proc=p), card.token).SerializeToString(deterministic=True)
        for p in env.sidecars[:2]
        for _ in range(2)
    }
    assert len(replays) == 1, "byte-identical on every sidecar"
    replay = common_pb2.Action.FromString(replays.pop())
    assert replay.replayed
    replay.replayed = False
    assert replay.SerializeToString(deterministic=True) == first.SerializeToString(deterministic=True)
    again = stub.Invoke(
        gateway_pb2.InvokeRequest(
            context=ctx(request_id=request_id), tool_name="create_todo", arguments_json=json.dumps({"title": title})
        )
    )
    assert again.WhichOneof("outcome") == "replay"
    assert again.replay.receipt.SerializeToString(deterministic=True) == first.receipt.SerializeToString(
        deterministic=True
    )
    got = stub.GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=card.action_id)).action
    assert got.receipt == first.receipt
    assert len(env.todo.writes(card.action_id)) == 1


# ---------------------------------------------------------------------------------------------- Redis Cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[topo.Cluster, Env]]:
    work = tmp_path_factory.mktemp("cluster")
    redis_cluster = topo.start_cluster(work)
    env = None
    try:
        env = _env(work, redis_cluster.url, sidecars=2)
        yield redis_cluster, env
    finally:
        if env is not None:
            env.stop()
        redis_cluster.stop()


def test_cluster_every_key_of_an_action_is_in_one_slot_on_one_node(cluster: tuple[topo.Cluster, Env]) -> None:
    redis_cluster, env = cluster
    card = _invoke(env.stub(), f"同槽-{uuid.uuid4().hex[:8]}")
    a = card.action_id
    keys = [f"cs:{{{a}}}:card", f"cs:{{{a}}}:run", f"cs:{{{a}}}:cont"]
    assert len({redis_cluster.keyslot(k) for k in keys}) == 1
    owner = redis_cluster.owner_of(keys[0])
    assert topo.cli(owner, "EXISTS", keys[0]) == "1", "the card is on the node serving its slot"
    _confirm(env.stub(1), card.token)
    assert topo.cli(owner, "EXISTS", keys[1]) == "1", "so is the run record the claim created"
    assert topo.cli(owner, "EXISTS", keys[0]) == "0"
    # three masters, so the actions spread: at least two nodes hold a run record after a few actions
    owners = {redis_cluster.owner_of(f"cs:{{{_invoke(env.stub(), f'散列-{i}').action_id}}}:card") for i in range(12)}
    assert len(owners) >= 2


def test_cluster_claim_race_over_two_sidecars_executes_once(cluster: tuple[topo.Cluster, Env]) -> None:
    check_claim_race(cluster[1])


def test_cluster_replay_after_settle_is_byte_identical(cluster: tuple[topo.Cluster, Env]) -> None:
    check_replay(cluster[1])


def test_cluster_expired_card_is_not_found(cluster: tuple[topo.Cluster, Env]) -> None:
    env = cluster[1]
    short = env.start_sidecar("--confirm-ttl", "300ms")
    stub = env.stub(proc=short)
    card = _invoke(stub, f"过期-{uuid.uuid4().hex[:8]}")
    time.sleep(0.6)
    with pytest.raises(grpc.RpcError) as info:
        _confirm(stub, card.token)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert error_info(info.value).reason == "CONFIRMATION_EXPIRED"
    assert env.todo.writes(card.action_id) == []


def test_cluster_down_fails_closed_and_the_downstream_sees_nothing(cluster: tuple[topo.Cluster, Env]) -> None:
    """Runs last in this module: it stops every node of the cluster."""
    redis_cluster, env = cluster
    stub = env.stub()
    card = _invoke(stub, f"离线-{uuid.uuid4().hex[:8]}")
    seen = len(env.todo.requests())
    redis_cluster.stop()
    calls: list[Callable[[], Any]] = [
        lambda: stub.Invoke(
            gateway_pb2.InvokeRequest(
                context=ctx(request_id=uuid.uuid4().hex),
                tool_name="create_todo",
                arguments_json='{"title": "集群离线"}',
            ),
            timeout=5,
        ),
        lambda: _confirm(stub, card.token),
    ]
    for call in calls:
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as info:
            call()
        assert time.monotonic() - started < 4.0
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE, info.value
        assert error_info(info.value).reason == "STORE_UNAVAILABLE"
    assert len(env.todo.requests()) == seen, "the downstream saw nothing"


# ---------------------------------------------------------------------------------------------- Sentinel


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[topo.SentinelSetup, Env]]:
    work = tmp_path_factory.mktemp("sentinel")
    setup = topo.start_sentinel_setup(work)
    env = None
    try:
        env = _env(work, setup.url, sidecars=2)
        yield setup, env
    finally:
        if env is not None:
            env.stop()
        setup.stop()


def test_sentinel_claim_race_over_two_sidecars_executes_once(sentinel: tuple[topo.SentinelSetup, Env]) -> None:
    check_claim_race(sentinel[1])


def test_sentinel_replay_after_settle_is_byte_identical(sentinel: tuple[topo.SentinelSetup, Env]) -> None:
    check_replay(sentinel[1])


def test_sentinel_wait_not_met_fails_closed_with_replicas_not_acknowledged(
    sentinel: tuple[topo.SentinelSetup, Env],
) -> None:
    setup, env = sentinel
    waiting = env.start_sidecar("--redis-wait-replicas", "1", "--redis-wait-timeout", "100ms")
    stub = env.stub(proc=waiting)
    ok = _invoke(stub, f"等待副本-{uuid.uuid4().hex[:8]}")
    assert _confirm(stub, ok.token).state == S.ACTION_STATE_SUCCEEDED, "with the replica up, WAIT 1 is met"
    card = _invoke(stub, f"副本停止-{uuid.uuid4().hex[:8]}")
    seen = len(env.todo.requests())
    replica = setup.replica_port()
    setup.servers[replica].stop()
    try:
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as info:
            _confirm(stub, card.token)
        elapsed = time.monotonic() - started
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert error_info(info.value).reason == "REPLICAS_NOT_ACKNOWLEDGED"
        assert elapsed < 2.0
        assert len(env.todo.requests()) == seen, "the claim was not acted on: the downstream saw nothing"
        got = stub.GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=card.action_id)).action
        print(
            f"\n[wait not met] Confirm answered UNAVAILABLE in {elapsed * 1000:.0f} ms; the action is now "
            f"{S.ActionState.Name(got.state)} (the unacknowledged claim was put back)"
        )
        assert got.state == S.ACTION_STATE_READY
    finally:
        setup.restart_as_replica(replica)
        setup.wait_healthy()


def _assert_ready(stub: gateway_pb2_grpc.ToolGatewayServiceStub, card: gateway_pb2.ConfirmationCard) -> None:
    got = stub.GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=card.action_id)).action
    assert got.state == S.ACTION_STATE_READY, "the card is back: the same token can be confirmed again"


def test_a_claim_no_replica_acknowledged_gives_the_card_back_and_runs_once_when_one_does(tmp_path: Path) -> None:
    """A primary with no replica and --redis-wait-replicas 1: Confirm is refused and the card stays READY (the
    claim was put back); a replica attaches; the same token executes once."""
    port = topo.free_port()
    primary = topo.start_server(tmp_path, port, "primary")
    replica: processes.Proc | None = None
    env = None
    try:
        env = _env(tmp_path, f"redis://{topo.HOST}:{port}", sidecars=0)
        # 1 s, not 100 ms: the final Confirm needs its replica's ack in time on a loaded CI machine (two such
        # Confirms failed REPLICAS_NOT_ACKNOWLEDGED with the replica attached); the refusals stay refusals
        stub = env.stub(
            proc=env.start_sidecar("--redis-wait-replicas", "1", "--redis-wait-timeout", "1s", "--redis-timeout", "3s")
        )
        card = _invoke(stub, f"无副本-{uuid.uuid4().hex[:8]}")
        for _ in range(2):  # refused as often as asked, never stranded
            with pytest.raises(grpc.RpcError) as info:
                _confirm(stub, card.token)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
            assert error_info(info.value).reason == "REPLICAS_NOT_ACKNOWLEDGED"
            _assert_ready(stub, card)
        assert env.todo.writes(card.action_id) == [], "the downstream saw nothing"
        replica = topo.start_server(tmp_path, topo.free_port(), "replica", "--replicaof", topo.HOST, str(port))
        topo._wait("the replica to attach", lambda: topo.cli(port, "WAIT", "1", "1000") == "1", 20)
        done = _confirm(stub, card.token)
        assert done.state == S.ACTION_STATE_SUCCEEDED and not done.replayed
        assert _confirm(stub, card.token).replayed
        assert len(env.todo.writes(card.action_id)) == 1, "executed once"
    finally:
        if env is not None:
            env.stop()
        for proc in (replica, primary):
            if proc is not None:
                proc.stop()


@pytest.mark.timeout(120)
def test_sentinel_a_claim_refused_by_wait_is_ready_after_a_failover_and_runs_once(tmp_path: Path) -> None:
    """The replica stops answering (SIGSTOP): Confirm is refused and the claim put back. The replica resumes and
    is promoted: on the new primary the card is READY, and the same token executes once."""
    setup = topo.start_sentinel_setup(tmp_path)
    env = None
    try:
        env = _env(tmp_path, setup.url, sidecars=0)
        # 1 s: the Confirm after the failover needs the new replica's ack in time on a loaded machine
        stub = env.stub(
            proc=env.start_sidecar("--redis-wait-replicas", "1", "--redis-wait-timeout", "1s", "--redis-timeout", "3s")
        )
        card = _invoke(stub, f"故障转移-{uuid.uuid4().hex[:8]}")
        old, replica = setup.master_port(), setup.replica_port()
        setup.servers[replica].pause()
        try:
            with pytest.raises(grpc.RpcError) as info:
                _confirm(stub, card.token)
            assert error_info(info.value).reason == "REPLICAS_NOT_ACKNOWLEDGED"
            _assert_ready(stub, card)
        finally:
            setup.servers[replica].resume()
        topo._wait("the replica to catch up", lambda: topo.cli(old, "WAIT", "1", "1000") == "1", 20)
        assert topo.cli(setup.sentinel_ports[0], "SENTINEL", "FAILOVER", topo.SERVICE) == "OK"
        topo._wait("the replica to be promoted", lambda: setup.master_port() == replica, 30)
        setup.wait_healthy(45)
        deadline = time.monotonic() + 20
        while True:  # the sidecar follows the new primary
            try:
                _assert_ready(stub, card)
                break
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        done = _confirm(stub, card.token)
        assert done.state == S.ACTION_STATE_SUCCEEDED and not done.replayed
        assert len(env.todo.writes(card.action_id)) == 1, "executed once"
    finally:
        if env is not None:
            env.stop()
        setup.stop()


# ---------------------------------------------------------------------------------------------- failover


@dataclass
class Act:
    i: int
    title: str
    action_id: str = ""
    token: str = ""
    acked: list[int] = field(default_factory=list)  # states of the Confirms that returned an Action
    refused: list[str] = field(default_factory=list)  # reasons of the Confirms that failed


@dataclass
class Row:
    mode: str
    issued: int = 0
    acknowledged: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    lost_ready: int = 0
    lost_missing: int = 0
    unknown: int = 0
    sent_twice: int = 0
    executed_twice: int = 0
    latencies: list[float] = field(default_factory=list)

    @property
    def lost(self) -> int:
        return self.lost_ready + self.lost_missing

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    def line(self) -> str:
        return (
            f"| {self.mode:<11} | {self.issued:>6} | {self.acknowledged:>5} | {self.lost:>4} "
            f"({self.lost_ready} READY, {self.lost_missing} missing) | {self.unknown:>7} | {self.sent_twice:>10} "
            f"| {self.executed_twice:>14} | {statistics.median(self.latencies) * 1000:>6.1f} "
            f"| {self.pct(0.99):>6.1f} |"
        )


LAG = 10
HEADER = (
    "| mode        | issued | acked | lost claims                | UNKNOWN | sent twice | executed twice "
    "| p50 ms | p99 ms |"
)
ROWS: dict[str, Row] = {}


@pytest.fixture(scope="module")
def failover_table() -> Iterator[dict[str, Row]]:
    yield ROWS
    if ROWS:
        print("\n\nSentinel failover in the middle of traffic (Confirm latency: 200 sequential confirms, steady state)")
        print(HEADER)
        for row in ROWS.values():
            print(row.line())
        for row in ROWS.values():
            print(f"  {row.mode}: refused Confirms by reason {dict(row.refused)}")


def _state_after_failover(stub: gateway_pb2_grpc.ToolGatewayServiceStub, action_id: str, deadline: float) -> str:
    """GetAction, retried while the failover settles (UNAVAILABLE) or the action runs (until its lease lapses)."""
    last = "UNAVAILABLE"
    while time.monotonic() < deadline:
        try:
            action = stub.GetAction(gateway_pb2.GetActionRequest(context=ctx(), action_id=action_id), timeout=3).action
        except grpc.RpcError as exc:
            last = _reason(exc)
            if exc.code() == grpc.StatusCode.NOT_FOUND:  # type: ignore[attr-defined]
                return "MISSING"
            time.sleep(0.2)
            continue
        last = S.ActionState.Name(action.state).removeprefix("ACTION_STATE_")
        if action.state in SETTLED:
            assert action.receipt.action_id == action_id, "settled with a receipt"
            return last
        if action.state in (S.ACTION_STATE_READY, S.ACTION_STATE_UNKNOWN):
            return last
        time.sleep(0.2)
    return last


@pytest.mark.timeout(150)
@pytest.mark.parametrize("wait", [pytest.param(0, id="no-wait"), pytest.param(1, id="wait-1")])
def test_sentinel_failover_in_the_middle_of_traffic(
    sentinel: tuple[topo.SentinelSetup, Env], failover_table: dict[str, Row], wait: int
) -> None:
    _, shared = sentinel
    mode = "wait-1" if wait else "no-wait"
    work = shared.work / f"failover-{mode}"
    setup = topo.start_sentinel_setup(work)
    env = Env(work, shared.todo, shared.registry, shared.keys, setup.url)
    flags = ["--lease", "3s", "--downstream-deadline", "1s"]
    if wait:
        flags += ["--redis-wait-replicas", "1", "--redis-wait-timeout", "100ms"]
    row = Row(mode)
    try:
        stub = env.stub(proc=env.start_sidecar(*flags))
        # steady state: the cost of the option, 200 Confirms one after another
        for i in range(200):
            card = _invoke(stub, f"{mode}-warm-{i}-{uuid.uuid4().hex[:6]}")
            started = time.perf_counter()
            assert _confirm(stub, card.token).state == S.ACTION_STATE_SUCCEEDED
            row.latencies.append(time.perf_counter() - started)

        acts = [Act(i, f"{mode}-failover-{i}-{uuid.uuid4().hex[:6]}") for i in range(150)]
        third = threading.Event()
        traffic_stub = env.stub(proc=env.sidecars[-1])

        def confirm(act: Act) -> None:
            for _ in range(2 if act.i % 4 == 0 else 1):  # some are confirmed twice
                row.issued += 1
                try:
                    act.acked.append(_confirm(traffic_stub, act.token, timeout=3).state)
                    row.acknowledged += 1
                except grpc.RpcError as exc:
                    act.refused.append(_reason(exc))
                    row.refused[_reason(exc)] += 1

        def traffic() -> None:
            """Card i is issued at step i and confirmed at step i + LAG (the user takes a moment)."""
            for step in range(len(acts) + LAG):
                if step == len(acts) // 3:
                    third.set()
                if step < len(acts):
                    try:
                        card = _invoke(traffic_stub, acts[step].title, timeout=3)
                        acts[step].action_id, acts[step].token = card.action_id, card.token
                    except grpc.RpcError:
                        pass
                if step >= LAG and acts[step - LAG].token:
                    confirm(acts[step - LAG])
                time.sleep(0.05)

        thread = threading.Thread(target=traffic, daemon=True)
        thread.start()
        assert third.wait(60)
        old, promoted = setup.master_port(), setup.replica_port()
        assert topo.cli(setup.sentinel_ports[0], "SENTINEL", "FAILOVER", topo.SERVICE) == "OK"
        thread.join(120)
        assert not thread.is_alive()
        assert setup.master_port() == promoted, "the replica was promoted"
        setup.wait_healthy(45)  # the old primary is a replica of the promoted one again
        assert topo.info(old, "replication").get("role") == "slave"

        # 1. right after the failover: what became of every Confirm that was acknowledged?
        deadline = time.monotonic() + 20
        after = {a.i: _state_after_failover(stub, a.action_id, deadline) for a in acts if a.acked}
        row.lost_ready = sum(1 for s in after.values() if s == "READY")
        row.lost_missing = sum(1 for s in after.values() if s == "MISSING")
        row.unknown = sum(1 for s in after.values() if s == "UNKNOWN")
        assert set(after.values()) <= {"SUCCEEDED", "FAILED", "UNKNOWN", "READY", "MISSING"}, after

        # 2. clients retry: every card still READY (lost claims and refused Confirms) is confirmed again
        for act in acts:
            if act.token and _state_after_failover(stub, act.action_id, time.monotonic() + 5) == "READY":
                try:
                    act.acked.append(_confirm(stub, act.token).state)
                except grpc.RpcError as exc:
                    act.refused.append(_reason(exc))

        # 3. the downstream: at most one write request per key with WAIT; never two resources per key
        writes = Counter(e["idempotency_key"] for e in env.todo.requests(path="/todos") if e["method"] == "POST")
        row.sent_twice = sum(1 for a in acts if writes[a.action_id] > 1)
        todos = env.todo._call("GET", "/todos", headers=SUBJECT)["todos"]
        created = Counter(t["title"] for t in todos if t["title"].startswith(f"{mode}-failover-"))
        row.executed_twice = sum(1 for n in created.values() if n > 1)
        for act in acts:
            if act.acked:
                final = _state_after_failover(stub, act.action_id, time.monotonic() + 10)
                assert final != "READY", f"action {act.i} was confirmed and is READY again"
        failover_table[mode] = row
        print(f"\n{HEADER}\n{row.line()}")
        assert row.executed_twice == 0, "the downstream's key check: never two resources for one action"
        assert row.acknowledged > 0
        if wait:
            assert row.lost == 0, "with WAIT 1 a failover forgets no claim the sidecar acted on"
            assert row.sent_twice == 0, "with WAIT 1 no action is sent twice"
    finally:
        env.stop()
        setup.stop()
