"""The only module that talks to Redis: runs the scripts in ``countersign/lua`` and maps their replies.

Every key of one action carries the action id as a hash tag (``cs:{A}:card``, ``cs:{A}:run``,
``cs:{A}:cont``), so every script touches one slot and runs unchanged on Redis Cluster.

Each method is one atomic transition. Any Redis failure (refused, timed out, lost) raises
``StoreUnavailable``: the caller fails closed (I7) and nothing executes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException, RedisError

from countersign.errors import StoreUnavailable, Unavailable

T = TypeVar("T")


def card_key(action_id: str) -> str:
    return f"cs:{{{action_id}}}:card"


def run_key(action_id: str) -> str:
    return f"cs:{{{action_id}}}:run"


def cont_key(action_id: str) -> str:
    return f"cs:{{{action_id}}}:cont"


@dataclass(frozen=True)
class CardRecord:
    """A ready confirmation card as stored: body is canonical JSON, MAC'd under key ``kid``."""

    kid: str
    tool: str
    body: bytes
    mac: str
    binding: str = ""


@dataclass(frozen=True)
class RunRecord:
    """The action after its claim: running, unknown or settled (with the outcome, MAC'd)."""

    state: str            # running | unknown | settled
    kid: str
    out: bytes            # serialized countersign.v1.Action; empty while running
    omac: str
    reason: str = ""
    binding: str = ""
    tool: str = ""
    card: bytes = b""     # the sealed card it was claimed from: binding, key id and tool are checked against it
    cmac: str = ""


@dataclass(frozen=True)
class Refused:
    """The claim (or reject) did not happen; nothing was changed."""

    why: str              # expired | forbidden | role
    tool: str = ""


@dataclass(frozen=True)
class ContRecord:
    """A continuation as stored; ``mac`` covers binding, snapshot and request under ``kid``."""

    state: str            # pending | ready | running | settled | won (this caller claimed it) | lost
    kid: str = ""
    snapshot: bytes = b""
    request: str = ""
    mac: str = ""
    reply: bytes = b""    # when settled
    rmac: str = ""
    verdict: bytes = b""
    run: RunRecord | None = None   # when won: the action's record, for its receipt
    detail: str = ""      # not_ready: the action's state and reason


@dataclass(frozen=True)
class ReconcileWork:
    """An UNKNOWN action whose reconciliation this caller now holds."""

    card: CardRecord
    attempts: int
    unknown_since_ms: int
    now_ms: int


@dataclass(frozen=True)
class Anchor:
    """Where an action's chain ends: MAC'd under ``kid`` over (action, seq, head), so it cannot be rewritten."""

    kid: str
    mac: str


@dataclass(frozen=True)
class AuditEvidence:
    """Everything Redis holds about one action that the audit cross-check reads (raw fields)."""

    action_id: str
    events: list[tuple[str, bytes]]     # (stream entry id, event JSON), oldest first
    anchor: dict[str, str]              # seq, head, kid, mac; empty when absent
    card: dict[str, bytes]              # the ready card; empty when absent
    run: dict[str, bytes]               # the run record; empty when absent
    indexed: bool                       # listed in the unresolved index (cs:{open})


ID_KEY = "cs:id-key"      # the fingerprint of the id key the actions in this Redis were derived with
OPEN_KEY = "cs:{open}"   # actions that may need reconciling, scored by when to look (one key: fine per deployment)


def audit_key(action_id: str) -> str:
    return f"cs:{{{action_id}}}:audit"


def events_key(action_id: str) -> str:
    return f"cs:{{{action_id}}}:events"


def request_key(request: str) -> str:
    """The read facts and proposed actions of one user turn (a keyed hash of owner and request_id)."""
    return f"cs:req:{{{request}}}"


def quota_key(tenant: str) -> str:
    """What one tenant keeps, for its quota (a keyed hash of the tenant id as its own hash tag)."""
    return f"cs:quota:{{{tenant}}}"


def _host_port(node: str) -> tuple[str, int]:
    host, _, port = node.rpartition(":")
    return (host or node), int(port or 6379)


