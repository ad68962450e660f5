"""Hostile input (issue 'Hostile input'): property-based tests over real gRPC to a real sidecar process.

Arbitrary JSON arguments, deep nesting, huge strings, invalid UTF-8, NaN/Infinity and big integers, duplicate keys,
alias collisions, forged/truncated/mutated tokens, random CallContexts, and broken registry files. Properties:

* no answer is INTERNAL or UNKNOWN;
* every error carries a google.rpc.ErrorInfo with domain "countersign", an UPPER_SNAKE reason and a message --
  except RESOURCE_EXHAUSTED from gRPC's own message limit (the sidecar's --max-message-bytes, 1 MiB), which gRPC
  answers before any handler runs;
* the downstream saw no write (a POST/PUT/PATCH/DELETE other than /todos/prepare and the by-key lookups) during
  the whole hostile run: nothing executes without a claimed card, and no hostile input claims one;
* the sidecar is alive at the end and its RSS grew by less than 100 MB.

Bugs these properties found (decode errors answered UNKNOWN, control characters in header-bound ids,
errors echoing huge values, registry files crashing the loader) are fixed; their tests below keep them fixed.
"""

from __future__ import annotations

import json
import re
import string
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from countersign import registry as registry_mod
from countersign.errors import RegistryError
from countersign.testing.calls import ctx
from countersign.testing.processes import ROOT
from countersign.testing.stack import Stack
from countersign.v1 import (
    common_pb2,
    continuation_pb2,
    continuation_pb2_grpc,
    gateway_pb2,
    gateway_pb2_grpc,
    guard_pb2,
    guard_pb2_grpc,
)

REASON = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$")
MAX_ARGUMENTS = 64 * 1024
MAX_MESSAGE = 1 << 20
RSS_GROWTH_LIMIT_KB = 100 * 1024
TIMEOUT = 30.0

HOSTILE = settings(
    max_examples=150,
    deadline=None,
    print_blob=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
        HealthCheck.filter_too_much,
    ],
)
FEW = settings(HOSTILE, max_examples=25)

TOOLS = ["create_todo", "set_todo_status", "delete_todo", "list_todos", "delete_note", "delete_account"]
KEYS = ["title", "taskTitle", "dueAt", "deadline", "priority", "importance", "id", "status", "version"]


# -- the run ------------------------------------------------------------------------------------------


@dataclass
class Hostile:
    stack: Stack
    channel: grpc.Channel
    gateway: gateway_pb2_grpc.ToolGatewayServiceStub
    continuations: continuation_pb2_grpc.ContinuationServiceStub
    guard: guard_pb2_grpc.ReplyGuardServiceStub
    owner: dict[str, str]  # the owner of the one real card: unguessable ids
    card: gateway_pb2.ConfirmationCard
    writes_before: int
    rss_before_kb: int

    def raw(self, method: str) -> Callable[..., Any]:
        """A method that sends the given bytes as they are (to put invalid UTF-8 on the wire)."""
        return self.channel.unary_unary(method, request_serializer=lambda b: b, response_deserializer=lambda b: b)


def downstream_writes(stack: Stack) -> list[dict[str, Any]]:
    """Requests that could change something at the downstream: not prepare, not a read, not a lookup/fence."""
    return [
        e
        for e in stack.todo.requests()
        if e["method"] in ("POST", "PUT", "PATCH", "DELETE")
        and not e["path"].endswith("/prepare")
        and "/by-key/" not in e["path"]
    ]


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


@pytest.fixture(scope="module")
def hostile(stack: Stack) -> Iterator[Hostile]:
    channel = grpc.insecure_channel(stack.address, options=[("grpc.max_send_message_length", 16 << 20)])
    gateway = gateway_pb2_grpc.ToolGatewayServiceStub(channel)
    owner = {
        "tenant_id": f"t-{uuid.uuid4().hex}",
        "actor_id": f"u-{uuid.uuid4().hex}",
        "session_id": f"s-{uuid.uuid4().hex}",
        "request_id": uuid.uuid4().hex,
    }
    owner["subject_id"] = owner["actor_id"]
    card = gateway.Invoke(
        gateway_pb2.InvokeRequest(
            context=ctx(**owner), tool_name="create_todo", arguments_json=json.dumps({"title": "hostile target"})
        ),
        timeout=TIMEOUT,
    ).confirmation
    assert card.token.startswith("cs1.")
    run = Hostile(
        stack,
        channel,
        gateway,
        continuation_pb2_grpc.ContinuationServiceStub(channel),
        guard_pb2_grpc.ReplyGuardServiceStub(channel),
        owner,
        card,
        len(downstream_writes(stack)),
        rss_kb(stack.sidecar.pid),
    )
    yield run
    channel.close()


