"""The Countersign walkthrough: a scripted agent (no language model) against the real parts.

Starts the example todo service, the example MCP todo server (one step writes through the MCP adapter,
the back door), the example approval service (the app backend that shows a card to the signed-in user
and signs their approval with its own Ed25519 key) and the sidecar (trusting that service's JWKS, with its
own private, embedded redis-server) as real processes on free ports, plays one user's conversation over
gRPC and prints a short transcript. Every step checks what it expects; ``main`` returns 0 only when all of
them behaved.

    python -m examples.walkthrough [--verbose]      (or: countersign demo [--verbose])
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import yaml
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from countersign.testing import processes
from countersign.testing.approvals import write_settings
from countersign.testing.mcp import McpTodo, write_both_registry
from countersign.v1 import (
    common_pb2,
    continuation_pb2,
    continuation_pb2_grpc,
    gateway_pb2,
    gateway_pb2_grpc,
    guard_pb2,
    guard_pb2_grpc,
)

RPC_TIMEOUT = 15.0
DEADLINE = "明晚 9 点"
"""The first todo's deadline, as the model wrote it: tomorrow 21:00 in the service's zone, in the future at
any hour the walkthrough runs ("今晚 9 点" is in the past after 21:00 in Shanghai, 13:00 UTC: prepare refuses it)."""


# ---------------------------------------------------------------------------- small helpers


class Mismatch(Exception):
    """A step did not behave; the walkthrough reports it and goes on."""


def ctx(request_id: str) -> common_pb2.CallContext:
    """The caller: alice, in her own session, speaking Chinese; request_id is the user turn."""
    return common_pb2.CallContext(
        tenant_id="demo",
        actor_id="alice",
        subject_id="alice",
        session_id="s-1",
        request_id=request_id,
        role="user",
        locale="zh-CN",
    )


def expect(what: str, ok: bool, got: object) -> None:
    if not ok:
        raise Mismatch(f"expected {what}, got {got}")


def state_name(state: int) -> str:
    return common_pb2.ActionState.Name(state).removeprefix("ACTION_STATE_")  # type: ignore[arg-type]


def short(action: common_pb2.Action) -> str:
    """One line for an Action: state, replayed, receipt or error."""
    text = f"{state_name(action.state)}{' (replayed)' if action.replayed else ''}"
    if action.HasField("receipt") and action.receipt.resource_id:
        text += f", receipt «{action.receipt.summary}» resource {action.receipt.resource_id}"
    if action.HasField("error") and action.error.reason:
        text += f", {action.error.reason}: {action.error.message}"
    return text


def outcome(response: gateway_pb2.InvokeResponse) -> str:
    return response.WhichOneof("outcome") or "nothing"


class TodoService:
    """Plain HTTP to the example service: its own API plus the request log under /_test/."""

    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as err:
            return {"http_status": err.code, **json.loads(err.read() or b"{}")}

    def requests(self) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = self.call("GET", "/_test/log")["requests"]
        return entries


class Agent:
    """The scripted agent: what a model's tool calls and a user's clicks look like on the wire."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.channel = channel
        self.stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)  # type: ignore[no-untyped-call]

    def invoke(self, request_id: str, tool: str, args: dict[str, Any]) -> gateway_pb2.InvokeResponse:
        request = gateway_pb2.InvokeRequest(
            context=ctx(request_id), tool_name=tool, arguments_json=json.dumps(args, ensure_ascii=False)
        )
        response: gateway_pb2.InvokeResponse = self.stub.Invoke(request, timeout=RPC_TIMEOUT)
        return response

    def confirm(self, request_id: str, token: str, wait_ms: int = 0, approval: str = "") -> common_pb2.Action:
        request = gateway_pb2.ConfirmRequest(context=ctx(request_id), token=token, wait_ms=wait_ms, approval=approval)
        response: gateway_pb2.ConfirmResponse = self.stub.Confirm(request, timeout=RPC_TIMEOUT)
        return response.action


def refusal_of(err: grpc.RpcError) -> tuple[str, str]:
    """The gRPC code and the ErrorInfo reason of a refused call."""
    assert isinstance(err, grpc.Call)
    status = rpc_status.from_call(err)
    for detail in status.details if status is not None else []:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return err.code().name, info.reason
    return err.code().name, "(no ErrorInfo)"


class AppBackend:
    """The example approval service (examples/approval_service) as alice's browser reaches it: the card is shown to
    her, she clicks Approve, the service signs with its own key. The agent never holds that key."""

    def __init__(self, url: str, policy_version: str) -> None:
        self.url, self.policy_version = url, policy_version
        self.user = {"X-Demo-User": "demo/alice/s-1"}  # in a real app: her login session

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(body, ensure_ascii=False).encode(),
            method="POST",
            headers={"Content-Type": "application/json", **self.user},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            out: dict[str, Any] = json.loads(answer.read())
        return out

    def approve(self, card: gateway_pb2.ConfirmationCard) -> str:
        """Alice approves what the page shows; the service recomputes the digest and signs it."""
        shown = json_format.MessageToDict(card, preserving_proto_field_name=True)
        shown.pop("token", None)  # the page never needs the agent's token
        shown["policy_version"] = self.policy_version
        return str(self._post("/approve", shown)["approval"])

    def grant(self, capability: str, uses: int) -> str:
        return str(self._post("/grants", {"capability": capability, "uses": uses, "ttl_s": 600})["grant"])


