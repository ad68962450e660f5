"""The client: one method per RPC, typed errors, retries with backoff that honour RetryInfo, the caller's
traceparent passed on, and `write` for the whole Invoke -> card -> Confirm -> continuation sequence.

Every sidecar RPC is safe to repeat (a repeated Invoke of the same turn gets the same card, a repeated Confirm
the same action, replayed), so OVERLOADED and UNAVAILABLE answers are retried; nothing else is.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

import grpc

from countersign_client.errors import CountersignError, from_rpc_error
from countersign_client.v1 import (
    common_pb2,
    continuation_pb2,
    continuation_pb2_grpc,
    gateway_pb2,
    gateway_pb2_grpc,
    guard_pb2,
    guard_pb2_grpc,
)

T = TypeVar("T")
DEFAULT_ADDRESS = "127.0.0.1:50051"


@dataclass(frozen=True)
class Backoff:
    """Retries of OVERLOADED / UNAVAILABLE: exponential from ``initial``, times ``multiplier`` per attempt, at most
    ``maximum``, with +-``jitter`` so retries spread out; never sooner than the sidecar's RetryInfo delay."""

    attempts: int = 4  # calls in all, the first included
    initial: float = 0.05
    multiplier: float = 2.0
    maximum: float = 2.0
    jitter: float = 0.2

    def delay(self, attempt: int, retry_after: float | None, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait before call number ``attempt + 1`` (``attempt`` >= 1 calls have failed)."""
        pause = min(self.maximum, self.initial * self.multiplier ** (attempt - 1))
        return max(pause * (1 + self.jitter * (2 * rand() - 1)), retry_after or 0.0)


def _otel_headers() -> dict[str, str]:
    """The current OpenTelemetry context as W3C headers, when the agent uses OpenTelemetry (optional)."""
    try:
        from opentelemetry import propagate
    except ImportError:
        return {}
    headers: dict[str, str] = {}
    propagate.inject(headers)
    return headers


def call_context(
    *,
    tenant_id: str,
    actor_id: str,
    session_id: str,
    request_id: str,
    subject_id: str = "",
    role: str = "user",
    locale: str = "",
    **more: Any,
) -> common_pb2.CallContext:
    """Who asks, for whom, in which session and turn (request_id: one user turn)."""
    return common_pb2.CallContext(
        tenant_id=tenant_id,
        actor_id=actor_id,
        subject_id=subject_id or actor_id,
        session_id=session_id,
        request_id=request_id,
        role=role,
        locale=locale,
        **more,
    )


@dataclass
class Written:
    """What `Client.write` did. ``outcome``: result (a read answered at once), refusal (planned or forbidden
    capability), rejected (the user said no), executed (confirmed and run, or run under a standing grant with no
    card: see ``action``)."""

    outcome: Literal["result", "refusal", "rejected", "executed"]
    response: gateway_pb2.InvokeResponse
    card: gateway_pb2.ConfirmationCard | None = None
    action: common_pb2.Action | None = None
    continuation: continuation_pb2.Continuation | None = None
    reply_text: str = ""  # the guarded final reply, when a continuation was settled
    attempts: dict[str, int] = field(default_factory=dict)

    @property
    def succeeded(self) -> bool:
        return self.action is not None and self.action.state == common_pb2.ACTION_STATE_SUCCEEDED


class Client:
    """A Countersign sidecar at ``target`` (host:port or unix:/path; default $COUNTERSIGN_ADDRESS, else
    127.0.0.1:50051), or over a channel you made. ``timeout`` bounds each call, its retries included."""

    def __init__(
        self,
        target: str | grpc.Channel | None = None,
        *,
        timeout: float = 10.0,
        backoff: Backoff = Backoff(),
        trace_headers: Callable[[], Mapping[str, str]] = _otel_headers,
        on_retry: Callable[[CountersignError, float], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if target is None or isinstance(target, str):
            self.target = target or os.environ.get("COUNTERSIGN_ADDRESS") or DEFAULT_ADDRESS
            self.channel: grpc.Channel = grpc.insecure_channel(self.target)
            self._owned = True
        else:
            self.target, self.channel, self._owned = "", target, False
        self.timeout, self.backoff, self.trace_headers, self.sleep = timeout, backoff, trace_headers, sleep
        self.on_retry = on_retry  # called with the error and the pause before each retry (for logs)
        self.gateway = gateway_pb2_grpc.ToolGatewayServiceStub(self.channel)  # type: ignore[no-untyped-call]
        self.continuations = continuation_pb2_grpc.ContinuationServiceStub(  # type: ignore[no-untyped-call]
            self.channel
        )
        self.guard = guard_pb2_grpc.ReplyGuardServiceStub(self.channel)  # type: ignore[no-untyped-call]
        self.attempts: dict[str, int] = {}  # calls made per RPC, retries included (for logs and tests)

    def close(self) -> None:
        if self._owned:
            self.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- the one place calls are made ------------------------------------------------------------------------

    def _call(
        self,
        name: str,
        method: Callable[..., Any],
        request: Any,
        traceparent: str | None,
        timeout: float | None,
        answer: type[T],
    ) -> T:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        metadata = dict(self.trace_headers())
        if traceparent:
            metadata["traceparent"] = traceparent
        attempt = 0
        while True:
            attempt += 1
            self.attempts[name] = self.attempts.get(name, 0) + 1
            try:
                response = method(
                    request, timeout=max(0.001, deadline - time.monotonic()), metadata=tuple(metadata.items())
                )
                return cast(T, response)  # `answer` documents the type; grpc's stubs are untyped
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
                if not error.retryable or attempt >= self.backoff.attempts:
                    raise error from exc
                pause = self.backoff.delay(attempt, error.retry_after)
                if time.monotonic() + pause >= deadline:
                    raise error from exc
                if self.on_retry is not None:
                    self.on_retry(error, pause)
                self.sleep(pause)

    # -- ToolGatewayService -----------------------------------------------------------------------------------

    def invoke(
        self,
        context: common_pb2.CallContext,
        tool_name: str,
        arguments: Mapping[str, Any] | str,
        *,
        traceparent: str | None = None,
        timeout: float | None = None,
    ) -> gateway_pb2.InvokeResponse:
        """A tool call the model proposed: a read's result, a write's confirmation card, a refusal or a replay."""
        args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        request = gateway_pb2.InvokeRequest(context=context, tool_name=tool_name, arguments_json=args)
        return self._call("Invoke", self.gateway.Invoke, request, traceparent, timeout, gateway_pb2.InvokeResponse)

    def confirm(
        self,
        context: common_pb2.CallContext,
        token: str,
        *,
        wait_ms: int = 0,
        traceparent: str | None = None,
        timeout: float | None = None,
    ) -> common_pb2.Action:
        """The user's yes: executes the card once; a duplicate gets the same action (replayed), waiting up to
        ``wait_ms`` for a running one to settle."""
        return self._call(
            "Confirm",
            self.gateway.Confirm,
            gateway_pb2.ConfirmRequest(context=context, token=token, wait_ms=wait_ms),
            traceparent,
            timeout,
            gateway_pb2.ConfirmResponse,
        ).action

    def reject(
        self,
        context: common_pb2.CallContext,
        token: str,
        *,
        traceparent: str | None = None,
        timeout: float | None = None,
    ) -> common_pb2.Action:
        return self._call(
            "Reject",
            self.gateway.Reject,
            gateway_pb2.RejectRequest(context=context, token=token),
            traceparent,
            timeout,
            gateway_pb2.RejectResponse,
        ).action

    def get_action(
        self,
        context: common_pb2.CallContext,
        action_id: str,
        *,
        traceparent: str | None = None,
        timeout: float | None = None,
    ) -> common_pb2.Action:
        return self._call(
            "GetAction",
            self.gateway.GetAction,
            gateway_pb2.GetActionRequest(context=context, action_id=action_id),
            traceparent,
            timeout,
            gateway_pb2.GetActionResponse,
        ).action

    def compensate(
        self,
        context: common_pb2.CallContext,
        action_id: str,
        *,
        traceparent: str | None = None,
        timeout: float | None = None,
    ) -> gateway_pb2.CompensateResponse:
        """Propose the tool's declared inverse: ``confirmation`` is its card while it waits for the user (confirm
        it with `confirm` like any card); ``action`` is the original as it reads through the inverse
        (COMPENSATING, then COMPENSATED or COMPENSATION_FAILED). A repeated call returns the same card, or the
        outcome once it settled."""
        return self._call(
            "Compensate",
            self.gateway.Compensate,
            gateway_pb2.CompensateRequest(context=context, action_id=action_id),
            traceparent,
            timeout,
            gateway_pb2.CompensateResponse,
        )

    def reconcile(
        self,
        context: common_pb2.CallContext,
        action_id: str,
        *,
        traceparent: str | None = None,
        timeout: float | None = None,
    ) -> common_pb2.Action:
        """Ask the downstream by idempotency key about an UNKNOWN action."""
        return self._call(
            "Reconcile",
            self.gateway.Reconcile,
            gateway_pb2.ReconcileRequest(context=context, action_id=action_id),
            traceparent,
            timeout,
            gateway_pb2.ReconcileResponse,
        ).action

    def create_grant(
        self,
        context: common_pb2.CallContext,
        approval: str,
        *,
        traceparent: str | None = None,
        timeout: float | None = None,
    ) -> gateway_pb2.CreateGrantResponse:
        """A standing grant from the user's signed approval of kind "grant" (the same approval twice: one grant,
        ``replayed``)."""
        return self._call(
            "CreateGrant",
            self.gateway.CreateGrant,
            gateway_pb2.CreateGrantRequest(context=context, approval=approval),
            traceparent,
            timeout,
            gateway_pb2.CreateGrantResponse,
        )

    def list_grants(
        self,
        context: common_pb2.CallContext,
        *,
        traceparent: str | None = None,
        timeout: float | None = None,
    ) -> list[gateway_pb2.Grant]:
        """The caller's live grants, soonest expiry first."""
        return list(
            self._call(
                "ListGrants",
                self.gateway.ListGrants,
                gateway_pb2.ListGrantsRequest(context=context),
                traceparent,
                timeout,
                gateway_pb2.ListGrantsResponse,
            ).grants
        )

    def revoke_grant(
        self,
        context: common_pb2.CallContext,
        grant_id: str,
        *,
        traceparent: str | None = None,
        timeout: float | None = None,
    ) -> gateway_pb2.Grant:
        return self._call(
            "RevokeGrant",
            self.gateway.RevokeGrant,
            gateway_pb2.RevokeGrantRequest(context=context, grant_id=grant_id),
            traceparent,
            timeout,
            gateway_pb2.RevokeGrantResponse,
        ).grant

    # -- ContinuationService and ReplyGuardService ------------------------------------------------------------

    def open_continuation(
        self,
        context: common_pb2.CallContext,
        action_id: str,
        snapshot: continuation_pb2.ContinuationSnapshot,
        *,
        traceparent: str | None = None,
        timeout: float | None = None,
    ) -> continuation_pb2.Continuation:
        return self._call(
            "OpenContinuation",
            self.continuations.OpenContinuation,
            continuation_pb2.OpenContinuationRequest(context=context, action_id=action_id, snapshot=snapshot),
            traceparent,
            timeout,
            continuation_pb2.OpenContinuationResponse,
        ).continuation

    def claim_continuation(
        self,
        context: common_pb2.CallContext,
        token: str,
        *,
        traceparent: str | None = None,
        timeout: float | None = None,
    ) -> continuation_pb2.Continuation:
        return self._call(
            "ClaimContinuation",
            self.continuations.ClaimContinuation,
            continuation_pb2.ClaimContinuationRequest(context=context, token=token),
            traceparent,
            timeout,
            continuation_pb2.ClaimContinuationResponse,
        ).continuation

    def settle_continuation(
        self,
        context: common_pb2.CallContext,
        token: str,
        reply_text: str,
        claim_id: str,
        *,
        traceparent: str | None = None,
        timeout: float | None = None,
    ) -> continuation_pb2.Continuation:
        """Store the reply; ``claim_id`` is the lease ClaimContinuation gave this generator (anyone else's settle
        is FAILED_PRECONDITION CONTINUATION_LEASE_LOST)."""
        return self._call(
            "SettleContinuation",
            self.continuations.SettleContinuation,
            continuation_pb2.SettleContinuationRequest(
                context=context, token=token, reply_text=reply_text, claim_id=claim_id
            ),
            traceparent,
            timeout,
            continuation_pb2.SettleContinuationResponse,
        ).continuation

    def release_continuation(
        self,
        context: common_pb2.CallContext,
        token: str,
        claim_id: str,
        *,
        traceparent: str | None = None,
        timeout: float | None = None,
    ) -> continuation_pb2.Continuation:
        """Give a failed generation back (READY again), as the holder of ``claim_id``."""
        return self._call(
            "ReleaseContinuation",
            self.continuations.ReleaseContinuation,
            continuation_pb2.ReleaseContinuationRequest(context=context, token=token, claim_id=claim_id),
            traceparent,
            timeout,
            continuation_pb2.ReleaseContinuationResponse,
        ).continuation

    def check_reply(
        self,
        context: common_pb2.CallContext,
        reply_text: str,
        action_ids: Iterable[str] = (),
        *,
        traceparent: str | None = None,
        timeout: float | None = None,
    ) -> guard_pb2.CheckReplyResponse:
        return self._call(
            "CheckReply",
            self.guard.CheckReply,
            guard_pb2.CheckReplyRequest(context=context, reply_text=reply_text, action_ids=list(action_ids)),
            traceparent,
            timeout,
            guard_pb2.CheckReplyResponse,
        )

    # -- the write sequence ------------------------------------------------------------------------------------

    def write(
        self,
        context: common_pb2.CallContext,
        tool_name: str,
        arguments: Mapping[str, Any] | str,
        *,
        approve: Callable[[gateway_pb2.ConfirmationCard], bool],
        compose: Callable[[continuation_pb2.Continuation], str] | None = None,
        snapshot: continuation_pb2.ContinuationSnapshot | None = None,
        wait_ms: int = 5000,
        traceparent: str | None = None,
    ) -> Written:
        """Invoke -> (card shown to the user: ``approve``) -> Confirm or Reject -> when the action SUCCEEDED and
        ``compose`` is given: Open/Claim/SettleContinuation, ``compose`` writing the reply from the trusted
        receipt (the sidecar's reply guard checks it). Returns what happened; errors raise CountersignError."""
        before = dict(self.attempts)
        response = self.invoke(context, tool_name, arguments, traceparent=traceparent)
        kind = response.WhichOneof("outcome")
        done = Written("refusal" if kind == "refusal" else "result", response)
        if kind == "replay":
            done = Written("executed", response, action=response.replay)
        elif kind == "action":  # covered by a standing grant of the user: executed without a card
            done = Written("executed", response, action=response.action)
        elif kind == "confirmation":
            card = response.confirmation
            if not approve(card):
                return Written(
                    "rejected",
                    response,
                    card=card,
                    action=self.reject(context, card.token, traceparent=traceparent),
                    attempts=_since(before, self.attempts),
                )
            action = self.confirm(context, card.token, wait_ms=wait_ms, traceparent=traceparent)
            done = Written("executed", response, card=card, action=action)
        if done.succeeded and compose is not None and done.action is not None:
            opened = self.open_continuation(
                context,
                done.action.action_id,
                snapshot or continuation_pb2.ContinuationSnapshot(locale=context.locale),
                traceparent=traceparent,
            )
            claimed = self.claim_continuation(context, opened.token, traceparent=traceparent)
            if claimed.state == continuation_pb2.CONTINUATION_STATE_SETTLED:  # written before: replayed
                done.continuation, done.reply_text = claimed, claimed.reply_text
            elif not claimed.claim_id:  # another generator holds the lease: its reply is the one stored
                done.continuation = claimed
            else:
                try:
                    text = compose(claimed)
                except BaseException:
                    self.release_continuation(context, claimed.token, claimed.claim_id, traceparent=traceparent)
                    raise
                settled = self.settle_continuation(
                    context, claimed.token, text, claimed.claim_id, traceparent=traceparent
                )
                done.continuation, done.reply_text = settled, settled.reply_text
        done.attempts = _since(before, self.attempts)
        return done


def _since(before: Mapping[str, int], now: Mapping[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in now.items() if v - before.get(k, 0)}


__all__: Sequence[str] = ("Backoff", "Client", "CountersignError", "Written", "call_context")