# -- the properties of one answer ------------------------------------------------------------------------


def error_info(err: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    if status is None:
        return None
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info
    return None


def grpc_message_limit(err: grpc.RpcError) -> bool:
    """RESOURCE_EXHAUSTED from gRPC itself: the request was larger than the server's max receive length."""
    return err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in (err.details() or "")


@dataclass
class Answer:
    response: Any = None
    code: grpc.StatusCode = grpc.StatusCode.OK
    reason: str = ""
    details: str = ""


def answer(call: Callable[[], Any]) -> Answer:
    """Make the call and check what every answer must be: never INTERNAL/UNKNOWN, a clear reason in every error."""
    try:
        return Answer(response=call())
    except grpc.RpcError as err:
        return checked(err)


def checked(err: grpc.RpcError) -> Answer:
    code, details = err.code(), err.details() or ""
    assert code not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), f"{code.name}: {details[:500]}"
    if grpc_message_limit(err):
        return Answer(code=code, details=details)
    info = error_info(err)
    assert info is not None, f"{code.name} without a google.rpc.ErrorInfo: {details[:500]}"
    assert info.domain == "countersign", info
    assert REASON.match(info.reason), f"reason {info.reason!r} is not UPPER_SNAKE"
    assert details.strip(), f"{code.name} {info.reason} without a message"
    return Answer(code=code, reason=info.reason, details=details)


# -- strategies ------------------------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**53, max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_keys = st.sampled_from(KEYS) | st.text(max_size=16)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(json_keys, inner, max_size=4),
    max_leaves=25,
)
tool_names = st.sampled_from(TOOLS) | st.text(max_size=64)
# every character but a lone surrogate (a Python str the proto runtime refuses to serialise)
any_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]))
control_text = st.text(
    alphabet=st.characters(codec="ascii", categories=["Cc"]) | st.sampled_from("a-_.\u2028\ufeff"), max_size=64
)
no_control_text = st.text(alphabet=st.characters(exclude_categories=["Cs", "Cc"]))


