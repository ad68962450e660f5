"""The example app backend's HTTP face: the approval page, the signing endpoints and the JWKS.

    GET  /.well-known/jwks.json   the public key the sidecar verifies with
    POST /cards                   the host hands over a card to show: {card...} -> {"url": "/approvals/<id>"}
    GET  /approvals/{action_id}   the page the signed-in user sees: the card's preview and an Approve button
    POST /approve                 the user approves: {card...} or {"action_id"} of a card handed over before
                                  (JSON, or the page's form) -> {"approval", "digest", "jti", "inbox"?}
    POST /grants                  {"capability", "uses", "ttl_s", "args"?} -> {"grant"}
    POST /context                 {"admin"?: {id, mode}} -> {"assertion"}: the user's session, signed

The signed-in user is, in this example only, stated by the caller in ``X-Demo-User: tenant/actor/session``
(or a ``demo_user`` cookie) with an optional ``X-Demo-Role``; a real app takes it from its login session.
The digest is recomputed here from the card as shown; a digest the host sends along is only compared.
"""

from __future__ import annotations

import html
import json
import time
from collections import OrderedDict
from typing import Any

import aiohttp
from aiohttp import web

from .signing import Card, CardError, Signer, User

MAX_CARDS = 1000
MAX_GRANT_USES = 1000
MAX_GRANT_TTL_S = 7 * 24 * 3600
ACR_PASSWORD = "urn:countersign:demo:acr:pwd"
ACR_MFA = "urn:countersign:demo:acr:mfa"

SIGNER = web.AppKey("signer", Signer)
CARDS = web.AppKey("cards", OrderedDict)  # type: ignore[var-annotated]
INBOX = web.AppKey("inbox", str)


def make_app(signer: Signer, *, inbox: str = "") -> web.Application:
    app = web.Application(client_max_size=256 * 1024)
    app[SIGNER], app[CARDS], app[INBOX] = signer, OrderedDict(), inbox
    app.router.add_get("/.well-known/jwks.json", jwks)
    app.router.add_post("/cards", post_card)
    app.router.add_get("/approvals/{action_id}", approval_page)
    app.router.add_post("/approve", approve)
    app.router.add_post("/grants", grants)
    app.router.add_post("/context", context)
    return app


def _refuse(status: int, reason: str, message: str) -> web.Response:
    return web.json_response({"reason": reason, "message": message}, status=status)


def _user(request: web.Request) -> User | None:
    raw = request.headers.get("X-Demo-User") or request.cookies.get("demo_user", "")
    parts = raw.split("/")
    if len(parts) != 3 or not all(parts):
        return None
    return User(parts[0], parts[1], parts[2], request.headers.get("X-Demo-Role", "user"))


async def _body(request: web.Request) -> dict[str, Any]:
    if request.content_type == "application/x-www-form-urlencoded":
        return dict(await request.post())
    try:
        body = await request.json()
    except ValueError as exc:
        raise CardError("REQUEST_INVALID", "the body must be JSON") from exc
    if not isinstance(body, dict):
        raise CardError("REQUEST_INVALID", "the body must be a JSON object")
    return body


async def jwks(request: web.Request) -> web.Response:
    return web.json_response(request.app[SIGNER].jwks(), headers={"Cache-Control": "max-age=300"})


async def post_card(request: web.Request) -> web.Response:
    try:
        card = Card.from_json(await _body(request))
    except CardError as exc:
        return _refuse(400, exc.reason, str(exc))
    cards: OrderedDict[str, Card] = request.app[CARDS]
    cards[card.action_id] = card
    while len(cards) > MAX_CARDS:
        cards.popitem(last=False)
    return web.json_response({"url": f"/approvals/{card.action_id}", "digest": card.digest()})


