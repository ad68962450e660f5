"""The example approval service as a real process: what it signs verifies against its published JWKS URL.

Its digest is its own implementation of docs/approvals.md; the sidecar side computes the card's digest with
countersign.approvals.digest: an approval verifies only if the two agree.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from countersign.approvals import ApprovalInvalid, GrantExpected, Verifier, approval_digest
from countersign.testing import processes
from countersign.testing.approval_issuer import expected
from countersign.testing.approvals import write_settings

ACTION = "5f1e0c9a2b7d4e3f8a6b1c0d9e8f7a6b"
EXPIRES_MS = int(time.time() * 1000) + 300_000
CARD: dict[str, Any] = {
    "action_id": ACTION,
    "tool_name": "create_todo",
    "prepared_arguments_json": json.dumps({"title": "Buy milk <b>now</b>", "dueAt": "2026-12-02T18:00:00+08:00"}),
    "preview": {
        "title": "创建待办",
        "target": "Buy milk <script>alert(1)</script>",
        "impact": "确认后将创建一条待办。",
        "details": [{"label": "Due", "value": "2026-12-02 18:00"}],
    },
    "policy_version": "2026-11-29.1",
    "expires_at_ms": EXPIRES_MS,
}
ALICE = {"X-Demo-User": "t1/alice/s1"}


def card_digest(card: dict[str, Any] = CARD) -> str:
    """The digest as the sidecar computes it for this card."""
    args = json.loads(card["prepared_arguments_json"])
    return approval_digest(card["tool_name"], args, card["preview"], card["policy_version"], card["expires_at_ms"])


class Inbox:
    """A real HTTP endpoint standing in for the sidecar's approvals inbox: records what reached it."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append(await request.json())
        return web.json_response({"ok": True}, status=202)


@pytest.fixture
async def inbox() -> AsyncIterator[Inbox]:
    box = Inbox()
    web_app = web.Application()
    web_app.router.add_post("/inbox", box.handle)
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    box.url = f"http://127.0.0.1:{runner.addresses[0][1]}/inbox"
    yield box
    await runner.cleanup()


def start_service(work: Path, *extra: str) -> processes.Proc:
    cmd = [sys.executable, "-m", "examples.approval_service", "--port", "0", "--key-file", str(work / "app.pem")]
    return processes._start([*cmd, *extra], work, "approvals")


@pytest.fixture
def service(tmp_path: Path, inbox: Inbox) -> Iterator[processes.Proc]:
    proc = start_service(tmp_path, "--inbox", inbox.url)
    yield proc
    proc.stop()


@pytest.fixture
async def verifier(tmp_path: Path, service: processes.Proc) -> AsyncIterator[Verifier]:
    settings = write_settings(
        tmp_path / "approvals.json",
        [{"issuer": service.info["issuer"], "audience": "countersign", "jwks": service.info["jwks_url"]}],
        step_up={"high": ["urn:countersign:demo:acr:mfa"]},
    )
    loaded = await Verifier.load(settings)
    yield loaded
    await loaded.close()