def ids(alphabet: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Ids as a hostile caller sends them: empty, ordinary, control characters, 1 K and 10 K characters.

    (Ten fields of 10 K characters of up to 4 bytes stay under the 1 MiB message limit.)"""
    return st.one_of(
        st.just(""),
        alphabet,
        st.builds(lambda c, n: ((c or "x") * n)[:n], alphabet.map(lambda s: s[:3]), st.sampled_from([1024, 10 * 1024])),
    )


def contexts(header_ids: st.SearchStrategy[str] = any_text | control_text) -> st.SearchStrategy[common_pb2.CallContext]:
    free = ids(any_text | control_text)
    role = st.sampled_from(["user", "admin", "", "guest"]) | ids(any_text | control_text)
    return st.builds(
        common_pb2.CallContext,
        tenant_id=ids(header_ids),
        actor_id=ids(header_ids),
        subject_id=ids(header_ids),
        session_id=free,
        request_id=free,
        role=role,
        admin_context_id=free,
        admin_mode=st.integers(-(2**31), 2**31 - 1) | st.sampled_from([0, 1, 2, 3]),
        locale=st.sampled_from(["zh-CN", "en", "", "zh", "x-" * 50]) | free,
        session_mode=st.integers(-(2**31), 2**31 - 1) | st.sampled_from([0, 1, 2, 3]),
    )


def number_tokens() -> st.SearchStrategy[str]:
    """JSON-ish numbers JSON must refuse or the schema must bound: NaN, Infinity, 1e999, 2**64, 5000 digits."""
    return (
        st.sampled_from(
            [
                "NaN",
                "-NaN",
                "Infinity",
                "-Infinity",
                "1e999",
                "-1e999",
                "1e-999",
                str(2**64),
                str(-(2**64)),
                "9" * 5000,
                "1" + "0" * 4400,
                "1.5",
                "-0",
                "0.0",
            ]
        )
        | st.integers(min_value=2**63).map(str)
        | st.integers(max_value=-(2**63)).map(str)
    )


# -- Invoke arguments ----------------------------------------------------------------------------------------


@HOSTILE
@given(tool=tool_names, value=json_values | st.dictionaries(json_keys, json_values, max_size=6))
def test_arbitrary_json_arguments(hostile: Hostile, tool: str, value: Any) -> None:
    text = json.dumps(value, ensure_ascii=False)
    got = answer(
        lambda: hostile.gateway.Invoke(
            gateway_pb2.InvokeRequest(context=ctx(request_id=uuid.uuid4().hex), tool_name=tool, arguments_json=text),
            timeout=TIMEOUT,
        )
    )
    if not isinstance(value, dict) and tool in ("create_todo", "set_todo_status", "delete_todo", "list_todos"):
        assert (got.code, got.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ARGS_INVALID"), got


@HOSTILE
@given(
    tool=st.sampled_from(["create_todo", "set_todo_status", "list_todos"]),
    key=st.sampled_from(KEYS),
    token=number_tokens(),
    where=st.sampled_from(["top", "nested", "array"]),
)
@example(tool="create_todo", key="title", token="NaN", where="top")
@example(tool="create_todo", key="priority", token=str(2**64), where="top")
def test_nan_infinity_and_big_numbers(hostile: Hostile, tool: str, key: str, token: str, where: str) -> None:
    inner = {"top": token, "nested": f'{{"x": {token}}}', "array": f"[1, {token}]"}[where]
    text = f'{{"title": "t", "{key}": {inner}}}' if key != "title" else f'{{"title": {inner}}}'
    got = answer(
        lambda: hostile.gateway.Invoke(
            gateway_pb2.InvokeRequest(context=ctx(request_id=uuid.uuid4().hex), tool_name=tool, arguments_json=text),
            timeout=TIMEOUT,
        )
    )
    if token in ("NaN", "-NaN", "Infinity", "-Infinity", "1e999", "-1e999") or len(token) > 4300:
        assert (got.code, got.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ARGS_INVALID"), (text[:100], got)


@HOSTILE
@given(
    tool=st.sampled_from(["create_todo", "set_todo_status", "delete_todo", "list_todos"]),
    pairs=st.lists(st.tuples(st.sampled_from(["title", "id", "status", "a"]), json_scalars), min_size=2, max_size=6),
)
def test_duplicate_keys_are_args_invalid(hostile: Hostile, tool: str, pairs: list[tuple[str, Any]]) -> None:
    keys = [k for k, _ in pairs]
    assume(len(set(keys)) < len(keys))
    text = "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in pairs) + "}"
    got = answer(
        lambda: hostile.gateway.Invoke(
            gateway_pb2.InvokeRequest(context=ctx(request_id=uuid.uuid4().hex), tool_name=tool, arguments_json=text),
            timeout=TIMEOUT,
        )
    )
    assert (got.code, got.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ARGS_INVALID"), (text, got)
    assert "duplicate key" in got.details


@HOSTILE
@given(
    pair=st.sampled_from([("taskTitle", "title"), ("deadline", "dueAt"), ("importance", "priority")]),
    alias_first=st.booleans(),
    a=json_scalars,
    b=json_scalars,
    extra=st.dictionaries(json_keys, json_scalars, max_size=2),
)
def test_alias_and_target_together_are_args_invalid(
    hostile: Hostile, pair: tuple[str, str], alias_first: bool, a: Any, b: Any, extra: dict[str, Any]
) -> None:
    alias, target = pair
    items = [(alias, a), (target, b)] if alias_first else [(target, b), (alias, a)]
    args = {k: v for k, v in extra.items() if k not in pair} | dict(items)
    got = answer(
        lambda: hostile.gateway.Invoke(
            gateway_pb2.InvokeRequest(
                context=ctx(request_id=uuid.uuid4().hex), tool_name="create_todo", arguments_json=json.dumps(args)
            ),
            timeout=TIMEOUT,
        )
    )
    assert (got.code, got.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ARGS_INVALID"), (args, got)


def nest(depth: int, kind: str) -> str:
    if kind == "list":
        return '{"title": ' + "[" * depth + "]" * depth + "}"
    if kind == "dict":
        return '{"a": ' * depth + "1" + "}" * depth
    return '{"t": ' + '[{"a": ' * (depth // 2) + "1" + "}]" * (depth // 2) + "}"


@HOSTILE
@given(
    depth=st.integers(100, 40_000),
    kind=st.sampled_from(["list", "dict", "mixed"]),
    tool=st.sampled_from(["create_todo", "list_todos", "delete_todo"]),
)
@example(depth=100, kind="list", tool="create_todo")
@example(depth=30_000, kind="list", tool="create_todo")  # under 64 KiB, deeper than Python's recursion limit
def test_deep_nesting_is_args_invalid(hostile: Hostile, depth: int, kind: str, tool: str) -> None:
    text = nest(depth, kind)
    got = answer(
        lambda: hostile.gateway.Invoke(
            gateway_pb2.InvokeRequest(context=ctx(request_id=uuid.uuid4().hex), tool_name=tool, arguments_json=text),
            timeout=TIMEOUT,
        )
    )
    assert (got.code, got.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ARGS_INVALID"), (depth, kind, got)


@FEW
@given(
    size=st.integers(MAX_ARGUMENTS - 16, MAX_MESSAGE - 4096),
    char=st.sampled_from(["x", "€", "買", "😀", "\\u0000"]),
    field=st.sampled_from(["arguments", "token", "reply_text", "context"]),
)
@example(size=MAX_ARGUMENTS + 1, char="x", field="arguments")
@example(size=MAX_ARGUMENTS // 3 + 10, char="€", field="arguments")  # under 64 Ki characters, over 64 KiB
def test_huge_strings_under_the_message_limit(hostile: Hostile, size: int, char: str, field: str) -> None:
    big = (char * size)[: max(1, (MAX_MESSAGE - 4096) // len(char.encode()))]
    if field == "arguments":
        text = json.dumps({"title": big}, ensure_ascii=False) if char != "\\u0000" else f'{{"title": "{big}"}}'
        got = answer(
            lambda: hostile.gateway.Invoke(
                gateway_pb2.InvokeRequest(
                    context=ctx(request_id=uuid.uuid4().hex), tool_name="create_todo", arguments_json=text
                ),
                timeout=TIMEOUT,
            )
        )
        if len(text.encode()) > MAX_ARGUMENTS:
            assert (got.code, got.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ARGS_INVALID"), got
            assert "larger than" in got.details
    elif field == "token":
        got = answer(
            lambda: hostile.gateway.Confirm(gateway_pb2.ConfirmRequest(context=ctx(), token=big), timeout=TIMEOUT)
        )
        assert got.reason == "CONFIRMATION_TOKEN_INVALID"
    elif field == "reply_text":
        got = answer(
            lambda: hostile.guard.CheckReply(
                guard_pb2.CheckReplyRequest(context=ctx(), reply_text=big, action_ids=[hostile.card.action_id]),
                timeout=TIMEOUT,
            )
        )
    else:
        got = answer(
            lambda: hostile.gateway.Invoke(
                gateway_pb2.InvokeRequest(context=ctx(session_id=big), tool_name="list_todos", arguments_json="{}"),
                timeout=TIMEOUT,
            )
        )
    assert got.code != grpc.StatusCode.RESOURCE_EXHAUSTED, "under the message limit the sidecar answers itself"


@settings(HOSTILE, max_examples=10)
@given(
    size=st.integers(MAX_MESSAGE + 1, 4 * MAX_MESSAGE),
    rpc=st.sampled_from(["Invoke", "Confirm", "CheckReply", "OpenContinuation"]),
)
@example(size=MAX_MESSAGE + 1, rpc="Invoke")
def test_over_the_message_limit_grpc_refuses_and_the_sidecar_survives(hostile: Hostile, size: int, rpc: str) -> None:
    big = "x" * size
    call: Callable[[], Any] = {
        "Invoke": lambda: hostile.gateway.Invoke(
            gateway_pb2.InvokeRequest(
                context=ctx(), tool_name="create_todo", arguments_json=json.dumps({"title": big})
            ),
            timeout=TIMEOUT,
        ),
        "Confirm": lambda: hostile.gateway.Confirm(
            gateway_pb2.ConfirmRequest(context=ctx(), token=big), timeout=TIMEOUT
        ),
        "CheckReply": lambda: hostile.guard.CheckReply(
            guard_pb2.CheckReplyRequest(context=ctx(), reply_text=big), timeout=TIMEOUT
        ),
        "OpenContinuation": lambda: hostile.continuations.OpenContinuation(
            continuation_pb2.OpenContinuationRequest(
                context=ctx(),
                action_id=hostile.card.action_id,
                snapshot=continuation_pb2.ContinuationSnapshot(question=big),
            ),
            timeout=TIMEOUT,
        ),
    }[rpc]
    got = answer(call)
    assert got.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in got.details, got
    assert hostile.stack.sidecar.alive()
    # and it still answers the next caller at once
    assert (
        answer(
            lambda: hostile.gateway.Invoke(
                gateway_pb2.InvokeRequest(context=ctx(), tool_name="list_todos", arguments_json="{}"), timeout=TIMEOUT
            )
        ).code
        == grpc.StatusCode.OK
    )


# -- invalid UTF-8: only a hand-built message can carry it ------------------------------------------------

invalid_utf8 = st.binary(min_size=1, max_size=64).filter(lambda b: not _is_utf8(b)) | st.sampled_from(
    [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b'{"title": "\xfe"}', b"\xf4\x90\x80\x80", b"abc\x80"]
)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def with_string(message: Message, field: str, value: bytes) -> bytes:
    """message's bytes with one more (last one wins) occurrence of string field `field` holding raw bytes."""
    number = message.DESCRIPTOR.fields_by_name[field].number
    return message.SerializeToString() + _varint(number << 3 | 2) + _varint(len(value)) + value


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


UTF8_TARGETS: dict[str, tuple[str, Message, list[str]]] = {
    "Invoke": (
        "/countersign.v1.ToolGatewayService/Invoke",
        gateway_pb2.InvokeRequest(context=ctx(), tool_name="create_todo", arguments_json='{"title": "x"}'),
        ["arguments_json", "tool_name"],
    ),
    "Confirm": ("/countersign.v1.ToolGatewayService/Confirm", gateway_pb2.ConfirmRequest(context=ctx()), ["token"]),
    "CheckReply": (
        "/countersign.v1.ReplyGuardService/CheckReply",
        guard_pb2.CheckReplyRequest(context=ctx()),
        ["reply_text", "action_ids"],
    ),
}


def raw_call(hostile: Hostile, rpc: str, field: str, value: bytes) -> grpc.RpcError | bytes:
    path, message, _ = UTF8_TARGETS[rpc]
    try:
        out: bytes = hostile.raw(path)(with_string(message, field, value), timeout=TIMEOUT)
        return out
    except grpc.RpcError as err:
        return err


@settings(HOSTILE, max_examples=60)
@given(target=st.sampled_from([(rpc, f) for rpc, (_, _, fs) in UTF8_TARGETS.items() for f in fs]), value=invalid_utf8)
def test_invalid_utf8_is_refused_before_any_handler_and_nothing_runs(
    hostile: Hostile, target: tuple[str, str], value: bytes
) -> None:
    """A message that does not decode (invalid UTF-8 in a string field) is answered INVALID_ARGUMENT
    REQUEST_INVALID by the sidecar's own decoder wrapper; nothing is parsed further, nothing executes."""
    got = raw_call(hostile, *target, value)
    assert isinstance(got, grpc.RpcError), f"a message with invalid UTF-8 was accepted: {got!r}"
    code, details = got.code(), got.details() or ""
    assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details)
    info = error_info(got)
    assert info is not None and info.domain == "countersign" and REASON.match(info.reason)