# ---------------------------------------------------------------------------- the script


class Walkthrough:
    def __init__(
        self,
        agent: Agent,
        todo: TodoService,
        app: AppBackend,
        mcp: McpTodo | None = None,
        mcp_url: str = "",
        inbox_url: str = "",
    ) -> None:
        self.agent = agent
        self.todo = todo
        self.app = app
        self.mcp = mcp
        self.mcp_url = mcp_url  # the sidecar's MCP endpoint (--mcp-listen): the front door's act
        self.inbox_url = inbox_url  # its approval inbox (--approval-inbox-listen), where the page posts
        self.failures: list[str] = []
        self.steps = 0
        # carried from step to step
        self.card: gateway_pb2.ConfirmationCard | None = None
        self.first: common_pb2.Action | None = None
        self.stale: common_pb2.Action | None = None
        self.reconciled: common_pb2.Action | None = None
        self.stale_todo = ""

    def run(self) -> None:
        steps: list[Callable[[int], None]] = [
            self.read,
            self.write,
            self.retry_same_turn,
            self.two_tabs,
            self.confirm_after_settle,
            self.invoke_after_settle,
            self.refusals,
            self.stale_status,
            self.forged_token,
            self.continuation,
            self.guard_failed,
            self.unknown_reconciled,
            self.countersignature,
            self.compensation,
            self.standing_grant,
            self.back_door,
            self.mcp_host,
        ]
        for number, step in enumerate(steps, 1):
            self.steps += 1
            try:
                step(number)
            except Mismatch as exc:
                self.fail(number, str(exc))
            except grpc.RpcError as exc:
                code = exc.code().name if isinstance(exc, grpc.Call) else "?"
                details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
                self.fail(number, f"expected an answer, got gRPC {code}: {details}")
            except Exception as exc:  # a broken step must not stop the rest of the story
                self.fail(number, f"expected an answer, got {type(exc).__name__}: {exc}")

    def fail(self, number: int, text: str) -> None:
        self.failures.append(f"step {number}")
        print(f"    ✗ step {number}: {text}")

    def need_card(self) -> gateway_pb2.ConfirmationCard:
        expect("the card of step 2", self.card is not None, "no card")
        assert self.card is not None
        return self.card

    # [1] ----------------------------------------------------------------------------------
    def read(self, n: int) -> None:
        response = self.agent.invoke("turn-1", "list_todos", {})
        expect("a ToolResult", outcome(response) == "result", outcome(response))
        result = json.loads(response.result.result_json)
        todos = result.get("todos") if isinstance(result, dict) else None
        expect("a list of todos", isinstance(todos, list), response.result.result_json)
        assert isinstance(todos, list)
        print(f"[{n}] read: list_todos runs at once, no card → {len(todos)} todos")
        expect("an empty list on a fresh service", len(todos) == 0, len(todos))

    # [2] ----------------------------------------------------------------------------------
    def write(self, n: int) -> None:
        args = {"taskTitle": "买牛奶", "deadline": DEADLINE}
        response = self.agent.invoke("turn-1", "create_todo", args)
        expect("a ConfirmationCard", outcome(response) == "confirmation", outcome(response))
        card = self.card = response.confirmation
        prepared = json.loads(card.prepared_arguments_json)
        risk = common_pb2.RiskLevel.Name(card.risk).removeprefix("RISK_LEVEL_").lower()
        print(f"[{n}] write: create_todo {json.dumps(args, ensure_ascii=False)} → a card, nothing written yet")
        print(f"    {card.preview.title}「{card.preview.target}」 {card.preview.impact}")
        print(
            f"    prepared {json.dumps(prepared, ensure_ascii=False)}, risk {risk}, "
            f"expires in {card.expires_at.seconds - int(time.time())} s, action {card.action_id}"
        )
        expect("aliases normalised to title/dueAt", set(prepared) == {"title", "dueAt"}, prepared)
        expect("title 买牛奶", prepared.get("title") == "买牛奶", prepared.get("title"))
        due = str(prepared.get("dueAt", ""))
        expect("dueAt as a concrete timestamp", due[:2] == "20" and "T" in due and "21:00" in due, due)
        expect("a token and an action id", bool(card.token) and bool(card.action_id), card.token)
        expect(
            "preview 创建待办 / 买牛奶",
            (card.preview.title, card.preview.target) == ("创建待办", "买牛奶"),
            (card.preview.title, card.preview.target),
        )
        expect("risk low", card.risk == common_pb2.RISK_LEVEL_LOW, risk)
        expect("an expiry", card.expires_at.seconds > 0, card.expires_at)

    # [3] ----------------------------------------------------------------------------------
    def retry_same_turn(self, n: int) -> None:
        card = self.need_card()
        response = self.agent.invoke("turn-1", "create_todo", {"taskTitle": "买牛奶", "deadline": DEADLINE})
        expect("a ConfirmationCard", outcome(response) == "confirmation", outcome(response))
        again = response.confirmation
        same = again.action_id == card.action_id and again.token == card.token
        print(
            f"[{n}] the model repeats the call in the same turn → the same card "
            f"(action {again.action_id}, same token: {'yes' if again.token == card.token else 'no'})"
        )
        expect(f"the same action {card.action_id} and token", same, again.action_id)

    # [4] ----------------------------------------------------------------------------------
    def two_tabs(self, n: int) -> None:
        card = self.need_card()
        barrier = threading.Barrier(2)

        def click(tab: int) -> common_pb2.Action:
            barrier.wait(5)
            return self.agent.confirm(f"turn-1-tab-{tab}", card.token)

        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(click, (1, 2)))
        originals = [a for a in answers if not a.replayed]
        replays = [a for a in answers if a.replayed]
        expect(
            "one original answer and one replayed",
            len(originals) == 1 and len(replays) == 1,
            [short(a) for a in answers],
        )
        first = self.first = originals[0]
        expect("the original SUCCEEDED", first.state == common_pb2.ACTION_STATE_SUCCEEDED, short(first))
        other = replays[0]
        note = "the other tab got the replayed receipt"
        if other.state == common_pb2.ACTION_STATE_RUNNING:
            other = self.agent.confirm("turn-1-tab-2", card.token, wait_ms=5000)
            note = "the other tab saw RUNNING, then (wait_ms) the replayed receipt"
        expect(
            "the other tab's receipt equal to the original",
            other.replayed and other.receipt.SerializeToString() == first.receipt.SerializeToString(),
            short(other),
        )
        posts = [
            e
            for e in self.todo.requests()
            if e["method"] == "POST" and e["path"] == "/todos" and e["idempotency_key"] == card.action_id
        ]
        resource = first.receipt.resource_id
        print(f"[{n}] two tabs confirm at once → todo {resource} created once; {note}")
        print(
            f"    receipt «{first.receipt.summary}» resource {resource} version {first.receipt.resource_version}"
            f"; the todo service saw {len(posts)} POST /todos with Idempotency-Key {card.action_id}"
        )
        expect("exactly one POST /todos with the action's key", len(posts) == 1, len(posts))
        expect("a resource id", resource.startswith("t_"), resource)
        stored = self.todo.call("GET", f"/todos/{resource}")
        expect("the todo 买牛奶 at the service", stored.get("title") == "买牛奶", stored)

    # [5] ----------------------------------------------------------------------------------
    def confirm_after_settle(self, n: int) -> None:
        card = self.need_card()
        expect("the outcome of step 4", self.first is not None, None)
        assert self.first is not None
        late = self.agent.confirm("turn-2", card.token)
        same = late.receipt.SerializeToString() == self.first.receipt.SerializeToString()
        print(
            f"[{n}] a late Confirm of the same token → {short(late)}; receipt byte-identical: {'yes' if same else 'no'}"
        )
        expect("SUCCEEDED, replayed", late.state == common_pb2.ACTION_STATE_SUCCEEDED and late.replayed, short(late))
        expect("a byte-identical receipt", same, late.receipt)

    # [6] ----------------------------------------------------------------------------------
    def invoke_after_settle(self, n: int) -> None:
        card = self.need_card()
        response = self.agent.invoke("turn-1", "create_todo", {"taskTitle": "买牛奶", "deadline": DEADLINE})
        kind = outcome(response)
        print(
            f"[{n}] the agent loop runs again in the same turn with the same call → {kind}"
            + (f": {short(response.replay)}" if kind == "replay" else "")
        )
        expect("a replay of the settled action", kind == "replay", kind)
        action = response.replay
        expect(
            f"action {card.action_id} SUCCEEDED",
            action.action_id == card.action_id and action.state == common_pb2.ACTION_STATE_SUCCEEDED,
            short(action),
        )
        posts = [e for e in self.todo.requests() if e["method"] == "POST" and e["path"] == "/todos"]
        expect("still one POST /todos in all", len(posts) == 1, len(posts))

    # [7] ----------------------------------------------------------------------------------
    def refusals(self, n: int) -> None:
        print(f"[{n}] capabilities the assistant does not have:")
        wanted = {
            "delete_note": ("note.delete", common_pb2.CAPABILITY_STATUS_PLANNED, "当前请前往笔记页面手动删除。"),
            "delete_account": ("account.delete", common_pb2.CAPABILITY_STATUS_FORBIDDEN, "Agent 不允许执行账号注销。"),
        }
        args: dict[str, dict[str, Any]] = {"delete_note": {"noteId": "n_1"}, "delete_account": {"confirm": True}}
        for tool, (capability, status, guidance) in wanted.items():
            response = self.agent.invoke("turn-3", tool, args[tool])
            kind = outcome(response)
            expect(f"a Refusal for {tool}", kind == "refusal", kind)
            refusal = response.refusal
            status_text = common_pb2.CapabilityStatus.Name(refusal.status).removeprefix("CAPABILITY_STATUS_").lower()
            print(f"    {tool} → refused ({refusal.capability_id}, {status_text}): {refusal.guidance}")
            expect(
                f"{capability} {common_pb2.CapabilityStatus.Name(status)} «{guidance}»",
                (refusal.capability_id, refusal.status, refusal.guidance) == (capability, status, guidance),
                (refusal.capability_id, common_pb2.CapabilityStatus.Name(refusal.status), refusal.guidance),
            )

    # [8] ----------------------------------------------------------------------------------
    def stale_status(self, n: int) -> None:
        response = self.agent.invoke("turn-4", "create_todo", {"title": "交房租"})
        expect("a ConfirmationCard", outcome(response) == "confirmation", outcome(response))
        created = self.agent.confirm("turn-4", response.confirmation.token)
        expect("the todo created", created.state == common_pb2.ACTION_STATE_SUCCEEDED, short(created))
        todo_id = self.stale_todo = created.receipt.resource_id
        print(f"[{n}] a second todo 交房租 → {short(created)}")

        response = self.agent.invoke("turn-5", "set_todo_status", {"id": todo_id, "status": "done", "version": 1})
        expect("a ConfirmationCard", outcome(response) == "confirmation", outcome(response))
        card = response.confirmation
        print(f"    set_todo_status done @ version 1 → card «{card.preview.impact}»")
        # Meanwhile someone else changes the todo in the app: done, then open again (version 1 → 3).
        for i, (status, version) in enumerate((("done", 1), ("open", 2)), 1):
            changed = self.todo.call(
                "POST",
                f"/todos/{todo_id}/status",
                {"status": status, "version": version},
                headers={"Idempotency-Key": f'"walkthrough-elsewhere-{i}"'},
            )
            expect(f"the service to accept the change to {status}", changed.get("status") == status, changed)
        print(f"    meanwhile, in another app, {todo_id} is marked done and opened again (now version 3)")
        action = self.agent.confirm("turn-5", card.token)
        after = self.todo.call("GET", f"/todos/{todo_id}")
        evidence = json.loads(action.receipt.evidence_json or "{}")
        http_status = str(evidence.get("status", "?")) if isinstance(evidence, dict) else "?"
        print(f"    the user confirms the stale card → {short(action)} (the service answered {http_status})")
        print(
            f"    the todo at the service: status {after.get('status')}, version {after.get('version')}"
            " — not overwritten"
        )
        self.stale = action
        expect("FAILED", action.state == common_pb2.ACTION_STATE_FAILED, short(action))
        # the card's prepared version (1) went out as If-Match; the service answers 412 before looking further
        expect(
            "reason RESOURCE_VERSION_CONFLICT", action.error.reason == "RESOURCE_VERSION_CONFLICT", action.error.reason
        )
        expect("not retryable", not action.error.retryable, action.error)
        expect("the service's 412 as evidence", http_status == "412", http_status)
        expect("the todo still open at version 3", (after.get("status"), after.get("version")) == ("open", 3), after)

    # [9] ----------------------------------------------------------------------------------
    def forged_token(self, n: int) -> None:
        card = self.need_card()
        head, _, mac = card.token.rpartition(".")
        forged = f"{head}.{('B' if mac[:1] == 'A' else 'A') * max(len(mac), 1)}" if head else card.token + "x"
        try:
            action = self.agent.confirm("turn-6", forged)
        except grpc.RpcError as err:
            assert isinstance(err, grpc.Call)
            status = rpc_status.from_call(err)
            reasons = []
            for detail in status.details if status is not None else []:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    reasons.append((info.domain, info.reason))
            reason = reasons[0][1] if reasons else "(no ErrorInfo)"
            print(f"[{n}] Confirm with a forged token → {err.code().name}, ErrorInfo reason {reason}")
            expect("INVALID_ARGUMENT", err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.code().name)
            expect(
                "ErrorInfo countersign/CONFIRMATION_TOKEN_INVALID",
                reasons == [("countersign", "CONFIRMATION_TOKEN_INVALID")],
                reasons,
            )
            return
        print(f"[{n}] Confirm with a forged token → {short(action)}")
        raise Mismatch(f"expected INVALID_ARGUMENT, got an Action: {short(action)}")

    # [10] ---------------------------------------------------------------------------------
    def continuation(self, n: int) -> None:
        card = self.need_card()
        conts = continuation_pb2_grpc.ContinuationServiceStub(self.agent.channel)  # type: ignore[no-untyped-call]
        snapshot = continuation_pb2.ContinuationSnapshot(
            question=f"帮我建一个{DEADLINE}买牛奶的待办", locale="zh-CN", lead_in="好的，"
        )
        opened = conts.OpenContinuation(
            continuation_pb2.OpenContinuationRequest(
                context=ctx("turn-1"), action_id=card.action_id, snapshot=snapshot
            ),
            timeout=RPC_TIMEOUT,
        ).continuation
        got = conts.ClaimContinuation(
            continuation_pb2.ClaimContinuationRequest(context=ctx("turn-1"), token=opened.token), timeout=RPC_TIMEOUT
        ).continuation
        facts = ", ".join(f"{f.tool_name} ({f.summary})" for f in got.facts) or "none"
        print(
            f"[{n}] the reply, after the write: continuation {cont_state(opened.state)} → claimed "
            f"{cont_state(got.state)}; it offers no tools, only facts: {facts}; receipt «{got.receipt.summary}»"
        )
        reply = f"好的，已经帮你创建好了待办「买牛奶」，{DEADLINE}提醒你。"
        settled = conts.SettleContinuation(
            continuation_pb2.SettleContinuationRequest(
                context=ctx("turn-1"), token=opened.token, reply_text=reply, claim_id=got.claim_id
            ),
            timeout=RPC_TIMEOUT,
        ).continuation
        again = conts.ClaimContinuation(
            continuation_pb2.ClaimContinuationRequest(context=ctx("turn-1"), token=opened.token), timeout=RPC_TIMEOUT
        ).continuation
        print(f"    the model's reply passes the guard (a succeeded receipt backs it): «{settled.reply_text}»")
        print(f"    a retried generation gets the stored reply (replayed: {again.replayed}); nothing ran again")
        expect(
            "READY at once (the action already succeeded)",
            opened.state == continuation_pb2.CONTINUATION_STATE_READY,
            cont_state(opened.state),
        )
        expect("the read of step 1 among the facts", any(f.tool_name == "list_todos" for f in got.facts), facts)
        expect("the reply kept", settled.reply_text == reply, settled.reply_text)
        expect("replayed, same reply", again.replayed and again.reply_text == reply, again)
        expect(
            "still one POST /todos for the action",
            len(self.todo_writes(card.action_id)) == 1,
            self.todo_writes(card.action_id),
        )

    # [11] ---------------------------------------------------------------------------------
    def guard_failed(self, n: int) -> None:
        expect("the failed action of step 8", self.stale is not None, None)
        assert self.stale is not None
        guard = guard_pb2_grpc.ReplyGuardServiceStub(self.agent.channel)  # type: ignore[no-untyped-call]
        claim = "✅ 已经帮你把「交房租」标记为完成了！"
        verdict = guard.CheckReply(
            guard_pb2.CheckReplyRequest(context=ctx("turn-5"), reply_text=claim, action_ids=[self.stale.action_id]),
            timeout=RPC_TIMEOUT,
        )
        print(f"[{n}] the model claims «{claim}» for the action that FAILED (412)")
        print(
            f"    guard: {guard_pb2.GuardVerdict.Name(verdict.verdict).removeprefix('GUARD_VERDICT_')} "
            f"({verdict.reason.split(':')[0]}) → «{verdict.reply_text}»"
        )
        expect("REPLACED", verdict.verdict == guard_pb2.GUARD_VERDICT_REPLACED, verdict)
        expect(
            "a deterministic sentence",
            verdict.reply_text != claim and "完成了" not in verdict.reply_text,
            verdict.reply_text,
        )

    # [12] ---------------------------------------------------------------------------------
    def unknown_reconciled(self, n: int) -> None:
        response = self.agent.invoke("turn-7", "create_todo", {"title": "取快递"})
        card = response.confirmation
        self.todo.call(
            "POST",
            "/_test/faults",
            {"path": "/todos", "method": "POST", "mode": "hang_after_commit", "seconds": 2.0, "times": 1},
        )
        action = self.agent.confirm("turn-7", card.token)
        print(f"[{n}] the service commits 取快递 and then hangs past the deadline → {short(action)}")
        again = self.agent.confirm("turn-7", card.token)
        print(f"    the user clicks again → {short(again)}: the claim stays held, nothing is re-sent")
        resolved = self.agent.stub.Reconcile(
            gateway_pb2.ReconcileRequest(context=ctx("turn-7"), action_id=card.action_id), timeout=RPC_TIMEOUT
        ).action
        print(f"    Reconcile asks the service by idempotency key → {short(resolved)}")
        self.reconciled = resolved
        expect("UNKNOWN first", action.state == common_pb2.ACTION_STATE_UNKNOWN, short(action))
        expect(
            "UNKNOWN again, replayed", again.state == common_pb2.ACTION_STATE_UNKNOWN and again.replayed, short(again)
        )
        expect("SUCCEEDED by evidence", resolved.state == common_pb2.ACTION_STATE_SUCCEEDED, short(resolved))
        expect("one POST /todos", len(self.todo_writes(card.action_id)) == 1, self.todo_writes(card.action_id))

    # [13] ---------------------------------------------------------------------------------
    def countersignature(self, n: int) -> None:
        expect("the failed action of step 8", self.stale is not None, None)
        assert self.stale is not None
        todo_id = self.stale_todo
        response = self.agent.invoke("turn-9", "delete_todo", {"id": todo_id})
        expect("a ConfirmationCard", outcome(response) == "confirmation", outcome(response))
        card = response.confirmation
        requirement = common_pb2.ApprovalRequirement.Name(card.approval).removeprefix("APPROVAL_REQUIREMENT_")
        print(
            f"[{n}] the countersignature: delete_todo {todo_id} → a card that needs the user's signed approval "
            f"({requirement}), approval_digest {card.approval_digest[:19]}…"
        )
        expect("approval SIGNED", card.approval == common_pb2.APPROVAL_REQUIREMENT_SIGNED, requirement)
        try:
            self.agent.confirm("turn-9", card.token)
            raise Mismatch("expected PERMISSION_DENIED APPROVAL_REQUIRED, got an Action")
        except grpc.RpcError as err:
            code, reason = refusal_of(err)
        state = self.agent.stub.GetAction(
            gateway_pb2.GetActionRequest(context=ctx("turn-9"), action_id=card.action_id), timeout=RPC_TIMEOUT
        ).action.state
        print(
            f"    the agent confirms it by itself (it holds the token) → {code} {reason}; the card is "
            f"{state_name(state)}, the service saw {len(self.todo_writes(card.action_id))} request(s)"
        )
        expect(
            "PERMISSION_DENIED APPROVAL_REQUIRED", (code, reason) == ("PERMISSION_DENIED", "APPROVAL_REQUIRED"), code
        )
        expect("the card still READY", state == common_pb2.ACTION_STATE_READY, state_name(state))
        expect("nothing sent", self.todo_writes(card.action_id) == [], self.todo_writes(card.action_id))
        approval = self.app.approve(card)
        done = self.agent.confirm("turn-9", card.token, approval=approval)
        again = self.agent.confirm("turn-9", card.token, approval=approval)
        print(
            f"    alice approves on the app's page (signed by {done.receipt.approval.issuer}, key "
            f"{done.receipt.approval.kid}) → {short(done)}; once more → {state_name(again.state)} (replayed)"
        )
        expect("SUCCEEDED", done.state == common_pb2.ACTION_STATE_SUCCEEDED, short(done))
        expect("the receipt names the approval's key", done.receipt.approval.kid != "", done.receipt)
        expect("replayed", again.replayed and again.state == common_pb2.ACTION_STATE_SUCCEEDED, short(again))
        expect("one DELETE", len(self.todo_writes(card.action_id)) == 1, self.todo_writes(card.action_id))

    # [14] ---------------------------------------------------------------------------------
    def compensation(self, n: int) -> None:
        expect("the reconciled action of step 12", self.reconciled is not None, None)
        assert self.reconciled is not None
        todo_id = self.reconciled.receipt.resource_id
        request = gateway_pb2.CompensateRequest(context=ctx("turn-8"), action_id=self.reconciled.action_id)
        proposed = self.agent.stub.Compensate(request, timeout=RPC_TIMEOUT)
        inverse = proposed.confirmation
        before = self.todo_writes(inverse.action_id)
        print(
            f"[{n}] the user changes their mind: Compensate proposes the declared inverse as a card of its own → "
            f"{inverse.preview.title} {inverse.preview.target} ({state_name(proposed.action.state)}); "
            f"the service saw {len(before)} request(s)"
        )
        requirement = common_pb2.ApprovalRequirement.Name(inverse.approval).removeprefix("APPROVAL_REQUIREMENT_")
        print(f"    the undo is a delete: it needs alice's approval ({requirement}) like any such card")
        expect("approval SIGNED", inverse.approval == common_pb2.APPROVAL_REQUIREMENT_SIGNED, requirement)
        undone = self.agent.stub.Confirm(
            gateway_pb2.ConfirmRequest(context=ctx("turn-8"), token=inverse.token, approval=self.app.approve(inverse)),
            timeout=RPC_TIMEOUT,
        ).action
        twice = self.agent.stub.Compensate(request, timeout=RPC_TIMEOUT)
        gone = self.todo.call("GET", f"/todos/{todo_id}")
        print(
            f"    the user confirms the undo → {state_name(undone.state)}; Compensate again → "
            f"{state_name(twice.action.state)} (replayed: {twice.action.replayed}, no card)"
        )
        print(f"    the todo at the service: {gone.get('reason', gone)}")
        expect("a card, nothing run yet", bool(inverse.token) and before == [], (inverse.token, before))
        expect("COMPENSATING while it waits", proposed.action.state == common_pb2.ACTION_STATE_COMPENSATING, proposed)
        expect("the inverse ran once", undone.state == common_pb2.ACTION_STATE_SUCCEEDED, short(undone))
        expect(
            "COMPENSATED, replayed",
            twice.action.state == common_pb2.ACTION_STATE_COMPENSATED
            and twice.action.replayed
            and not twice.HasField("confirmation"),
            short(twice.action),
        )
        expect("one DELETE", len(self.todo_writes(inverse.action_id)) == 1, self.todo_writes(inverse.action_id))
        expect("the todo deleted", gone.get("reason") == "TODO_NOT_FOUND", gone)

    # [15] ---------------------------------------------------------------------------------
    def standing_grant(self, n: int) -> None:
        grant = self.app.grant("todo.create", 2)
        created = self.agent.stub.CreateGrant(
            gateway_pb2.CreateGrantRequest(context=ctx("turn-10"), approval=grant), timeout=RPC_TIMEOUT
        ).grant
        print(
            f"[{n}] alice grants the assistant 2 todos without asking (signed by the app) → grant "
            f"{created.grant_id[:12]}…, {created.uses_left} uses left"
        )
        outcomes = []
        for i, title in enumerate(("倒垃圾", "浇花", "喂猫"), 1):
            response = self.agent.invoke(f"turn-10-{i}", "create_todo", {"title": title})
            outcomes.append(response)
            kind = outcome(response)
            said = short(response.action) + f" under grant {response.action.receipt.grant_id[:12]}…"
            print(f"    create_todo {title} → " + (said if kind == "action" else f"{kind}: the grant is spent"))
        ran = [r.action for r in outcomes if outcome(r) == "action"]
        expect("two writes ran under the grant", len(ran) == 2, [outcome(r) for r in outcomes])
        expect(
            "both SUCCEEDED, the receipts name the grant",
            all(a.state == common_pb2.ACTION_STATE_SUCCEEDED and a.receipt.grant_id == created.grant_id for a in ran),
            [short(a) for a in ran],
        )
        expect("the third a card", outcome(outcomes[2]) == "confirmation", outcome(outcomes[2]))
        expect(
            "one POST each, none for the third",
            [len(self.todo_writes(a.action_id)) for a in ran] == [1, 1]
            and self.todo_writes(outcomes[2].confirmation.action_id) == [],
            [len(self.todo_writes(a.action_id)) for a in ran],
        )

    # [16] ---------------------------------------------------------------------------------
    def back_door(self, n: int) -> None:
        expect("the example MCP todo server", self.mcp is not None, None)
        assert self.mcp is not None
        response = self.agent.invoke("turn-11", MCP_TOOL, {"title": "给妈妈打电话"})
        expect("a ConfirmationCard", outcome(response) == "confirmation", outcome(response))
        card = response.confirmation
        action = self.agent.confirm("turn-11", card.token)
        again = self.agent.confirm("turn-11", card.token)
        calls = self.mcp.calls("create_todo", card.action_id)
        print(f"[{n}] the back door: {MCP_TOOL} is a tool of an MCP server (create_todo at {self.mcp.url})")
        print(f"    a card, the user confirms → {short(action)}; again → {state_name(again.state)} (replayed)")
        first: dict[str, Any] = calls[0] if calls else {"meta": {}, "header_key": "-"}
        print(
            f"    the MCP server saw {len(calls)} tools/call create_todo, with _meta {json.dumps(first['meta'])} "
            f"and Idempotency-Key {first['header_key']}"
        )
        expect("SUCCEEDED", action.state == common_pb2.ACTION_STATE_SUCCEEDED, short(action))
        expect("the same receipt, replayed", again.replayed and again.receipt == action.receipt, short(again))
        expect("exactly one tools/call with the action's key", len(calls) == 1, len(calls))
        expect(
            "the key in _meta and in the header",
            first["meta"].get(MCP_KEY) == card.action_id and first["header_key"] == card.action_id,
            first,
        )
        stored = [t for t in self.mcp.todos("给妈妈打电话") if t["id"] == action.receipt.resource_id]
        expect("the todo at the MCP server, once", len(stored) == 1, self.mcp.todos("给妈妈打电话"))

    # [17] ---------------------------------------------------------------------------------
    def mcp_host(self, n: int) -> None:
        """An MCP host (the official Python SDK) on the same path: the user says yes in the host's dialog."""
        import asyncio

        from countersign.testing.mcp_front import Elicitations, client, identity

        expect("the sidecar serves MCP", bool(self.mcp_url), self.mcp_url)
        headers = identity(**{"X-Countersign-Tenant": "demo", "X-Countersign-Session": "s-1"})
        asked = Elicitations("accept")
        turn: Any = {"io.countersign/turn": "turn-mcp"}  # RequestParamsMeta is open to extension keys

        async def host() -> tuple[list[str], Any, Any]:
            async with client(self.mcp_url, headers, elicit=asked) as c:
                tools = [t.name for t in (await c.list_tools()).tools]
                first = await c.call_tool("create_todo", {"title": "Call the plumber"}, meta=turn)
                again = await c.call_tool("create_todo", {"title": "Call the plumber"}, meta=turn)  # a retry
            return tools, first, again

        tools, first, again = asyncio.run(host())
        print(f"[{n}] an MCP host lists {len(tools)} tools ({', '.join(tools)}) and calls create_todo")
        print(
            f"    the host shows the card as a dialog: {asked.asked[0].message.splitlines()[0] if asked.asked else '?'}"
        )
        action = first.structured_content.get("action", {}) if first.structured_content else {}
        replay = again.structured_content.get("action", {}) if again.structured_content else {}
        print(f"    the user accepts → {action.get('state')} {first.content[0].text if first.content else ''}")
        print(f"    the host retries the call → the same receipt (replayed: {replay.get('replayed', False)})")
        expect("the enabled tools, not the planned", "create_todo" in tools and "delete_note" not in tools, tools)
        expect("SUCCEEDED", action.get("state") == "ACTION_STATE_SUCCEEDED", first)
        expect("the same action", replay.get("action_id") == action.get("action_id"), again)
        expect("one POST /todos", len(self.todo_writes(str(action.get("action_id")))) == 1, action)
        self.mcp_signed(str(action.get("receipt", {}).get("resource_id", "")), headers)

    def mcp_signed(self, todo_id: str, headers: dict[str, str]) -> None:
        """The same host deletes that todo: delete_todo needs alice's signed approval, so the host is sent to the
        approval page (URL elicitation); the page (the example approval service, driven here) signs and posts the
        approval to the sidecar's inbox; the waiting call confirms with it and returns the receipt."""
        import asyncio

        from countersign.testing.mcp_front import Elicitations, client

        turn: Any = {"io.countersign/turn": "turn-mcp-2"}
        posted: list[int] = []

        def page(action_id: str) -> None:
            card = self.agent.invoke("turn-mcp-2", "delete_todo", {"id": todo_id}).confirmation  # what it shows
            approval = self.app.approve(card)  # alice clicks Approve; the app signs
            request = urllib.request.Request(f"{self.inbox_url}/{action_id}", data=approval.encode(), method="POST")
            with urllib.request.urlopen(request, timeout=10) as answer:
                posted.append(answer.status)

        pages: list[asyncio.Future[None]] = []

        async def open_page(params: Any) -> str:
            print(f"    the host opens {params.url}")
            pages.append(asyncio.get_running_loop().run_in_executor(None, page, params.elicitation_id))
            return "accept"

        async def host() -> Any:
            async with client(self.mcp_url, headers, elicit=Elicitations(open_page)) as c:
                result = await c.call_tool("delete_todo", {"id": todo_id}, meta=turn)
            await asyncio.gather(*pages)  # the page's own answer, which may land just after the call's
            return result

        print(f"    then delete_todo {todo_id}: it needs alice's signature, so the host sends her to the approval page")
        done = asyncio.run(host())
        action = done.structured_content.get("action", {}) if done.structured_content else {}
        status = posted[0] if posted else "?"
        print(f"    the page posts her signed approval to the inbox ({status}) → {action.get('state')}")
        expect("the approval recorded", posted == [202], posted)
        expect("SUCCEEDED", action.get("state") == "ACTION_STATE_SUCCEEDED", done)
        expect("one DELETE", len(self.todo_writes(str(action.get("action_id")))) == 1, action)

    def todo_writes(self, key: str) -> list[dict[str, Any]]:
        return [e for e in self.todo.requests() if e.get("idempotency_key") == key and "/by-key/" not in e["path"]]