async def call(proc: processes.Proc, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.request(method, proc.info["url"] + path, **kwargs) as r:
        body = await r.read()
        return r.status, json.loads(body) if r.content_type == "application/json" else body.decode()


def alice_card(**overrides: Any) -> Any:
    return expected(now=time.time(), action_id=ACTION, digest=card_digest(), **overrides)


async def test_an_approval_signed_by_the_service_verifies_against_its_jwks_url(
    service: processes.Proc, verifier: Verifier, inbox: Inbox
) -> None:
    status, answer = await call(service, "POST", "/approve", json=CARD, headers=ALICE)
    assert status == 200 and answer["digest"] == card_digest()  # two implementations of one construction agree
    evidence = await verifier.verify_approval_async(answer["approval"], expect=alice_card())
    assert evidence.kid == service.info["kid"] and evidence.acr == "urn:countersign:demo:acr:pwd"
    # the approval went to the inbox, not back through the agent only
    assert inbox.received == [{"action_id": ACTION, "approval": answer["approval"]}] and answer["inbox"] == 202


async def test_a_card_whose_claimed_digest_is_not_what_the_page_shows_is_not_signed(
    service: processes.Proc, inbox: Inbox
) -> None:
    forged = {**CARD, "approval_digest": card_digest({**CARD, "policy_version": "other"})}
    status, answer = await call(service, "POST", "/approve", json=forged, headers=ALICE)
    assert (status, answer["reason"]) == (409, "DIGEST_MISMATCH") and inbox.received == []
    status, _ = await call(service, "POST", "/approve", json={**CARD, "approval_digest": card_digest()}, headers=ALICE)
    assert status == 200


async def test_a_host_that_shows_other_arguments_gets_an_approval_that_fails_the_digest(
    service: processes.Proc, verifier: Verifier
) -> None:
    shown = {**CARD, "prepared_arguments_json": json.dumps({"title": "Buy milk"})}  # not the card in Redis
    _, answer = await call(service, "POST", "/approve", json=shown, headers=ALICE)
    with pytest.raises(ApprovalInvalid) as caught:
        await verifier.verify_approval_async(answer["approval"], expect=alice_card())
    assert caught.value.check == "digest"


async def test_the_page_shows_the_card_escaped_and_its_form_approves_as_the_cookie_user(
    service: processes.Proc, verifier: Verifier
) -> None:
    status, posted = await call(service, "POST", "/cards", json=CARD)
    assert status == 200 and posted == {"url": f"/approvals/{ACTION}", "digest": card_digest()}
    status, page = await call(service, "GET", posted["url"])
    assert status == 200 and "创建待办" in page and "Buy milk &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>" not in page
    status, answer = await call(
        service, "POST", "/approve", data={"action_id": ACTION}, cookies={"demo_user": "t1/alice/s1"}
    )
    assert status == 200
    await verifier.verify_approval_async(answer["approval"], expect=alice_card())


async def test_bad_or_expired_cards_are_not_signed(service: processes.Proc, inbox: Inbox) -> None:
    no_expiry = {k: v for k, v in CARD.items() if k != "expires_at_ms"}
    for body in (
        {},
        {"action_id": "never-shown"},
        {**CARD, "preview": {"title": 1}},
        {**no_expiry, "expires_at": "soon"},
    ):
        status, answer = await call(service, "POST", "/approve", json=body, headers=ALICE)
        assert (status, answer["reason"]) == (400, "CARD_INVALID"), body
    status, answer = await call(
        service, "POST", "/approve", data=b"{", headers={**ALICE, "Content-Type": "application/json"}
    )
    assert (status, answer["reason"]) == (400, "REQUEST_INVALID")
    expired = {**CARD, "expires_at_ms": int(time.time() * 1000) - 1}
    status, answer = await call(service, "POST", "/approve", json=expired, headers=ALICE)
    assert (status, answer["reason"]) == (409, "CARD_EXPIRED") and inbox.received == []


async def test_nobody_signed_in_gets_nothing_signed(service: processes.Proc) -> None:
    for path, body in (("/approve", CARD), ("/grants", {"capability": "todo.create", "uses": 2}), ("/context", {})):
        status, answer = await call(service, "POST", path, json=body)
        assert (status, answer["reason"]) == (401, "NOT_SIGNED_IN")


async def test_bob_approving_alices_card_is_refused_as_owner(service: processes.Proc, verifier: Verifier) -> None:
    _, answer = await call(service, "POST", "/approve", json=CARD, headers={"X-Demo-User": "t1/bob/s9"})
    with pytest.raises(ApprovalInvalid) as caught:
        await verifier.verify_approval_async(answer["approval"], expect=alice_card())
    assert caught.value.check == "owner"


async def test_step_up_is_what_the_user_did_and_a_high_risk_card_needs_it(
    service: processes.Proc, verifier: Verifier
) -> None:
    _, plain = await call(service, "POST", "/approve", json=CARD, headers=ALICE)
    with pytest.raises(ApprovalInvalid) as caught:
        await verifier.verify_approval_async(plain["approval"], expect=alice_card(risk="high"))
    assert caught.value.check == "step_up"
    _, strong = await call(service, "POST", "/approve", json={**CARD, "step_up": True}, headers=ALICE)
    evidence = await verifier.verify_approval_async(strong["approval"], expect=alice_card(risk="high"))
    assert evidence.amr == ("pwd", "otp")


async def test_grants_and_session_assertions_signed_by_the_service_verify(
    service: processes.Proc, verifier: Verifier
) -> None:
    body = {"capability": "todo.create", "uses": 2, "ttl_s": 600, "args": {"priority": 1}}
    _, answer = await call(service, "POST", "/grants", json=body, headers=ALICE)
    grant = await verifier.verify_grant_async(
        answer["grant"], expect=GrantExpected(actor_id="alice", tenant_id="t1", now=time.time())
    )
    assert (grant.capability, grant.uses, dict(grant.args or {})) == ("todo.create", 2, {"priority": 1})
    _, answer = await call(service, "POST", "/context", json={}, headers=ALICE)
    verified = await verifier.verify_context_async(answer["assertion"], now=time.time())
    assert (verified.actor_id, verified.tenant_id, verified.role, verified.admin) == ("alice", "t1", "user", None)
    status, _ = await call(
        service, "POST", "/context", json={"admin": {"id": "t1:ops", "mode": "MAINTAIN"}}, headers=ALICE
    )
    assert status == 403
    admin = {**ALICE, "X-Demo-Role": "admin"}
    _, answer = await call(
        service, "POST", "/context", json={"admin": {"id": "t1:ops", "mode": "MAINTAIN"}}, headers=admin
    )
    verified = await verifier.verify_context_async(answer["assertion"], now=time.time())
    assert verified.role == "admin" and verified.admin is not None and verified.admin.id == "t1:ops"


def test_the_service_keeps_its_key_across_restarts(tmp_path: Path) -> None:
    first = start_service(tmp_path)
    try:
        kid = first.info["kid"]
    finally:
        first.stop()
    second = start_service(tmp_path)
    try:
        assert second.info["kid"] == kid and (tmp_path / "app.pem").stat().st_mode & 0o077 == 0
    finally:
        second.stop()


async def test_a_card_in_proto_json_with_an_rfc3339_expiry_gives_the_same_digest(service: processes.Proc) -> None:
    from countersign.approvals.digest import rfc3339_ms

    as_proto_json = {k: v for k, v in CARD.items() if k != "expires_at_ms"}
    as_proto_json["expires_at"] = rfc3339_ms(EXPIRES_MS)
    status, posted = await call(service, "POST", "/cards", json=as_proto_json)
    assert status == 200 and posted["digest"] == card_digest()