@pytest.mark.parametrize(
    "payload",
    [
        with_string(
            gateway_pb2.InvokeRequest(context=ctx(), tool_name="create_todo"), "arguments_json", b'{"t": "\xff"}'
        ),
        b"\xff\xff\xff\xff",
    ],
    ids=["invalid-utf8-arguments", "corrupt-wire-format"],
)
def test_undecodable_request_is_invalid_argument_with_a_reason(hostile: Hostile, payload: bytes) -> None:
    with pytest.raises(grpc.RpcError) as info:
        hostile.raw("/countersign.v1.ToolGatewayService/Invoke")(payload, timeout=TIMEOUT)
    checked(info.value)


# -- tokens ----------------------------------------------------------------------------------------------


def mutations(token: str) -> st.SearchStrategy[str]:
    """Forged, truncated and mutated versions of a real token."""
    n = len(token)
    flip = st.builds(
        lambda i, c: token[:i] + c + token[i + 1 :],
        st.integers(0, n - 1),
        st.sampled_from(string.ascii_letters + string.digits + "-_.=+/ \x00é"),
    )
    cut = st.builds(lambda i, j: token[:i] + token[j:], st.integers(0, n), st.integers(0, n))
    insert = st.builds(lambda i, s: token[:i] + s + token[i:], st.integers(0, n), st.text(min_size=1, max_size=8))
    parts = token.split(".")
    swap = st.permutations(parts).map(".".join)
    segments = st.builds(
        lambda i, s: ".".join([*parts[:i], s, *parts[i + 1 :]]),
        st.integers(0, 3),
        st.text(alphabet=string.ascii_letters + string.digits + "-_", max_size=50),
    )
    case = st.just(token.swapcase()) | st.just(token.upper()) | st.just(token.lower())
    padded = st.sampled_from([token + "=", token + "==", " " + token, token + "\n", token + ".", "." + token])
    return st.one_of(flip, cut, insert, swap, segments, case, padded)


