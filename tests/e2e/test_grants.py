"""Standing grants (issue 13, item 8): a signed grant of the user covers a number of writes of one capability, which
then run at Invoke with no card; real gRPC, real Redis, the todo service recording what reached it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis

from countersign.keyring import Keyring
from countersign.path.grants import owner_of
from countersign.store.keys import grants_key
from countersign.testing import processes
from countersign.testing.approvals import (
    SigningKey,
    approval_claims,
    grant_claims,
    sign,
    write_jwks,
    write_settings,
)
from countersign.testing.calls import ctx, error_info
from countersign.testing.faults import free_port
from countersign.testing.stack import Stack, changed_registry, registry_with, start_stack
from countersign.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

S = common_pb2
ISSUER = "https://app.example"
KEY = SigningKey.generate("EdDSA", kid="app-1")


@pytest.fixture(scope="module")
def granting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack whose sidecar trusts one approval issuer (the app's backend, with an Ed25519 key)."""
    work = tmp_path_factory.mktemp("grants")
    write_jwks(work / "app.jwks.json", KEY)
    settings = write_settings(
        work / "approvals.json", [{"issuer": ISSUER, "audience": "countersign", "jwks": "app.jwks.json"}]
    )
    yield from start_stack(work, ["--approvals", str(settings), "--max-in-flight", "256"])


def grant(capability: str = "todo.create", uses: int = 3, **claims: Any) -> str:
    """The user's signed grant, as the app's backend issues it."""
    who = {"actor_id": claims.pop("actor_id", "alice"), "tenant_id": claims.pop("tenant_id", "t1")}
    return sign(grant_claims(issuer=ISSUER, capability=capability, uses=uses, **who, **claims), KEY)


def create(stack: Stack, approval: str, **context: Any) -> gateway_pb2.CreateGrantResponse:
    response: gateway_pb2.CreateGrantResponse = stack.stub().CreateGrant(
        gateway_pb2.CreateGrantRequest(context=ctx(**context), approval=approval)
    )
    return response


def listed(stack: Stack, **context: Any) -> list[gateway_pb2.Grant]:
    return list(stack.stub().ListGrants(gateway_pb2.ListGrantsRequest(context=ctx(**context))).grants)


def invoke(stack: Stack, tool: str = "create_todo", request_id: str = "", **args: Any) -> gateway_pb2.InvokeResponse:
    context = {k: args.pop(k) for k in list(args) if k in ("actor_id", "subject_id", "admin_context_id", "admin_mode")}
    response: gateway_pb2.InvokeResponse = stack.stub().Invoke(
        gateway_pb2.InvokeRequest(
            context=ctx(request_id=request_id or uuid.uuid4().hex, **context),
            tool_name=tool,
            arguments_json=json.dumps(args or {"title": uuid.uuid4().hex[:12]}),
        )
    )
    return response


def posts(stack: Stack, keys: set[str]) -> list[dict[str, Any]]:
    """The writes (POST /todos) that reached the todo service carrying one of these idempotency keys."""
    return [e for e in stack.todo.requests(path="/todos") if e["method"] == "POST" and e["idempotency_key"] in keys]


