"""URL-mode elicitation and the approval inbox (issue 15 items 2-3): a write that needs the user's signed approval
sends the MCP host's user to the approval page; the page posts the signed approval to the inbox of ANY sidecar; the
waiting call (on another sidecar) takes it from Redis, once, and confirms the card: one execution, one receipt.

Two sidecar processes on one redis-server (A serves MCP, B the inbox), the recording todo service, approvals signed
by a test issuer whose JWKS file both sidecars read (--approvals)."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import pytest
import yaml

from countersign.testing import processes
from countersign.testing.approval_issuer import CardIssuer, start_issuer
from countersign.testing.approvals import b64url
from countersign.testing.calls import ctx
from countersign.testing.mcp_front import Elicitations, client
from countersign.testing.stack import Stack, start_stack
from countersign.v1 import gateway_pb2

PAGE = "https://approve.example/cards/{action_id}"


@dataclass
class Signed:
    stack: Stack
    issuer: CardIssuer
    mcp: processes.Proc  # sidecar A: the MCP endpoint, where the call waits
    inbox: processes.Proc  # sidecar B: the approval inbox, where the page posts

    @property
    def url(self) -> str:
        return str(self.mcp.info["mcp"])

    def card(self, title: str, turn: str) -> gateway_pb2.ConfirmationCard:
        """What the approval page shows: the card of the same call (the same turn: the same action)."""
        answer = self.stack.stub(self.mcp.info["grpc"]).Invoke(
            gateway_pb2.InvokeRequest(
                context=context(turn), tool_name="create_todo", arguments_json=json.dumps({"title": title})
            )
        )
        assert answer.WhichOneof("outcome") == "confirmation", answer
        return answer.confirmation

    def post(self, action_id: str, approval: str) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(
            f"{self.inbox.info['approval_inbox']}/{action_id}", data=approval.encode(), method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except ValueError:  # a route that is not the inbox's: the server's plain answer
                return exc.code, {"raw": raw.decode(errors="replace")}

    def creates(self, title: str) -> list[dict[str, Any]]:
        return [
            e
            for e in self.stack.todo.requests(path="/todos")
            if e["method"] == "POST" and isinstance(e["body"], dict) and e["body"].get("title") == title
        ]


def context(turn: str) -> Any:
    return ctx(session_id="s-mcp", locale="en", request_id=turn)


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Signed]:
    work = tmp_path_factory.mktemp("mcp-signed")
    stacks = start_stack(work)
    stack = next(stacks)
    stack.sidecar.stop()  # one registry for every sidecar on this Redis: the signed one below
    doc = yaml.safe_load(stack.registry.read_text(encoding="utf-8"))
    next(t for t in doc["tools"] if t["name"] == "create_todo")["approval"] = "signed"
    registry = work / "registry-signed.yaml"
    registry.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    issuer = start_issuer(work)
    common = ["--approvals", str(issuer.settings)]
    a = b = None
    try:
        a = stack.start_sidecar(
            registry=registry,
            flags=[*common, "--mcp-listen", "127.0.0.1:0", "--approval-url", PAGE, "--approval-wait", "20s"],
        )
        b = stack.start_sidecar(registry=registry, flags=[*common, "--approval-inbox-listen", "127.0.0.1:0"])
        yield Signed(stack, issuer, a, b)
    finally:
        for proc in (a, b):
            if proc is not None:
                proc.stop()
        next(stacks, None)  # the generator stops every process it started


def turn() -> str:
    return "turn-" + uuid.uuid4().hex


async def test_an_approval_posted_to_another_sidecars_inbox_wakes_the_waiting_call(signed: Signed) -> None:
    title, t = "signed " + uuid.uuid4().hex[:8], turn()
    posted: list[tuple[int, dict[str, Any]]] = []
    progress: list[float] = []

    async def page(params: types.ElicitRequestParams) -> str:
        """The user opens the page: it shows the card and, after a moment, the user's app signs and posts."""
        assert isinstance(params, types.ElicitRequestURLParams)
        card = signed.card(title, t)
        assert params.url == PAGE.replace("{action_id}", card.action_id)
        assert params.elicitation_id == card.action_id

        async def approve_later() -> None:
            await asyncio.sleep(1.5)  # the call is waiting by now
            posted.append(await asyncio.to_thread(signed.post, card.action_id, signed.issuer.approve(card, context(t))))

        asyncio.get_running_loop().create_task(approve_later())
        return "accept"

    asked = Elicitations(page)
    async with client(signed.url, elicit=asked) as c:
        result = await c.call_tool(
            "create_todo",
            {"title": title},
            meta={"io.countersign/turn": t},
            progress_callback=lambda p, total, message: _record(progress, p),
        )
    assert posted and posted[0][0] == 202, posted
    assert result.structured_content["state"] == "SUCCEEDED", result
    action = result.structured_content["action"]
    assert action["receipt"]["approval"]["issuer"]  # the receipt names the approval it ran on
    assert len(signed.creates(title)) == 1
    assert len(signed.stack.todo.writes(action["action_id"])) == 1
    assert progress, "the waiting call sent progress notifications"
    # used once: the card is gone; the same approval posted again is refused, nothing runs again
    status, body = signed.post(action["action_id"], signed.issuer.approve(signed_card_of(action), context(t)))
    assert status == 409, body
    assert len(signed.creates(title)) == 1