@HOSTILE
@given(
    data=st.data(),
    rpc=st.sampled_from(["Confirm", "Reject", "ClaimContinuation", "SettleContinuation"]),
    wait_ms=st.integers(0, 2**32 - 1),
)
def test_forged_truncated_and_mutated_tokens(hostile: Hostile, data: st.DataObject, rpc: str, wait_ms: int) -> None:
    real = hostile.card.token
    token = data.draw(st.one_of(mutations(real), any_text, st.just("")), label="token")
    assume(token != real)
    context = ctx(**hostile.owner)  # even the card's own owner: a token that is not the token is nothing
    call: Callable[[], Any] = {
        "Confirm": lambda: hostile.gateway.Confirm(
            gateway_pb2.ConfirmRequest(context=context, token=token, wait_ms=min(wait_ms, 50)), timeout=TIMEOUT
        ),
        "Reject": lambda: hostile.gateway.Reject(
            gateway_pb2.RejectRequest(context=context, token=token), timeout=TIMEOUT
        ),
        "ClaimContinuation": lambda: hostile.continuations.ClaimContinuation(
            continuation_pb2.ClaimContinuationRequest(context=context, token=token), timeout=TIMEOUT
        ),
        "SettleContinuation": lambda: hostile.continuations.SettleContinuation(
            continuation_pb2.SettleContinuationRequest(context=context, token=token, reply_text="好了"), timeout=TIMEOUT
        ),
    }[rpc]
    got = answer(call)
    assert got.code == grpc.StatusCode.INVALID_ARGUMENT, (token, got)
    expected = "CONFIRMATION_TOKEN_INVALID" if rpc in ("Confirm", "Reject") else "CONTINUATION_TOKEN_INVALID"
    assert got.reason == expected, (token, got)


