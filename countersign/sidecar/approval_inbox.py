"""The approval inbox (--approval-inbox-listen): where the approval page posts the user's signed approval of a card,
out of band, never through the agent (issue 15 item 3; docs/mcp-front-door.md).

    POST /approvals/{action_id}    body: the compact JWS (or {"approval": "<JWS>"})
      verified on arrival as Confirm verifies it (signature, issuer, audience, lifetime, owner, action: the
      approval's own sub/tid/sid name the owner), and against the card in Redis (READY, its approval digest, the
      risk its acr must satisfy) -> recorded in the action's list cs:{A}:inbox (the action's slot), 202
      refused -> 400/403/404/409 with {"reason", "message", "check"}; nothing is recorded

A call waiting for the approval (the MCP front door's URL elicitation) on ANY sidecar takes it from Redis, once
(LPOP), and confirms the card with it: Confirm checks it again, atomically with the claim (claim.lua), so an approval
that expired or was replaced in between is still refused there. gRPC Confirm with an approval works as before.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from countersign.errors import CountersignError, FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from countersign.path import cards
from countersign.path.approval import CARD_CHECKS
from countersign.path.pipeline import Pipeline
from countersign.reasons import Reason
from countersign.store import CardRecord, RunRecord
from countersign.store.protocols import InboxStore
from countersign.v1 import common_pb2

ACTION_ID = re.compile(r"[0-9a-f]{32}")
MAX_BODY = 16 * 1024  # a JWS approval is a few hundred bytes
POLL_MAX = 0.1  # seconds between two looks into the inbox at most (backoff from 5 ms), like wait_settled
_HTTP = {
    "INVALID_ARGUMENT": 400,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "FAILED_PRECONDITION": 409,
    "UNAVAILABLE": 503,
    "DATA_LOSS": 409,
}


class ApprovalInbox:
    def __init__(self, store: InboxStore, pipeline: Pipeline, ttl_ms: int, clock: Callable[[], float] = time.time):
        self.store, self.pipeline, self.ttl_ms, self.clock = store, pipeline, ttl_ms, clock

    async def post(self, action_id: str, approval: str) -> None:
        """Verify ``approval`` for this action's READY card and record it for the waiting call; raise the refusal."""
        if not ACTION_ID.fullmatch(action_id):
            raise InvalidArgument(Reason.REQUEST_INVALID, "the action id is 32 lowercase hex digits")
        import jwt  # JOSE is loaded only when an approval arrives (a sidecar without approvals never imports it)

        try:
            claims: dict[str, Any] = jwt.decode(approval, options={"verify_signature": False})
        except jwt.PyJWTError as exc:
            raise _refused("malformed", f"the body is not a compact JWS approval: {exc}") from None
        if claims.get("act") != action_id:
            raise _refused("action", "the approval is for another action than the one it was posted to")
        found = await self.store.peek(action_id)
        if isinstance(found, RunRecord):
            raise FailedPrecondition(Reason.REQUEST_INVALID, "the action was confirmed already: it takes no approval")
        if not isinstance(found, CardRecord):
            raise NotFound(Reason.CONFIRMATION_EXPIRED, "no card waits under this action id (expired, or never issued)")
        try:
            owner = common_pb2.CallContext(
                actor_id=str(claims.get("sub", "")),
                tenant_id=str(claims.get("tid", "")),
                session_id=str(claims.get("sid", "")),
            )
        except ValueError:  # a lone surrogate (JSON's \ud800) in an unverified claim: no protobuf string (a 500)
            raise _refused("malformed", "the approval's sub, tid or sid is not text") from None
        checked = await self.pipeline.claims.approvals.check(
            self.pipeline.registry.signed_writes, owner, action_id, approval
        )
        if checked.refused is not None:
            raise _refused(checked.refused.check, checked.refused.message, checked.refused.issuer or "")
        assert checked.evidence is not None
        card = cards.open_card(self.pipeline.keyring, action_id, found)  # its MAC checked: DATA_LOSS if changed
        if checked.evidence.digest != card.approval_digest:
            raise _refused("digest", CARD_CHECKS["digest"])
        if card.risk and f",{card.risk}," not in checked.claim.risks:
            raise _refused("step_up", CARD_CHECKS["step_up"])
        await self.store.inbox_push(action_id, approval, self.ttl_ms)

    async def take(self, action_id: str) -> str | None:
        return await self.store.inbox_take(action_id)

    async def wait(
        self, action_id: str, seconds: float, tick: Callable[[float], Awaitable[None]], every: float = 1.0
    ) -> str | None:
        """The approval once one arrives (taken: no other call gets it); None after ``seconds``, or as soon as the
        card is no longer READY (another call of the action confirmed, rejected, or it expired). ``tick`` is
        called about every ``every`` seconds with the time waited (progress notifications)."""
        start = time.monotonic()
        deadline, next_tick, delay = start + seconds, start + every, 0.005
        while True:
            found = await self.store.inbox_take(action_id)
            if found is not None:
                return found
            now = time.monotonic()
            if now >= deadline:
                return None
            if now >= next_tick:
                if not isinstance(await self.store.peek(action_id), CardRecord):
                    return None
                await tick(now - start)
                next_tick = now + every
            await asyncio.sleep(min(delay, deadline - now))
            delay = min(delay * 2, POLL_MAX)

    def app(self) -> Starlette:
        async def receive(request: Request) -> JSONResponse:
            action_id = request.path_params["action_id"]
            body = await request.body()
            try:
                if len(body) > MAX_BODY:
                    raise InvalidArgument(Reason.REQUEST_INVALID, f"the body is larger than {MAX_BODY} bytes")
                await self.post(action_id, _approval_of(body))
            except CountersignError as exc:
                return JSONResponse(refusal_body(exc), status_code=_HTTP.get(exc.code.name, 500))
            return JSONResponse({"action_id": action_id, "state": "RECORDED"}, status_code=202)

        return Starlette(routes=[Route("/approvals/{action_id}", receive, methods=["POST"])])


def refusal_body(exc: CountersignError) -> dict[str, Any]:
    """What the inbox answers a refused request: {"reason", "message", and the refusal's metadata (check, ...)}."""
    return {"reason": exc.reason, "message": exc.message[:1000], **exc.metadata}


def _approval_of(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or not isinstance(doc.get("approval"), str):
            raise InvalidArgument(Reason.REQUEST_INVALID, 'the body is a JWS, or {"approval": "<JWS>"}')
        text = doc["approval"].strip()
    return text


def _refused(check: str, message: str, issuer: str = "") -> PermissionDenied:
    metadata = {"check": check, **({"issuer": issuer} if issuer else {})}
    return PermissionDenied(
        Reason.APPROVAL_INVALID,
        f"the approval was refused ({check}): {message}; nothing was recorded",
        metadata=metadata,
    )