def refused(call: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


def test_fifty_concurrent_invokes_under_a_grant_of_three_make_three_writes_and_47_cards(granting: Stack) -> None:
    created = create(granting, grant(uses=3, actor_id="carol"), actor_id="carol", subject_id="carol").grant
    assert (created.capability_id, created.uses, created.uses_left) == ("todo.create", 3, 3)

    async def fifty() -> list[gateway_pb2.InvokeResponse]:
        async with grpc.aio.insecure_channel(granting.address) as channel:
            stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
            calls = [
                stub.Invoke(
                    gateway_pb2.InvokeRequest(
                        context=ctx(actor_id="carol", subject_id="carol", request_id=uuid.uuid4().hex),
                        tool_name="create_todo",
                        arguments_json=json.dumps({"title": f"并发-{i}"}),
                    )
                )
                for i in range(50)
            ]
            return list(await asyncio.gather(*calls))

    answers = asyncio.run(fifty())
    kinds = [a.WhichOneof("outcome") for a in answers]
    assert kinds.count("action") == 3 and kinds.count("confirmation") == 47, kinds
    ran = [a.action for a in answers if a.WhichOneof("outcome") == "action"]
    assert all(a.state == S.ACTION_STATE_SUCCEEDED and a.receipt.grant_id == created.grant_id for a in ran)
    every = {a.action.action_id if a.WhichOneof("outcome") == "action" else a.confirmation.action_id for a in answers}
    assert len(every) == 50
    assert sorted(e["idempotency_key"] for e in posts(granting, every)) == sorted(a.action_id for a in ran), (
        "exactly the three actions the grant covered reached the downstream, once each"
    )
    assert [g.grant_id for g in listed(granting, actor_id="carol", subject_id="carol")] == [], "used up: not live"
    # the 47 cards are ordinary cards: the user may still confirm one
    card = next(a.confirmation for a in answers if a.WhichOneof("outcome") == "confirmation")
    done = (
        granting.stub()
        .Confirm(gateway_pb2.ConfirmRequest(context=ctx(actor_id="carol", subject_id="carol"), token=card.token))
        .action
    )
    assert done.state == S.ACTION_STATE_SUCCEEDED and done.receipt.grant_id == ""


def test_a_covered_write_runs_at_invoke_and_its_receipt_and_audit_name_the_grant(granting: Stack) -> None:
    made = create(granting, grant(uses=2, actor_id="dan"), actor_id="dan", subject_id="dan").grant
    turn = uuid.uuid4().hex
    first = invoke(granting, request_id=turn, actor_id="dan", subject_id="dan", title="授权创建")
    assert first.WhichOneof("outcome") == "action", first
    action = first.action
    assert action.state == S.ACTION_STATE_SUCCEEDED and not action.replayed
    assert action.receipt.grant_id == made.grant_id and action.receipt.summary == "待办「授权创建」已创建。"
    # the same call in the same turn: the settled outcome, and no second use, no second write
    again = invoke(granting, request_id=turn, actor_id="dan", subject_id="dan", title="授权创建")
    assert again.WhichOneof("outcome") == "replay" and again.replay.receipt == action.receipt
    assert len(posts(granting, {action.action_id})) == 1
    assert [g.uses_left for g in listed(granting, actor_id="dan", subject_id="dan")] == [1]
    got = (
        granting.stub()
        .GetAction(
            gateway_pb2.GetActionRequest(context=ctx(actor_id="dan", subject_id="dan"), action_id=action.action_id)
        )
        .action
    )
    assert got.receipt.grant_id == made.grant_id
    r = redis.Redis(unix_socket_path=granting.redis.info["socket"])
    deadline, kinds = time.monotonic() + 5, {}
    while time.monotonic() < deadline and "settled" not in kinds:
        kinds = {
            json.loads(f[b"e"])["t"]: json.loads(f[b"e"])["f"] for _, f in r.xrange(f"cs:{{{action.action_id}}}:events")
        }
        time.sleep(0.05)
    assert kinds["issued"]["grant"] == kinds["claimed"]["grant"] == made.grant_id
    assert kinds["settled"]["state"] == "SUCCEEDED"
    granted = [json.loads(f[b"e"]) for _, f in r.xrange(f"cs:{{{made.grant_id}}}:events")]
    assert [e["t"] for e in granted] == ["granted"] and granted[0]["f"]["uses"] == 2
    # undoing it is a write like any other: a card, even for a write a grant covered
    undo = granting.stub().Compensate(
        gateway_pb2.CompensateRequest(context=ctx(actor_id="dan", subject_id="dan"), action_id=action.action_id)
    )
    assert undo.confirmation.tool_name == "delete_todo" and undo.action.state == S.ACTION_STATE_COMPENSATING


def test_the_same_grant_twice_is_one_grant_with_the_uses_it_had(granting: Stack) -> None:
    approval = grant(uses=2, actor_id="erin")
    first = create(granting, approval, actor_id="erin", subject_id="erin")
    assert not first.replayed
    assert invoke(granting, actor_id="erin", subject_id="erin").WhichOneof("outcome") == "action"
    second = create(granting, approval, actor_id="erin", subject_id="erin")
    assert second.replayed and second.grant.grant_id == first.grant.grant_id
    assert second.grant.uses_left == 1, "offered again, the grant gets no fresh uses"
    assert len(listed(granting, actor_id="erin", subject_id="erin")) == 1


def test_list_and_revoke_a_grant(granting: Stack) -> None:
    who = {"actor_id": "fay", "subject_id": "fay"}
    later = create(granting, grant(uses=5, ttl=7200, actor_id="fay"), **who).grant
    sooner = create(
        granting, grant("todo.set_status", uses=1, ttl=600, actor_id="fay", args={"status": "done"}), **who
    ).grant
    shown = listed(granting, **who)
    assert [g.grant_id for g in shown] == [sooner.grant_id, later.grant_id], "soonest expiry first"
    assert (shown[0].capability_id, shown[0].uses_left, shown[0].issuer) == ("todo.set_status", 1, ISSUER)
    assert json.loads(shown[0].pinned_arguments_json) == {"status": "done"} and shown[1].pinned_arguments_json == ""
    assert abs(shown[1].expires_at.ToSeconds() - (time.time() + 7200)) < 60
    gone = granting.stub().RevokeGrant(gateway_pb2.RevokeGrantRequest(context=ctx(**who), grant_id=later.grant_id))
    assert gone.grant.revoked and gone.grant.grant_id == later.grant_id
    assert [g.grant_id for g in listed(granting, **who)] == [sooner.grant_id]
    assert invoke(granting, **who).WhichOneof("outcome") == "confirmation", "a revoked grant covers nothing"
    again = granting.stub().RevokeGrant(gateway_pb2.RevokeGrantRequest(context=ctx(**who), grant_id=later.grant_id))
    assert again.grant.revoked, "revoking twice: the same answer"


def test_a_revoked_grant_is_not_created_again_by_its_approval(granting: Stack) -> None:
    who = {"actor_id": "gus", "subject_id": "gus"}
    approval = grant(uses=3, actor_id="gus")
    made = create(granting, approval, **who).grant
    granting.stub().RevokeGrant(gateway_pb2.RevokeGrantRequest(context=ctx(**who), grant_id=made.grant_id))
    err = refused(lambda: create(granting, approval, **who))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.FAILED_PRECONDITION, "GRANT_REVOKED")
    assert listed(granting, **who) == [] and invoke(granting, **who).WhichOneof("outcome") == "confirmation"