# -- contexts ---------------------------------------------------------------------------------------------


@HOSTILE
@given(context=contexts(), tool=st.sampled_from(["create_todo", "list_todos", "delete_todo", "delete_note"]))
def test_random_call_contexts_on_invoke(hostile: Hostile, context: common_pb2.CallContext, tool: str) -> None:
    args = {"create_todo": {"title": "上下文"}, "delete_todo": {"id": "t_none"}}.get(tool, {})
    answer(
        lambda: hostile.gateway.Invoke(
            gateway_pb2.InvokeRequest(context=context, tool_name=tool, arguments_json=json.dumps(args)), timeout=TIMEOUT
        )
    )


@HOSTILE
@given(context=contexts(), rpc=st.sampled_from(["Confirm", "GetAction", "OpenContinuation", "CheckReply"]))
def test_random_call_contexts_never_reach_anothers_card(
    hostile: Hostile, context: common_pb2.CallContext, rpc: str
) -> None:
    card = hostile.card
    assume(not all(getattr(context, k) == v for k, v in hostile.owner.items() if k != "request_id"))
    call: Callable[[], Any] = {
        "Confirm": lambda: hostile.gateway.Confirm(
            gateway_pb2.ConfirmRequest(context=context, token=card.token), timeout=TIMEOUT
        ),
        "GetAction": lambda: hostile.gateway.GetAction(
            gateway_pb2.GetActionRequest(context=context, action_id=card.action_id), timeout=TIMEOUT
        ),
        "OpenContinuation": lambda: hostile.continuations.OpenContinuation(
            continuation_pb2.OpenContinuationRequest(context=context, action_id=card.action_id), timeout=TIMEOUT
        ),
        "CheckReply": lambda: hostile.guard.CheckReply(
            guard_pb2.CheckReplyRequest(context=context, reply_text="已经帮你创建好了。", action_ids=[card.action_id]),
            timeout=TIMEOUT,
        ),
    }[rpc]
    got = answer(call)
    if rpc == "CheckReply" and got.code == grpc.StatusCode.OK:
        assert got.response.verdict != guard_pb2.GUARD_VERDICT_PASSED, "another owner's card backs no claim"
    else:
        assert got.code in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.INVALID_ARGUMENT), got
    assert "hostile target" not in got.details