def cont_state(state: int) -> str:
    return continuation_pb2.ContinuationState.Name(state).removeprefix("CONTINUATION_STATE_")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- processes

MCP_TOOL = "create_mcp_todo"  # the MCP server's create_todo, beside the HTTP one (countersign.testing.mcp)
MCP_KEY = "io.countersign/idempotency-key"


def start_approval_service(work: Path) -> processes.Proc:
    """The example app backend, on a free port, with a fresh Ed25519 key in the demo's work directory."""
    cmd = [sys.executable, "-m", "examples.approval_service", "--port", "0", "--key-file", str(work / "app.pem")]
    return processes._start(cmd, work, "approval-service")


def main(verbose: bool = False) -> int:
    work = processes.workdir("countersign-demo-")
    procs: list[processes.Proc] = []
    names: list[str] = []
    failures: list[str] = []
    steps = 0
    try:
        todo = processes.start_todo_service(work)
        procs.append(todo)
        names.append("todo service")
        mcp = processes.start_mcp_todo(work)
        procs.append(mcp)
        names.append("MCP todo server")
        app = start_approval_service(work)
        procs.append(app)
        names.append("approval service")
        # the sidecar trusts the app's key (its JWKS URL), nothing the agent holds
        approvals = write_settings(
            work / "approvals.json",
            [{"issuer": app.info["issuer"], "audience": "countersign", "jwks": app.info["jwks_url"]}],
        )
        # the example registry plus the MCP server's tools (5 s deadline: the session opens on step 14's call;
        # the sidecar's 1 s is for step 12)
        registry = write_both_registry(work, todo.info["url"], mcp.info["url"], timeout_ms=5000)
        sidecar = processes.start_sidecar(
            work,
            registry,
            flags=[
                *("--log-level", "warning", "--downstream-deadline", "1s", "--reconcile-interval", "1h"),
                *("--approvals", str(approvals)),
                *("--mcp-listen", "127.0.0.1:0"),  # the MCP front door, for the last act
                *("--approval-url", app.info["url"] + "/cards/{action_id}", "--approval-inbox-listen", "127.0.0.1:0"),
            ],
        )
        procs.append(sidecar)
        names.append("sidecar")
        print(
            f"Countersign walkthrough — sidecar {sidecar.info.get('grpc')} (redis: "
            f"{sidecar.info.get('redis')}), todo service {todo.info['url']}, MCP todo server {mcp.info['url']}, "
            f"approval service {app.info['url']}"
        )
        print("user alice, session s-1, locale zh-CN; a scripted agent plays the model\n")
        policy_version = str(yaml.safe_load(registry.read_text(encoding="utf-8"))["policy_version"])
        with grpc.insecure_channel(str(sidecar.info["grpc"])) as channel:
            grpc.channel_ready_future(channel).result(timeout=10)
            walk = Walkthrough(
                Agent(channel),
                TodoService(todo.info["url"]),
                AppBackend(app.info["url"], policy_version),
                McpTodo(mcp, work),
                str(sidecar.info.get("mcp", "")),
                str(sidecar.info.get("approval_inbox", "")),
            )
            walk.run()
        failures, steps = walk.failures, walk.steps
    except Exception as exc:
        print(f"✗ the walkthrough could not run: {type(exc).__name__}: {exc}")
        failures.append("setup")
    finally:
        for proc in reversed(procs):
            proc.stop()
        if verbose:
            for proc, name in zip(procs, names, strict=True):
                print(f"\n--- {name} log ({proc.log_path}) ---\n{proc.log().rstrip() or '(empty)'}")
        shutil.rmtree(work, ignore_errors=True)
    print()
    if failures:
        print(f"{len(failures)} of {steps or '?'} steps did not behave: {', '.join(failures)}")
        return 1
    print(f"all {steps} steps behaved")
    return 0


def _cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.walkthrough", description=__doc__.split("\n")[0])
    parser.add_argument("--verbose", action="store_true", help="also show the sidecar's and service's logs")
    return main(verbose=parser.parse_args(argv).verbose)


if __name__ == "__main__":
    sys.exit(_cli())