def _sentinel_url(url: str) -> tuple[list[tuple[str, int]], str, int, str | None]:
    """redis+sentinel://[:password@]h1:26379,h2:26379/service[/db]"""
    rest = url.split("://", 1)[1]
    password = None
    if "@" in rest:
        auth, rest = rest.rsplit("@", 1)
        password = auth.split(":", 1)[-1] or None
    hosts, _, path = rest.partition("/")
    parts = [p for p in path.split("/") if p]
    if not parts:
        raise ValueError("a sentinel URL names the master: redis+sentinel://host:26379/mymaster")
    return [_host_port(h) for h in hosts.split(",")], parts[0], int(parts[1]) if len(parts) > 1 else 0, password


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _b(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _run(reply: list[Any]) -> RunRecord:
    # {"run", state, kid, out, omac, reason, binding, tool, card, cmac}
    return RunRecord(_s(reply[1]), _s(reply[2]), _b(reply[3]), _s(reply[4]), _s(reply[5]), _s(reply[6]),
                     _s(reply[7]), _b(reply[8]), _s(reply[9]))


class Store:
    """Card and run records in Redis, one Lua script per transition."""

    wait_replicas = 0
    wait_timeout_ms = 100
    # called with (script, seconds) after every script's round trip, failed ones included (app.py wires the
    # countersign_redis_duration_seconds histogram here; None: not timed)
    observe: Callable[[str, float], None] | None = None

    def __init__(self, client: Any, *, op_timeout: float) -> None:
        self.client = client
        self.op_timeout = op_timeout
        self._scripts = {
            name: client.register_script(
                resources.files("countersign.lua").joinpath(f"{name}.lua").read_text(encoding="utf-8")
            )
            for name in ("issue", "claim", "release", "settle", "reject", "peek",
                         "cont_open", "cont_claim", "cont_settle", "cont_release",
                         "reconcile_claim", "reconcile_defer", "audit", "resolve", "quota")
        }

    @classmethod
    def from_url(cls, url: str, *, socket_timeout: float, connect_timeout: float, retries: int,
                 mode: str = "auto", wait_replicas: int = 0, wait_timeout_ms: int = 100) -> Store:
        """A client with tight timeouts (not redis-py's defaults): fail fast, fail closed.

        ``redis://``, ``rediss://``, ``unix://``: one server. ``redis+sentinel://h1:26379,h2:26379/master[/db]``:
        the master Sentinel names. ``redis+cluster://h1:7000,h2:7001`` (or ``mode="cluster"``): Redis Cluster.
        """
        common: dict[str, Any] = dict(socket_timeout=socket_timeout, socket_connect_timeout=connect_timeout,
                                      retry=Retry(NoBackoff(), retries), decode_responses=False)
        scheme = url.split("://", 1)[0].lower()
        if mode == "auto":
            mode = {"redis+sentinel": "sentinel", "redis+cluster": "cluster"}.get(scheme, "standalone")
        client: Any
        if mode == "sentinel":
            nodes, service, db, password = _sentinel_url(url)
            sentinel = Sentinel(nodes, sentinel_kwargs={"socket_timeout": socket_timeout,
                                                        "socket_connect_timeout": connect_timeout},
                                **common)  # type: ignore[no-untyped-call]
            client = sentinel.master_for(service, db=db, password=password, max_connections=256)
        elif mode == "cluster":
            if wait_replicas:
                raise ValueError("--redis-wait-replicas is not supported with Redis Cluster yet")
            plain = "redis://" + url.split("://", 1)[1] if scheme == "redis+cluster" else url
            first, _, _ = plain.partition(",")
            startup = [ClusterNode(*_host_port(n)) for n in plain.split("://", 1)[1].split("/")[0].split(",")]
            client = RedisCluster(startup_nodes=startup, max_connections=256,
                                  cluster_error_retry_attempts=max(1, retries), **common) if len(startup) > 1 \
                else RedisCluster.from_url(first, max_connections=256, **common)
        elif mode == "standalone":
            client = aioredis.Redis.from_url(url, retry_on_timeout=retries > 0, health_check_interval=0,
                                             max_connections=256, **common)
        else:
            raise ValueError(f"unknown redis mode {mode!r}: auto, standalone, sentinel or cluster")
        store = cls(client, op_timeout=(socket_timeout + connect_timeout) * (retries + 1))
        store.wait_replicas, store.wait_timeout_ms = wait_replicas, wait_timeout_ms
        return store

    async def close(self) -> None:
        await self.client.aclose()

    async def ping(self) -> None:
        """Raise StoreUnavailable unless Redis answers a PING (the readiness probe)."""
        await self._call(self.client.ping())

    async def _call(self, awaitable: Awaitable[T]) -> T:
        try:
            async with asyncio.timeout(self.op_timeout):
                return await awaitable
        except (RedisError, RedisClusterException, OSError, TimeoutError) as exc:
            raise StoreUnavailable(f"the store did not answer: {type(exc).__name__}") from exc

    async def _script(self, name: str, keys: list[str], args: list[Any]) -> list[Any]:
        if self.observe is None:
            reply: list[Any] = await self._call(self._scripts[name](keys=keys, args=args))
            return reply
        start = time.perf_counter()
        try:
            reply = await self._call(self._scripts[name](keys=keys, args=args))
        finally:
            self.observe(name, time.perf_counter() - start)
        return reply

    async def _acknowledged(self, name: str, keys: list[str], args: list[Any]) -> tuple[list[Any], int]:
        """Run a script; with --redis-wait-replicas, WAIT on the same connection: (reply, replicas that acked)."""
        if not self.wait_replicas:
            return await self._script(name, keys, args), self.wait_replicas
        pipe = self.client.pipeline(transaction=False)
        await self._scripts[name](keys=keys, args=args, client=pipe)
        pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
        start = time.perf_counter()
        try:
            reply, acked = await self._call(pipe.execute())
        finally:
            if self.observe is not None:
                self.observe(name, time.perf_counter() - start)   # the script and its WAIT: one round trip
        return reply, int(acked)

    def _not_acknowledged(self, name: str, acked: int) -> Unavailable:
        return Unavailable("REPLICAS_NOT_ACKNOWLEDGED",
                           f"{acked} of {self.wait_replicas} replicas acknowledged the {name}; not acting on it",
                           retry_after=1.0)

    async def _durable_script(self, name: str, keys: list[str], args: list[Any]) -> list[Any]:
        """A transition the sidecar acts on: refused (UNAVAILABLE) when too few replicas acknowledged it
        (DESIGN §7)."""
        reply, acked = await self._acknowledged(name, keys, args)
        if acked < self.wait_replicas:
            raise self._not_acknowledged(name, acked)
        return reply

    # -- transitions ---------------------------------------------------------------------------

    async def issue(self, action_id: str, card: CardRecord, ttl_ms: int) -> CardRecord | RunRecord | None:
        """Create the card; None when created, else the card or record that exists already."""
        reply = await self._script(
            "issue", [card_key(action_id), run_key(action_id)],
            [card.binding, card.tool, card.body, card.mac, card.kid, ttl_ms],
        )
        kind = _s(reply[0])
        if kind == "issued":
            return None
        if kind == "card":
            return CardRecord(_s(reply[1]), card.tool, _b(reply[2]), _s(reply[3]), card.binding)
        return _run(reply)

    async def claim(
        self, action_id: str, binding: str, denied: str, claim_id: str, lease_ms: int
    ) -> CardRecord | RunRecord | Refused:
        """ready -> running. A CardRecord means the caller won and must settle (or release).

        A claim too few replicas acknowledged is not acted on: a won one is given back at once (release.lua),
        so the card is READY again and the same token can be confirmed when the replicas answer."""
        keys = [card_key(action_id), run_key(action_id)]
        reply, acked = await self._acknowledged("claim", keys, [binding, denied, claim_id, lease_ms])
        kind = _s(reply[0])
        if acked < self.wait_replicas:
            if kind == "won":
                await self._script("release", keys, [claim_id])
            raise self._not_acknowledged("claim", acked)
        if kind == "won":
            return CardRecord(_s(reply[1]), _s(reply[2]), _b(reply[3]), _s(reply[4]), binding)
        if kind == "run":
            return _run(reply)
        return Refused(kind, _s(reply[1]) if len(reply) > 1 else "")

    async def release(self, action_id: str, claim_id: str) -> str:
        """running -> ready by the claim holder that never sent the request: ready, expired or lost."""
        reply = await self._script("release", [card_key(action_id), run_key(action_id)], [claim_id])
        return _s(reply[0])

    async def settle(
        self, action_id: str, claim_id: str, state: str, out: bytes, omac: str, reason: str,
        receipt_status: str, run_ttl_ms: int,
    ) -> str:
        """running|unknown -> settled|unknown by the claim holder; returns ok, lost or gone."""
        reply = await self._durable_script(
            "settle", [run_key(action_id), cont_key(action_id)],
            [claim_id, state, out, omac, reason, receipt_status, run_ttl_ms],
        )
        return _s(reply[0])

    async def reject(
        self, action_id: str, binding: str, out: bytes, omac: str, run_ttl_ms: int
    ) -> RunRecord | Refused | None:
        """ready -> rejected; None when rejected now."""
        reply = await self._script(
            "reject", [card_key(action_id), run_key(action_id)], [binding, out, omac, run_ttl_ms]
        )
        kind = _s(reply[0])
        if kind == "rejected":
            return None
        if kind == "run":
            return _run(reply)
        return Refused(kind)

    async def wait_settled(self, action_id: str, run: RunRecord, seconds: float) -> RunRecord:
        """Poll (bounded, with backoff) until a running action settles; the last record seen."""
        deadline = time.monotonic() + seconds
        delay = 0.005
        while run.state == "running" and time.monotonic() < deadline:
            await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 0.1)
            found = await self.peek(action_id)
            if not isinstance(found, RunRecord):
                break
            run = found
        return run

    async def peek(self, action_id: str) -> CardRecord | RunRecord | None:
        """Where the action stands (a lapsed lease is turned into unknown on the way)."""
        reply = await self._script("peek", [card_key(action_id), run_key(action_id)], [])
        kind = _s(reply[0])
        if kind == "run":
            return _run(reply)
        if kind == "card":
            return CardRecord(_s(reply[1]), _s(reply[5]), _b(reply[2]), _s(reply[3]), _s(reply[4]))
        return None

    # -- continuations (one state machine per action, under the action's hash tag) --------------

    async def cont_open(self, action_id: str, binding: str, kid: str, snapshot: bytes, request: str, mac: str,
                        ttl_ms: int) -> ContRecord | Refused:
        reply = await self._script("cont_open", [cont_key(action_id), run_key(action_id), card_key(action_id)],
                                   [binding, kid, snapshot, request, mac, ttl_ms])
        if _s(reply[0]) != "cont":
            return Refused(_s(reply[0]))
        return ContRecord(_s(reply[1]), _s(reply[2]), _b(reply[3]), _s(reply[4]), _s(reply[5]))

    async def cont_claim(self, action_id: str, binding: str, lease_ms: int, claim_id: str) -> ContRecord | Refused:
        """ready -> running under claim_id (a lapsed lease is claimed again); state "won" for the winner."""
        reply = await self._script("cont_claim", [cont_key(action_id), run_key(action_id)],
                                   [binding, lease_ms, claim_id])
        kind = _s(reply[0])
        if kind == "won":
            run = RunRecord("settled", _s(reply[5]), _b(reply[6]), _s(reply[7]), binding=_s(reply[8]),
                            tool=_s(reply[9]), card=_b(reply[10]), cmac=_s(reply[11]))
            return ContRecord("won", _s(reply[1]), _b(reply[2]), _s(reply[3]), _s(reply[4]), run=run)
        if kind == "settled":
            return ContRecord("settled", _s(reply[1]), _b(reply[2]), _s(reply[3]), _s(reply[4]),
                              _b(reply[5]), _s(reply[6]), _b(reply[7]))
        if kind == "running":
            return ContRecord("running")
        if kind == "not_ready":
            return ContRecord("pending", detail=f"{_s(reply[1])} {_s(reply[2])}".strip())
        return Refused(kind)

    async def cont_settle(self, action_id: str, binding: str, reply_text: bytes, rmac: str,
                          verdict: bytes, claim_id: str) -> ContRecord | Refused:
        """running -> settled by the holder of claim_id. State settled (now), replayed (this holder settled
        before), lost (another claim holds it), or the state nobody claimed it in."""
        reply = await self._script("cont_settle", [cont_key(action_id)],
                                   [binding, reply_text, rmac, verdict, claim_id])
        kind = _s(reply[0])
        if kind == "ok":
            return ContRecord("settled", reply=reply_text, rmac=rmac, verdict=verdict)
        if kind == "settled":
            return ContRecord("replayed", reply=_b(reply[1]), rmac=_s(reply[2]), verdict=_b(reply[3]))
        if kind == "lost":
            return ContRecord("lost", detail=_s(reply[1]))
        if kind == "not_running":
            return ContRecord(_s(reply[1]))
        return Refused(kind)

    async def cont_release(self, action_id: str, binding: str, claim_id: str) -> str:
        """running -> ready by the holder of claim_id; returns ok, lost, the state it was in, none or forbidden."""
        reply = await self._script("cont_release", [cont_key(action_id)], [binding, claim_id])
        return _s(reply[1]) if _s(reply[0]) == "state" else _s(reply[0])

    # -- what one user turn did: read facts and proposed actions -------------------------------

    async def remember(self, request: str, entry: bytes, ttl_ms: int, keep: int = 64) -> None:
        key = request_key(request)
        pipe = self.client.pipeline(transaction=False)
        pipe.rpush(key, entry)
        pipe.ltrim(key, -keep, -1)
        pipe.pexpire(key, ttl_ms)
        await self._call(pipe.execute())

    async def recall(self, request: str) -> list[bytes]:
        entries: list[bytes] = await self._call(self.client.lrange(request_key(request), 0, -1))
        return entries

    # -- the tenant's quota (its own slot: one more round trip, and it runs on Cluster) ------------

    async def quota(self, tenant: str, stored: list[str], members: list[str], cap: int,
                    ttl_ms: int) -> tuple[bool, int, int]:
        """Count what a tenant keeps: the stored members always, the new ones only within the cap.
        Returns (counted, members held, ms when the oldest stops counting); not counted: they were not added."""
        reply = await self._script("quota", [quota_key(tenant)], [cap, ttl_ms, len(stored), *stored, *members])
        return _s(reply[0]) == "ok", int(reply[1]), int(reply[2]) if len(reply) > 2 else 0

    async def quota_forget(self, tenant: str, members: list[str]) -> None:
        """Stop counting members whose records were never stored (a prepare refused: no card)."""
        await self._call(self.client.zrem(quota_key(tenant), *members))

    # -- reconciliation ------------------------------------------------------------------------

    async def reconcile_claim(self, action_id: str, claim_id: str, work_lease_ms: int) -> Any:
        """unknown -> (reconciler holds it). Returns ReconcileWork, a RunRecord, or the word busy/none."""
        reply = await self._durable_script("reconcile_claim", [run_key(action_id)], [claim_id, work_lease_ms])
        kind = _s(reply[0])
        if kind == "won":
            card = CardRecord(_s(reply[1]), _s(reply[2]), _b(reply[3]), _s(reply[4]))
            return ReconcileWork(card, int(reply[5]), int(reply[6]), int(reply[7]))
        if kind == "run":
            return _run(reply)
        return kind

    async def run_tool(self, action_id: str) -> str:
        """The tool of an action's run record ("" when there is none); read-only."""
        tool = await self._call(self.client.hget(run_key(action_id), "tool"))
        return _s(tool) if tool is not None else ""

    async def reconcile_defer(self, action_id: str, claim_id: str, delay_ms: int) -> str:
        reply = await self._script("reconcile_defer", [run_key(action_id)], [claim_id, delay_ms])
        return _s(reply[0])

    async def open_add(self, action_id: str, due_ms: int) -> None:
        """Index an action that may need reconciling (running now, or unknown), by when to look at it."""
        await self._call(self.client.zadd(OPEN_KEY, {action_id: due_ms}))

    async def open_remove(self, action_id: str) -> None:
        await self._call(self.client.zrem(OPEN_KEY, action_id))

    async def open_due(self, now_ms: int, count: int) -> list[str]:
        rows = await self._call(self.client.zrangebyscore(OPEN_KEY, "-inf", now_ms, start=0, num=count))
        return [_s(r) for r in rows]

    async def scan_runs(self, cursor: int, count: int) -> tuple[int, list[str]]:
        """One step of a SCAN over run records; returns the next cursor and action ids seen."""
        if not isinstance(self.client, aioredis.Redis):      # a cluster: one full pass over every node
            async def every() -> list[str]:
                return [_s(k)[4:-5] async for k in self.client.scan_iter(match="cs:{*}:run", count=count)]

            return 0, await self._call(every())
        nxt, keys = await self._call(self.client.scan(cursor=cursor, match="cs:{*}:run", count=count))
        return int(nxt), [_s(k)[4:-5] for k in keys]

    async def run_states(self, action_ids: list[str]) -> list[tuple[str, int, int, str]]:
        """(state, lease ms, next reconcile ms, tool) of each run record, in one round trip."""
        if not action_ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for action_id in action_ids:
            pipe.hmget(run_key(action_id), "st", "lease", "rdue", "tool")
        rows = await self._call(pipe.execute())
        return [(_s(st or b""), int(lease or 0), int(due or 0), _s(tool or b"")) for st, lease, due, tool in rows]

    # -- audit chains and operator resolution ----------------------------------------------------

    async def audit_append(self, action_id: str, after: tuple[int, str], events: list[tuple[bytes, str]],
                           anchor: Anchor, expiry: str, ttl_ms: int) -> tuple[bool, int, str]:
        """Append chained events if the action's chain still ends at ``after`` (seq, head), and set the
        anchor (MAC'd by the caller) in the same step. expiry: keep | expire | same (lua/audit.lua).
        Returns (ok, seq, head now)."""
        args: list[Any] = [after[0], after[1], anchor.kid, anchor.mac, expiry, ttl_ms]
        for event, mac in events:
            args += [event, mac]
        reply = await self._script("audit", [audit_key(action_id), events_key(action_id)], args)
        if _s(reply[0]) == "ok":
            return True, int(reply[1]), events[-1][1]
        return False, int(reply[1]), _s(reply[2])

    async def events(self, action_id: str) -> list[tuple[str, bytes]]:
        rows = await self._call(self.client.xrange(events_key(action_id)))
        return [(_s(entry_id), fields[b"e"]) for entry_id, fields in rows]

    async def audit_actions(self) -> list[str]:
        """Every action that has an audit chain."""
        async def every() -> list[str]:
            return [_s(key)[4:-8] async for key in self.client.scan_iter(match="cs:{*}:events", count=1000)]

        return await self._call(every())

    async def audited_ids(self) -> list[str]:
        """Every action Redis knows anything about: a card, a run record, a chain or anchor, or an entry in
        the unresolved index. What ``audit verify`` cross-checks (one SCAN pass; read-only)."""
        async def every() -> set[str]:
            ids = {_s(member) for member in await self.client.zrange(OPEN_KEY, 0, -1)}
            async for key in self.client.scan_iter(match="cs:{*}:*", count=1000):
                name = _s(key)
                tag, _, kind = name[3:].rpartition(":")
                if kind in ("card", "run", "audit", "events") and tag.startswith("{") and tag.endswith("}"):
                    ids.add(tag[1:-1])
            return ids

        return sorted(await self._call(every()))

    async def audit_evidence(self, action_ids: list[str]) -> list[AuditEvidence]:
        """What Redis holds about each action, in one round trip (read-only: no transition is applied)."""
        if not action_ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for action_id in action_ids:
            pipe.xrange(events_key(action_id))
            pipe.hgetall(audit_key(action_id))
            pipe.hgetall(card_key(action_id))
            pipe.hgetall(run_key(action_id))
            pipe.zscore(OPEN_KEY, action_id)
        rows = await self._call(pipe.execute())
        out = []
        for i, action_id in enumerate(action_ids):
            events, anchor, card, run, indexed = rows[5 * i:5 * i + 5]
            out.append(AuditEvidence(
                action_id, [(_s(entry_id), fields.get(b"e", b"")) for entry_id, fields in events],
                {_s(k): _s(v) for k, v in anchor.items()}, {_s(k): v for k, v in card.items()},
                {_s(k): v for k, v in run.items()}, indexed is not None))
        return out

    async def record(self, action_id: str) -> dict[str, bytes]:
        """The raw run record (read-only: no transition is applied)."""
        raw: dict[bytes, bytes] = await self._call(self.client.hgetall(run_key(action_id)))
        return {_s(k): v for k, v in raw.items()}

    async def resolve(self, action_id: str, out: bytes, omac: str, reason: str, receipt_status: str,
                      run_ttl_ms: int) -> str:
        """unknown|review -> settled by an operator; the record then gets the replay TTL."""
        reply = await self._script("resolve", [run_key(action_id), cont_key(action_id)],
                                   [out, omac, reason, receipt_status, run_ttl_ms])
        return "ok" if _s(reply[0]) == "ok" else _s(reply[1])

    # -- the id key ----------------------------------------------------------------------------

    async def pin_id_key(self, fingerprint: str) -> str:
        """The id key's fingerprint every sidecar on this Redis must share: the first one to start records its
        own; later ones read it back."""
        await self._call(self.client.set(ID_KEY, fingerprint, nx=True))   # (SET NX GET needs Redis 7)
        pinned = await self._call(self.client.get(ID_KEY))
        return fingerprint if pinned is None else _s(pinned)
