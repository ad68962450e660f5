"""The Countersign write path with the Python client package alone (pip install clients/python).

    python walkthrough.py [ADDRESS] [TODO_TITLE]      (or COUNTERSIGN_ADDRESS / TODO_TITLE)

[1] Client.write: Invoke create_todo -> the card (approved here, as a user would) -> Confirm -> the receipt ->
    Open/Claim/SettleContinuation with a reply composed from the receipt, checked by the reply guard;
    the caller's traceparent goes with every call;
[2] the same turn again: the same card, replayed, nothing runs twice;
[3] typed errors: an unknown argument -> InvalidArgument ARGS_INVALID with its field; a forged token ->
    InvalidArgument CONFIRMATION_TOKEN_INVALID.
Exits 0 when every step answered as expected, 1 on the first that did not.
"""

from __future__ import annotations

import os
import sys
import time
import uuid

from countersign_client import Client, InvalidArgument, Unavailable, call_context
from countersign_client.v1 import common_pb2, continuation_pb2, gateway_pb2


def fail(why: str) -> int:
    print(f"✗ {why}", file=sys.stderr)
    return 1


def main() -> int:
    address = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("COUNTERSIGN_ADDRESS", "127.0.0.1:50051")
    title = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("TODO_TITLE", "买牛奶")
    turn = f"python-{int(time.time())}-{uuid.uuid4().hex[:8]}"
    ctx = call_context(tenant_id="demo", actor_id="alice", session_id="s-python", request_id=turn, locale="zh-CN")
    trace_id = uuid.uuid4().hex
    traceparent = f"00-{trace_id}-{uuid.uuid4().hex[:16]}-01"
    print(f"sidecar {address}, turn {turn}, trace {trace_id}")
    try:
        with Client(address) as cs:
            shown: list[str] = []

            def approve(card: gateway_pb2.ConfirmationCard) -> bool:  # the UI shows the card; the user says yes
                shown.append(f"{card.preview.title}「{card.preview.target}」 {card.preview.impact}")
                return True

            def compose(continuation: continuation_pb2.Continuation) -> str:  # the model writes from the receipt
                return f"好的，{continuation.receipt.summary}"

            done = cs.write(
                ctx,
                "create_todo",
                {"taskTitle": title},
                approve=approve,
                compose=compose,
                snapshot=continuation_pb2.ContinuationSnapshot(question=f"帮我建一个待办：{title}", locale="zh-CN"),
                traceparent=traceparent,
            )
            action, card, continuation = done.action, done.card, done.continuation
            if done.outcome != "executed" or not done.succeeded or action is None or card is None:
                return fail(f"expected an executed, succeeded write, got {done.outcome}: {action}")
            print(f"[1] write create_todo → card {card.action_id}: {shown[0]}")
            print(
                f"    Confirm → {common_pb2.ActionState.Name(action.state)}, "
                f"receipt «{action.receipt.summary}» resource {action.receipt.resource_id}"
            )
            if continuation is None or continuation.state != continuation_pb2.CONTINUATION_STATE_SETTLED:
                return fail(f"expected a settled continuation, got {continuation}")
            state = continuation_pb2.ContinuationState.Name(continuation.state)
            print(f"    continuation → {state}: {done.reply_text}")

            again = cs.write(ctx, "create_todo", {"taskTitle": title}, approve=approve, traceparent=traceparent)
            if again.action is None or again.action.action_id != action.action_id or not again.action.replayed:
                return fail(f"expected the same action, replayed: {again.action}")
            print(
                f"[2] the same turn again → {again.outcome}, action {again.action.action_id}, replayed "
                f"{again.action.replayed}"
            )

            try:
                cs.invoke(ctx, "create_todo", {"title": "x", "owner": "mallory"})
                return fail("an unknown argument was accepted")
            except InvalidArgument as err:
                if err.reason != "ARGS_INVALID" or not err.violations:
                    return fail(f"expected ARGS_INVALID with a field violation, got {err!r}")
                print(
                    f"[3] unknown argument → {err.code.name} {err.reason}, field {err.violations[0].field!r}: "
                    f"{err.violations[0].description}"
                )
            forged = card.token[:-1] + ("A" if card.token[-1] != "A" else "B")
            try:
                cs.confirm(ctx, forged)
                return fail("a forged token was accepted")
            except InvalidArgument as err:
                if (err.domain, err.reason) != ("countersign", "CONFIRMATION_TOKEN_INVALID"):
                    return fail(f"expected CONFIRMATION_TOKEN_INVALID, got {err!r}")
                print(f"    forged token → {err.code.name} {err.reason} (domain {err.domain})")
    except Unavailable as err:
        return fail(f"the sidecar at {address} is not reachable: {err}")
    print("python walkthrough: all 3 steps behaved")
    return 0


if __name__ == "__main__":
    sys.exit(main())