@pytest.mark.parametrize("char", ["\n", "\r", "\x00", "\x7f"])
def test_control_characters_in_header_bound_ids_are_request_invalid(hostile: Hostile, char: str) -> None:
    context = ctx(actor_id="alice" + char, subject_id="alice" + char, request_id=uuid.uuid4().hex)
    got = answer(
        lambda: hostile.gateway.Invoke(
            gateway_pb2.InvokeRequest(context=context, tool_name="create_todo", arguments_json='{"title": "x"}'),
            timeout=TIMEOUT,
        )
    )
    assert got.code == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize("what", ["tool_name", "role", "duplicate_key"])
def test_errors_do_not_echo_a_huge_value(hostile: Hostile, what: str) -> None:
    big = "x" * 8000
    request = {
        "tool_name": gateway_pb2.InvokeRequest(context=ctx(), tool_name=big, arguments_json="{}"),
        "role": gateway_pb2.InvokeRequest(
            context=ctx(role=big), tool_name="create_todo", arguments_json='{"title": "x"}'
        ),
        "duplicate_key": gateway_pb2.InvokeRequest(
            context=ctx(), tool_name="create_todo", arguments_json=f'{{"{big}": 1, "{big}": 2}}'
        ),
    }[what]
    got = answer(lambda: hostile.gateway.Invoke(request, timeout=TIMEOUT))
    assert got.reason and len(got.details) < 1024


# -- other text fields ------------------------------------------------------------------------------------


@HOSTILE
@given(
    text=any_text | control_text,
    action_ids=st.lists(any_text | st.just("0" * 32), max_size=4),
    locale=st.sampled_from(["zh-CN", "en", ""]) | any_text,
)
def test_reply_guard_with_random_text(hostile: Hostile, text: str, action_ids: list[str], locale: str) -> None:
    got = answer(
        lambda: hostile.guard.CheckReply(
            guard_pb2.CheckReplyRequest(context=ctx(locale=locale), reply_text=text, action_ids=action_ids),
            timeout=TIMEOUT,
        )
    )
    if got.code == grpc.StatusCode.OK:
        assert got.response.verdict in (guard_pb2.GUARD_VERDICT_PASSED, guard_pb2.GUARD_VERDICT_REPLACED)


@HOSTILE
@given(
    action_id=any_text | st.text(alphabet="0123456789abcdef", min_size=32, max_size=32),
    question=any_text | control_text,
)
def test_random_action_ids_and_snapshots(hostile: Hostile, action_id: str, question: str) -> None:
    answer(
        lambda: hostile.gateway.GetAction(
            gateway_pb2.GetActionRequest(context=ctx(), action_id=action_id), timeout=TIMEOUT
        )
    )
    answer(
        lambda: hostile.continuations.OpenContinuation(
            continuation_pb2.OpenContinuationRequest(
                context=ctx(), action_id=action_id, snapshot=continuation_pb2.ContinuationSnapshot(question=question)
            ),
            timeout=TIMEOUT,
        )
    )


# -- registry files ----------------------------------------------------------------------------------------

EXAMPLE_REGISTRY = (ROOT / "examples" / "registry.yaml").read_text(encoding="utf-8")
RULES = {
    "readable",
    "yaml",
    "known-keys",
    "unique-names",
    "write-needs-enabled-capability",
    "no-tool-for-disabled-capability",
    "capability-exists",
    "capability-names-tool",
    "risk-matches-capability",
    "confirmation-matches-capability",
    "write-needs-confirmation",
    "schema-valid",
    "schema-closed",
    "alias-no-collision",
    "template-fields",
    "adapter-valid",
    "compensation-is-write-tool",
}


def load_registry(tmp: Path, data: bytes) -> None:
    """Load must succeed, or fail with `<file>: tool '<name>': <rule>: <detail>` naming a known rule."""
    path = tmp / f"registry-{uuid.uuid4().hex}.yaml"
    path.write_bytes(data)
    try:
        registry_mod.load(str(path))
    except RegistryError as exc:
        assert exc.rule in RULES, exc
        assert str(exc).startswith(f"{path}: tool "), exc
        assert exc.detail.strip(), exc
    finally:
        path.unlink()