async def approval_page(request: web.Request) -> web.Response:
    card: Card | None = request.app[CARDS].get(request.match_info["action_id"])
    if card is None:
        return web.Response(status=404, text="No such card: it was never shown here, or it was replaced.")
    p = card.preview
    details = "".join(
        f"<tr><th>{html.escape(d['label'])}</th><td>{html.escape(d['value'])}</td></tr>" for d in p["details"]
    )
    args = html.escape(json.dumps(card.arguments, ensure_ascii=False, indent=2, sort_keys=True))
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(p["title"])}</title></head>
<body>
<h1>{html.escape(p["title"])}</h1>
<p class="target">{html.escape(p["target"])}</p>
<p class="impact">{html.escape(p["impact"])}</p>
<table>{details}</table>
<details><summary>What will be sent ({html.escape(card.tool)})</summary><pre>{args}</pre></details>
<p>Policy {html.escape(card.policy_version)}; this card expires at {card.expires_at_ms} ms.</p>
<form method="post" action="/approve">
<input type="hidden" name="action_id" value="{html.escape(card.action_id)}">
<button type="submit">Approve</button>
</form>
</body></html>"""
    return web.Response(text=page, content_type="text/html")


async def approve(request: web.Request) -> web.Response:
    user = _user(request)
    if user is None:
        return _refuse(401, "NOT_SIGNED_IN", "sign in first (X-Demo-User: tenant/actor/session)")
    try:
        body = await _body(request)
        shown = set(body) <= {"action_id", "step_up"}  # the page's form names a card handed over before
        card = request.app[CARDS].get(body.get("action_id")) if shown else None
        card = card or Card.from_json(body)
    except CardError as exc:
        return _refuse(400, exc.reason, str(exc))
    if card.expires_at_ms <= time.time() * 1000:
        return _refuse(409, "CARD_EXPIRED", "the card expired: ask the assistant again")
    digest = card.digest()
    sent = body.get("approval_digest")
    if sent is not None and sent != digest:  # the host showed one thing and asks us to sign another
        return _refuse(409, "DIGEST_MISMATCH", "the card's approval_digest is not the digest of what this page shows")
    step_up = body.get("step_up") in (True, "true", "1")
    acr, amr = (ACR_MFA, ["pwd", "otp"]) if step_up else (ACR_PASSWORD, ["pwd"])
    signer: Signer = request.app[SIGNER]
    approval = signer.approval(card, user, acr=acr, amr=amr)
    answer: dict[str, Any] = {"approval": approval, "digest": digest, "action_id": card.action_id}
    if request.app[INBOX]:
        answer["inbox"] = await _deliver(request.app[INBOX], card.action_id, approval)
    return web.json_response(answer)


async def _deliver(inbox: str, action_id: str, approval: str) -> int:
    """Hand the approval to the sidecar's inbox (never through the agent); the inbox's HTTP status."""
    timeout = aiohttp.ClientTimeout(total=5)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(inbox, json={"action_id": action_id, "approval": approval}, allow_redirects=False) as answer,
        ):
            return answer.status
    except (aiohttp.ClientError, TimeoutError):
        return 0


async def grants(request: web.Request) -> web.Response:
    user = _user(request)
    if user is None:
        return _refuse(401, "NOT_SIGNED_IN", "sign in first (X-Demo-User: tenant/actor/session)")
    try:
        body = await _body(request)
    except CardError as exc:
        return _refuse(400, exc.reason, str(exc))
    capability, uses, ttl, args = body.get("capability"), body.get("uses"), body.get("ttl_s", 3600), body.get("args")
    if not isinstance(capability, str) or not capability:
        return _refuse(400, "REQUEST_INVALID", "capability is required")
    if isinstance(uses, bool) or not isinstance(uses, int) or not 1 <= uses <= MAX_GRANT_USES:
        return _refuse(400, "REQUEST_INVALID", f"uses must be from 1 to {MAX_GRANT_USES}")
    if isinstance(ttl, bool) or not isinstance(ttl, int) or not 1 <= ttl <= MAX_GRANT_TTL_S:
        return _refuse(400, "REQUEST_INVALID", f"ttl_s must be from 1 to {MAX_GRANT_TTL_S}")
    if args is not None and not isinstance(args, dict):
        return _refuse(400, "REQUEST_INVALID", "args must be an object")
    grant = request.app[SIGNER].grant(user, capability=capability, uses=uses, ttl=ttl, args=args)
    return web.json_response({"grant": grant})


async def context(request: web.Request) -> web.Response:
    user = _user(request)
    if user is None:
        return _refuse(401, "NOT_SIGNED_IN", "sign in first (X-Demo-User: tenant/actor/session)")
    try:
        body = await _body(request)
    except CardError as exc:
        return _refuse(400, exc.reason, str(exc))
    admin = body.get("admin")
    if admin is not None and (not isinstance(admin, dict) or user.role != "admin"):
        return _refuse(403, "NOT_ADMIN", "only an admin gets an admin context")
    return web.json_response({"assertion": request.app[SIGNER].context(user, admin=admin)})