def test_an_expired_grant_covers_nothing(granting: Stack) -> None:
    who = {"actor_id": "hal", "subject_id": "hal"}
    now = time.time()
    # past its expiry by 5 s: within the approvals' leeway it still verifies, but it covers nothing
    create(granting, grant(uses=3, actor_id="hal", now=now - 60, ttl=55), **who)
    assert listed(granting, **who) == []
    answer = invoke(granting, **who)
    assert answer.WhichOneof("outcome") == "confirmation"
    assert posts(granting, {answer.confirmation.action_id}) == []


def test_another_owners_grant_covers_nothing_and_cannot_be_seen_revoked_or_taken(granting: Stack) -> None:
    ivy, joe = {"actor_id": "ivy", "subject_id": "ivy"}, {"actor_id": "joe", "subject_id": "joe"}
    approval = grant(uses=3, actor_id="ivy")
    mine = create(granting, approval, **ivy).grant
    assert invoke(granting, **joe).WhichOneof("outcome") == "confirmation"
    assert listed(granting, **joe) == []
    err = refused(
        lambda: granting.stub().RevokeGrant(gateway_pb2.RevokeGrantRequest(context=ctx(**joe), grant_id=mine.grant_id))
    )
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.NOT_FOUND, "GRANT_NOT_FOUND")
    err = refused(lambda: create(granting, approval, **joe))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.PERMISSION_DENIED, "APPROVAL_INVALID")
    assert "owner" in (err.details() or "")
    # in another tenant, the same actor's grant is not theirs either
    stub = granting.stub()
    other = stub.Invoke(
        gateway_pb2.InvokeRequest(
            context=ctx(tenant_id="t2", request_id=uuid.uuid4().hex, **ivy),
            tool_name="create_todo",
            arguments_json=json.dumps({"title": "别的租户"}),
        )
    )
    assert other.WhichOneof("outcome") == "confirmation"
    # nor does it cover an admin acting for its owner
    admin = stub.Invoke(
        gateway_pb2.InvokeRequest(
            context=ctx(
                actor_id="root",
                subject_id="ivy",
                role="admin",
                admin_context_id="t1:support",
                admin_mode=S.ADMIN_MODE_MAINTAIN,
                request_id=uuid.uuid4().hex,
            ),
            tool_name="create_todo",
            arguments_json=json.dumps({"title": "管理员代办"}),
        )
    )
    assert admin.WhichOneof("outcome") == "confirmation"
    assert [g.uses_left for g in listed(granting, **ivy)] == [3], "nobody else took a use"