async def _record(progress: list[float], value: float) -> None:
    progress.append(value)


def signed_card_of(action: dict[str, Any]) -> Any:
    """A stand-in card (the action id; a digest the inbox never gets to compare: the action has settled)."""
    return gateway_pb2.ConfirmationCard(action_id=action["action_id"], approval_digest="sha256:x")


async def test_an_approval_already_in_the_inbox_confirms_the_call_at_once(signed: Signed) -> None:
    title, t = "early " + uuid.uuid4().hex[:8], turn()
    card = signed.card(title, t)
    status, body = signed.post(card.action_id, signed.issuer.approve(card, context(t)))
    assert status == 202 and body["state"] == "RECORDED"
    async with client(signed.url) as c:  # no elicitation at all: the approval is there already
        result = await c.call_tool("create_todo", {"title": title}, meta={"io.countersign/turn": t})
    assert result.structured_content["state"] == "SUCCEEDED", result
    assert len(signed.creates(title)) == 1


@pytest.mark.parametrize(
    ("claims", "check"),
    [
        ({"aud": "someone-else"}, "audience"),
        ({"exp": 1_000_000_000}, "expired"),
        ({"dig": "sha256:AAAA"}, "digest"),
        ({"act": "0" * 32}, "action"),
    ],
)
def test_the_inbox_refuses_a_bad_approval_naming_its_check_and_records_nothing(
    signed: Signed, claims: dict[str, Any], check: str
) -> None:
    title, t = "bad " + uuid.uuid4().hex[:8], turn()
    card = signed.card(title, t)
    status, body = signed.post(card.action_id, signed.issuer.approve(card, context(t), **claims))
    assert status == 403 and body["reason"] == "APPROVAL_INVALID", body
    assert body["check"] == check or (check == "expired" and body["check"] in ("expired", "lifetime")), body
    status, body = signed.post(card.action_id, "not a jws")
    assert status == 403 and body["check"] == "malformed"
    assert signed.creates(title) == []