yaml_bits = st.text(
    alphabet=st.characters(exclude_categories=["Cs"]) | st.sampled_from(list(":{}[]-,&*!|>'\"#\n ~")), max_size=12
) | st.sampled_from(
    [
        "? ",
        "<<: ",
        "!!python/object:os.system ",
        "&a ",
        "*a",
        "!!binary ",
        "{[a]: 1}",
        "? [a]\n: 1\n",
        "\t",
        "---\n",
        "%YAML 1.1\n",
    ]
)
text_edits = st.lists(
    st.tuples(st.integers(0, len(EXAMPLE_REGISTRY)), st.integers(0, 40), yaml_bits), min_size=1, max_size=4
)


@HOSTILE
@given(edits=text_edits)
def test_registry_file_edits_fail_with_a_named_rule(
    tmp_path_factory: pytest.TempPathFactory, edits: list[tuple[int, int, str]]
) -> None:
    text = EXAMPLE_REGISTRY
    for at, cut, insert in edits:
        at = min(at, len(text))
        text = text[:at] + insert + text[at + cut :]
    load_registry(tmp_path_factory.getbasetemp(), text.encode("utf-8"))


def _replace_at(doc: Any, path: list[int], value: Any) -> Any:
    """doc with the node chosen by path (indexes into dict items / list elements) replaced by value."""
    if not path or not isinstance(doc, dict | list) or not doc:
        return value
    i = path[0] % len(doc)
    if isinstance(doc, dict):
        key = list(doc)[i]
        return {**doc, key: _replace_at(doc[key], path[1:], value)}
    return [*doc[:i], _replace_at(doc[i], path[1:], value), *doc[i + 1 :]]


yaml_values = st.recursive(
    json_scalars | st.dates() | st.just("{title}") | st.just("{nope}"),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "id",
                    "name",
                    "status",
                    "tool",
                    "type",
                    "properties",
                    "kind",
                    "url",
                    "additionalProperties",
                    "aliases",
                    "x",
                ]
            )
            | st.text(max_size=8),
            inner,
            max_size=3,
        )
    ),
    max_leaves=10,
)


@HOSTILE
@given(path=st.lists(st.integers(0, 50), max_size=6), value=yaml_values)
def test_registry_structure_edits_fail_with_a_named_rule(
    tmp_path_factory: pytest.TempPathFactory, path: list[int], value: Any
) -> None:
    import yaml

    doc = yaml.safe_load(EXAMPLE_REGISTRY)
    mutated = _replace_at(doc, path, value)
    load_registry(tmp_path_factory.getbasetemp(), yaml.safe_dump(mutated, allow_unicode=True).encode("utf-8"))


@pytest.mark.parametrize(
    "data",
    [
        b"policy_version: \xff\xfe\n",
        b"? [a, b]\n: 1\n",
        b"{[a]: 1}\n",
        b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n",
        EXAMPLE_REGISTRY.replace("aliases: {taskTitle: title,", "aliases: {taskTitle: [title],").encode(),
        EXAMPLE_REGISTRY.replace("    is_write: false\n", "    is_write: false\n    verbs: [[create]]\n", 1).encode(),
    ],
    ids=["invalid-utf8", "list-key", "flow-mapping-key", "deep-nesting", "alias-target-list", "verbs-of-lists"],
)
def test_broken_registry_files_fail_with_a_named_rule(tmp_path: Path, data: bytes) -> None:
    load_registry(tmp_path, data)


# -- and after all of that -----------------------------------------------------------------------------------


def test_zz_after_the_hostile_run_nothing_was_written_and_the_sidecar_is_healthy(hostile: Hostile) -> None:
    """Runs last in this module (file order): the whole hostile run left no write and no leak."""
    stack = hostile.stack
    assert stack.sidecar.alive(), stack.sidecar.log()[-2000:]
    writes = downstream_writes(stack)
    assert len(writes) == hostile.writes_before, f"writes during the hostile run: {writes[hostile.writes_before :]}"
    health = health_pb2_grpc.HealthStub(hostile.channel).Check(
        health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT
    )
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    grown = rss_kb(stack.sidecar.pid) - hostile.rss_before_kb
    assert grown < RSS_GROWTH_LIMIT_KB, f"the sidecar's RSS grew by {grown // 1024} MB during the hostile run"
    # the real card is untouched: its owner still executes it exactly once
    action = hostile.gateway.Confirm(
        gateway_pb2.ConfirmRequest(context=ctx(**hostile.owner), token=hostile.card.token), timeout=TIMEOUT
    ).action
    assert action.state == common_pb2.ACTION_STATE_SUCCEEDED and not action.replayed
    assert len(stack.todo.writes(hostile.card.action_id)) == 1