@pytest.mark.parametrize(
    ("capability", "why"),
    [
        ("todo.delete", "confirmation: always"),
        ("note.delete", "planned"),
        ("account.delete", "forbidden"),
        ("todo.list", "only reads"),
        ("todo.nothing", "no capability"),
    ],
)
def test_a_grant_no_grant_may_cover_is_refused_at_creation(granting: Stack, capability: str, why: str) -> None:
    err = refused(lambda: create(granting, grant(capability, actor_id="kim"), actor_id="kim", subject_id="kim"))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.FAILED_PRECONDITION, "GRANT_NOT_ALLOWED")
    assert why in (err.details() or ""), err.details()
    assert listed(granting, actor_id="kim", subject_id="kim") == []


def test_a_grant_pinning_an_argument_the_tool_does_not_take_is_refused(granting: Stack) -> None:
    approval = grant(actor_id="kim", args={"colour": "red"})
    err = refused(lambda: create(granting, approval, actor_id="kim", subject_id="kim"))
    assert error_info(err).reason == "GRANT_NOT_ALLOWED" and "'colour'" in (err.details() or "")


def test_a_grant_with_pinned_arguments_covers_only_those_values(granting: Stack) -> None:
    who = {"actor_id": "lea", "subject_id": "lea"}
    create(granting, grant(uses=5, actor_id="lea", args={"title": "买牛奶", "priority": 1}), **who)
    assert invoke(granting, title="买牛奶", priority=1, **who).WhichOneof("outcome") == "action"
    assert invoke(granting, title="买牛奶", priority=2, **who).WhichOneof("outcome") == "confirmation"
    assert invoke(granting, title="买面包", priority=1, **who).WhichOneof("outcome") == "confirmation"
    assert invoke(granting, title="买牛奶", **who).WhichOneof("outcome") == "confirmation", "a pinned value missing"
    # aliases are normalised before the comparison: the model's taskTitle is the title
    assert invoke(granting, taskTitle="买牛奶", importance=1, **who).WhichOneof("outcome") == "action"
    assert [g.uses_left for g in listed(granting, **who)] == [3]