def test_a_form_only_host_gets_the_card_of_a_signed_write_and_no_form(signed: Signed) -> None:
    """The TypeScript SDK host declares form elicitation only: a signed write is never confirmed through a form."""
    import shutil
    import subprocess

    node = shutil.which("node")
    assert node is not None, "Node.js is required (Debian: apt-get install nodejs npm)"
    host_dir = processes.ROOT / "examples" / "clients" / "mcp-node"
    if not (host_dir / "node_modules").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=host_dir, check=True, timeout=300)
    title = "ts-signed " + uuid.uuid4().hex[:8]
    done = subprocess.run(
        [node, "scenarios.mjs", signed.url, "accept", title, turn()],
        cwd=host_dir,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["asked"] == []  # no form for a card that needs a signature
    assert out["result"]["structuredContent"]["state"] == "CONFIRMATION_REQUIRED"
    assert out["result"]["structuredContent"]["card"]["approval"] == "APPROVAL_REQUIREMENT_SIGNED"
    assert signed.creates(title) == []


def test_ts_host_url_elicitation_and_an_inbox_approval_run_the_write_once(signed: Signed) -> None:
    """The TypeScript SDK host declares URL elicitation: it is sent to the page; the user's approval, posted to the
    other sidecar's inbox, completes its waiting call with the receipt."""
    import shutil
    import subprocess

    node = shutil.which("node")
    assert node is not None, "Node.js is required (Debian: apt-get install nodejs npm)"
    host_dir = processes.ROOT / "examples" / "clients" / "mcp-node"
    if not (host_dir / "node_modules").exists():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=host_dir, check=True, timeout=300)
    title, t = "ts-url " + uuid.uuid4().hex[:8], turn()
    host = subprocess.Popen(
        [node, "scenarios.mjs", signed.url, "url", title, t],
        cwd=host_dir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert host.stdout is not None
        opened = json.loads(host.stdout.readline())  # the host opens the page
        card = signed.card(title, t)
        assert opened == {"open": PAGE.replace("{action_id}", card.action_id), "elicitationId": card.action_id}
        assert signed.creates(title) == []  # nothing before the approval
        status, body = signed.post(card.action_id, signed.issuer.approve(card, context(t)))
        assert status == 202, body
        out = json.loads(host.stdout.readline())
        assert host.wait(timeout=60) == 0, host.stderr.read() if host.stderr else ""
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
    assert out["result"]["structuredContent"]["state"] == "SUCCEEDED", out
    assert out["asked"][0]["mode"] == "url"
    assert len(signed.creates(title)) == 1


def test_the_inbox_answers_hostile_requests_with_clear_statuses(signed: Signed) -> None:
    card = signed.card("hostile " + uuid.uuid4().hex[:8], turn())
    good = signed.issuer.approve(card, context("x"))
    assert signed.post("../../etc/passwd", good)[0] in (400, 404)  # never a path outside /approvals/{id}
    status, body = signed.post("NOT-AN-ID", good)
    assert status == 400 and body["reason"] == "REQUEST_INVALID"
    status, body = signed.post(card.action_id, "x" * 20_000)
    assert status == 400 and "larger" in body["message"]
    status, body = signed.post(card.action_id, '{"approval": 42}')
    assert status == 400 and body["reason"] == "REQUEST_INVALID"
    unknown = "f" * 32
    status, body = signed.post(unknown, signed.issuer.approve(gateway_pb2.ConfirmationCard(action_id=unknown)))
    assert status == 404 and body["reason"] == "CONFIRMATION_EXPIRED"
    # a claim JSON admits but text does not (a lone surrogate, read before the signature is): it was a 500
    head, claims = b64url(b'{"alg":"EdDSA","kid":"k1"}'), {"act": card.action_id, "sub": "\ud800", "tid": "t1"}
    forged = f"{head}.{b64url(json.dumps(claims).encode())}.{b64url(bytes(64))}"
    status, body = signed.post(card.action_id, forged)
    assert (status, body["reason"], body["check"]) == (403, "APPROVAL_INVALID", "malformed"), body


async def test_a_write_covered_by_a_standing_grant_runs_at_once_over_mcp(signed: Signed) -> None:
    """Invoke's `action` outcome (a standing grant of the caller covers the write): the MCP call returns the receipt,
    naming the grant, without any elicitation; the grant's one use is spent, the next call gets a card."""
    from countersign.testing.approvals import grant_claims, sign

    t = turn()
    grant = sign(
        grant_claims(issuer=signed.issuer.issuer, actor_id="alice", tenant_id="t1", capability="todo.create", uses=1),
        signed.issuer.key,
    )
    created = (
        signed.stack.stub(signed.mcp.info["grpc"])
        .CreateGrant(gateway_pb2.CreateGrantRequest(context=context(t), approval=grant))
        .grant
    )
    first, second = "granted " + uuid.uuid4().hex[:8], "after " + uuid.uuid4().hex[:8]
    async with client(signed.url) as c:  # declares no elicitation: nothing to ask
        ran = await c.call_tool("create_todo", {"title": first}, meta={"io.countersign/turn": turn()})
        spent = await c.call_tool("create_todo", {"title": second}, meta={"io.countersign/turn": turn()})
    assert ran.structured_content["state"] == "SUCCEEDED", ran
    assert ran.structured_content["action"]["receipt"]["grant_id"] == created.grant_id
    assert len(signed.creates(first)) == 1
    assert spent.structured_content["state"] == "CONFIRMATION_REQUIRED", spent
    assert signed.creates(second) == []
