"""The only module that talks to Redis: runs the scripts in ``countersign/lua`` and maps their replies.

Every key of one action carries the action id as a hash tag (``cs:{A}:card``, ``cs:{A}:run``,
``cs:{A}:cont``), so every script touches one slot and runs unchanged on Redis Cluster.

Each method is one atomic transition. Any Redis failure (refused, timed out, lost) raises
``StoreUnavailable``: the caller fails closed (I7) and nothing executes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from importlib import resources
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from countersign.sidecar.errors import StoreUnavailable

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


@dataclass(frozen=True)
class Refused:
    """The claim (or reject) did not happen; nothing was changed."""

    why: str              # expired | forbidden | role
    tool: str = ""


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _b(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _run(reply: list[Any]) -> RunRecord:
    # {"run", state, kid, out, omac, reason[, binding, tool]}
    extra = [_s(v) for v in reply[6:8]] + ["", ""]
    return RunRecord(_s(reply[1]), _s(reply[2]), _b(reply[3]), _s(reply[4]), _s(reply[5]), extra[0], extra[1])


class Store:
    """Card and run records in Redis, one Lua script per transition."""

    def __init__(self, client: Any, *, op_timeout: float) -> None:
        self.client = client
        self.op_timeout = op_timeout
        self._scripts = {
            name: client.register_script(
                resources.files("countersign.lua").joinpath(f"{name}.lua").read_text(encoding="utf-8")
            )
            for name in ("issue", "claim", "settle", "reject", "peek")
        }

    @classmethod
    def from_url(cls, url: str, *, socket_timeout: float, connect_timeout: float, retries: int) -> Store:
        """A client with tight timeouts (not redis-py's defaults): fail fast, fail closed."""
        client = aioredis.Redis.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
            retry=Retry(NoBackoff(), retries),
            retry_on_timeout=retries > 0,
            health_check_interval=0,
            decode_responses=False,
            max_connections=256,
        )
        return cls(client, op_timeout=(socket_timeout + connect_timeout) * (retries + 1))

    async def close(self) -> None:
        await self.client.aclose()

    async def _call(self, awaitable: Awaitable[T]) -> T:
        try:
            async with asyncio.timeout(self.op_timeout):
                return await awaitable
        except (RedisError, OSError, TimeoutError) as exc:
            raise StoreUnavailable(f"the store did not answer: {type(exc).__name__}") from exc

    async def _script(self, name: str, keys: list[str], args: list[Any]) -> list[Any]:
        reply: list[Any] = await self._call(self._scripts[name](keys=keys, args=args))
        return reply

    async def ping(self) -> bool:
        return bool(await self._call(self.client.ping()))

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
        self, action_id: str, binding: str, denied: str, claim_id: str, lease_ms: int, run_ttl_ms: int
    ) -> CardRecord | RunRecord | Refused:
        """ready -> running. A CardRecord means the caller won and must settle."""
        reply = await self._script(
            "claim", [card_key(action_id), run_key(action_id)],
            [binding, denied, claim_id, lease_ms, run_ttl_ms],
        )
        kind = _s(reply[0])
        if kind == "won":
            return CardRecord(_s(reply[1]), _s(reply[2]), _b(reply[3]), _s(reply[4]), binding)
        if kind == "run":
            return _run(reply)
        return Refused(kind, _s(reply[1]) if len(reply) > 1 else "")

    async def settle(
        self, action_id: str, claim_id: str, state: str, out: bytes, omac: str, reason: str,
        receipt_status: str, run_ttl_ms: int,
    ) -> str:
        """running|unknown -> settled|unknown by the claim holder; returns ok, lost or gone."""
        reply = await self._script(
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

    async def peek(self, action_id: str) -> CardRecord | RunRecord | None:
        """Where the action stands (a lapsed lease is turned into unknown on the way)."""
        reply = await self._script("peek", [card_key(action_id), run_key(action_id)], [])
        kind = _s(reply[0])
        if kind == "run":
            return _run(reply)
        if kind == "card":
            return CardRecord(_s(reply[1]), _s(reply[5]), _b(reply[2]), _s(reply[3]), _s(reply[4]))
        return None