def test_an_approval_that_is_no_grant_is_refused_naming_its_check(granting: Stack) -> None:
    who = {"actor_id": "max", "subject_id": "max"}
    err = refused(lambda: create(granting, "", **who))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.PERMISSION_DENIED, "APPROVAL_REQUIRED")
    card_approval = sign(
        approval_claims(
            issuer=ISSUER, actor_id="max", tenant_id="t1", session_id="s1", action_id="0" * 32, digest="sha256:x"
        ),
        KEY,
    )
    err = refused(lambda: create(granting, card_approval, **who))
    assert error_info(err).reason == "APPROVAL_INVALID" and error_info(err).metadata["check"] == "kind"
    forged = sign(
        grant_claims(issuer=ISSUER, actor_id="max", tenant_id="t1", capability="todo.create", uses=9), None, alg="none"
    )
    err = refused(lambda: create(granting, forged, **who))
    assert error_info(err).metadata["check"] == "algorithm"
    assert listed(granting, **who) == []


def test_without_approval_issuers_there_are_no_grants(stack: Stack) -> None:
    err = refused(lambda: create(stack, grant()))
    assert (err.code(), error_info(err).reason) == (grpc.StatusCode.FAILED_PRECONDITION, "APPROVALS_NOT_CONFIGURED")
    assert listed(stack) == []


def test_an_approvals_file_that_cannot_be_used_stops_the_start(tmp_path: Path) -> None:
    broken = tmp_path / "approvals.json"
    broken.write_text(json.dumps({"issuers": [{"issuer": ISSUER, "audience": "countersign", "jwks": "none.json"}]}))
    registry = processes.write_registry(tmp_path, "http://127.0.0.1:9")
    with pytest.raises(RuntimeError, match="--approvals"):
        processes.start_sidecar(tmp_path, registry, flags=["--approvals", str(broken)])


def test_the_same_call_raced_under_a_grant_runs_once_and_takes_one_use(granting: Stack) -> None:
    who = {"actor_id": "ned", "subject_id": "ned"}
    create(granting, grant(uses=3, actor_id="ned"), **who)
    turn = uuid.uuid4().hex

    async def ten() -> list[gateway_pb2.InvokeResponse]:
        async with grpc.aio.insecure_channel(granting.address) as channel:
            stub = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
            request = gateway_pb2.InvokeRequest(
                context=ctx(request_id=turn, **who), tool_name="create_todo", arguments_json='{"title": "同一次"}'
            )
            return list(await asyncio.gather(*(stub.Invoke(request) for _ in range(10))))

    answers = asyncio.run(ten())
    kinds = {a.WhichOneof("outcome") for a in answers}
    assert kinds <= {"action", "replay", "confirmation"} and "action" in kinds, kinds
    ids = {
        (a.action if a.HasField("action") else a.replay if a.HasField("replay") else a.confirmation).action_id
        for a in answers
    }
    assert len(ids) == 1
    assert len(posts(granting, ids)) == 1, "one call, one write"
    assert [g.uses_left for g in listed(granting, **who)] == [2], "one call, one use"


def test_a_grant_covers_nothing_once_the_registry_makes_its_tool_high_risk(granting: Stack) -> None:
    who = {"actor_id": "oli", "subject_id": "oli"}
    create(granting, grant(uses=3, actor_id="oli"), **who)
    riskier = changed_registry(granting, "risk")  # todo.create: risk high, a new policy version
    sidecar = granting.start_sidecar(registry=riskier, flags=["--approvals", str(granting.work / "approvals.json")])
    try:
        answer = granting.stub(sidecar.info["grpc"]).Invoke(
            gateway_pb2.InvokeRequest(
                context=ctx(request_id=uuid.uuid4().hex, **who),
                tool_name="create_todo",
                arguments_json='{"title": "高风险"}',
            )
        )
    finally:
        sidecar.stop()
    assert answer.WhichOneof("outcome") == "confirmation" and answer.confirmation.risk == S.RISK_LEVEL_HIGH
    assert [g.uses_left for g in listed(granting, **who)] == [3]


def test_a_covered_write_whose_request_was_never_sent_becomes_a_card(granting: Stack) -> None:
    who = {"actor_id": "pia", "subject_id": "pia"}
    create(granting, grant(uses=3, actor_id="pia"), **who)
    nowhere = registry_with(granting, execute_url=f"http://127.0.0.1:{free_port()}")
    sidecar = granting.start_sidecar(registry=nowhere, flags=["--approvals", str(granting.work / "approvals.json")])
    request = gateway_pb2.InvokeRequest(
        context=ctx(request_id=uuid.uuid4().hex, **who), tool_name="create_todo", arguments_json='{"title": "没发出"}'
    )
    try:
        stub = granting.stub(sidecar.info["grpc"])
        err = refused(lambda: stub.Invoke(request))
        assert (err.code(), error_info(err).reason) == (grpc.StatusCode.UNAVAILABLE, "DOWNSTREAM_NOT_SENT")
        retried = stub.Invoke(request)
    finally:
        sidecar.stop()
    # nothing reached the downstream, so nothing is lost: the action waits for the user as an ordinary card
    assert retried.WhichOneof("outcome") == "confirmation"
    assert posts(granting, {retried.confirmation.action_id}) == []
    assert [g.uses_left for g in listed(granting, **who)] == [2], "the use stays taken by that action"
    done = granting.stub().Confirm(gateway_pb2.ConfirmRequest(context=ctx(**who), token=retried.confirmation.token))
    assert done.action.state == S.ACTION_STATE_SUCCEEDED and len(posts(granting, {done.action.action_id})) == 1


def test_a_grant_copied_into_another_owners_record_or_edited_covers_nothing(granting: Stack) -> None:
    """What an attacker with Redis write access could copy or edit is detected (the sealed grant's MAC binds its
    owner, capability, uses, expiry and pinned values), and then covers nothing."""
    rae, sam = {"actor_id": "rae", "subject_id": "rae"}, {"actor_id": "sam", "subject_id": "sam"}
    mine = create(granting, grant(uses=3, actor_id="rae"), **rae).grant
    create(granting, grant(uses=1, actor_id="sam", args={"title": "只这一条"}), **sam)
    r = redis.Redis(unix_socket_path=granting.redis.info["socket"])
    keyring = Keyring.from_file(str(granting.keys))
    rae_key, sam_key = (grants_key(owner_of(keyring, ctx(**who))) for who in (rae, sam))
    sealed = r.hget(rae_key, mine.grant_id)
    assert sealed is not None
    r.hset(
        sam_key,
        mapping={
            mine.grant_id: sealed,
            f"{mine.grant_id}:exp": r.hget(rae_key, f"{mine.grant_id}:exp") or b"0",
            f"{mine.grant_id}:n": 0,
        },
    )
    assert [g.pinned_arguments_json for g in listed(granting, **sam)] == ['{"title":"只这一条"}'], (
        "the copy is not listed"
    )
    assert invoke(granting, title="随便写", **sam).WhichOneof("outcome") == "confirmation", "nor does it cover"
    # an edited grant (more uses, no pinned value) is not obeyed either
    doc = json.loads(sealed)
    body = json.loads(doc["body"])
    body["uses"] = 1000
    doc["body"] = json.dumps(body)
    r.hset(rae_key, mine.grant_id, json.dumps(doc))
    assert listed(granting, **rae) == [] and invoke(granting, **rae).WhichOneof("outcome") == "confirmation"


def test_audit_verify_finds_nothing_wrong_with_grants_and_the_writes_they_covered(granting: Stack) -> None:
    who = {"actor_id": "tia", "subject_id": "tia"}
    made = create(granting, grant(uses=2, actor_id="tia"), **who).grant
    assert invoke(granting, **who).WhichOneof("outcome") == "action"
    granting.stub().RevokeGrant(gateway_pb2.RevokeGrantRequest(context=ctx(**who), grant_id=made.grant_id))
    time.sleep(0.3)  # audit events are written in the background
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "countersign.sidecar.cli",
            "audit",
            "verify",
            "--event-grace",
            "300ms",
            "--redis-url",
            granting.redis.info["url"],
            "--keys-file",
            str(granting.keys),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=processes.ROOT,
    )
    assert done.returncode == 0 and "looked at again" not in done.stdout, done.stdout + done.stderr
