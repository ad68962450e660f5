"""Reply continuations: one reply generated per succeeded action, guarded, stored, replayed (I5, I8).

    OpenContinuation    PENDING (READY at once if the action already settled SUCCEEDED)
    settle.lua          PENDING -> READY, in the same step that stores a SUCCEEDED receipt
    ClaimContinuation   READY -> RUNNING for one generator; returns snapshot, read facts, receipt
    SettleContinuation  RUNNING -> SETTLED with the reply after the guard, by the claim's holder; replayed
                        to that holder afterwards
    ReleaseContinuation RUNNING -> READY (a failed generation, by the claim's holder; a lapsed lease lets
                        another generator claim it, and its new claim id fences the old one)

Nothing here can reach an adapter: a continuation offers no tools at all.
"""

from __future__ import annotations

import json
import os

from google.protobuf import json_format

from countersign.audit import Audit
from countersign.canonical import canonical
from countersign.errors import DataLoss, FailedPrecondition, InvalidArgument
from countersign.keyring import Keyring
from countersign.observability.metrics import Metrics
from countersign.path import cards, policy
from countersign.path.receipts import open_action
from countersign.path.turn import turn_key
from countersign.reasons import Reason
from countersign.registry import Registry
from countersign.reply.evidence import (
    check_size,
    evidence,
    logged_statements,
    settled_action,
    verdict_json,
    verdict_label,
)
from countersign.reply.guard_loader import GuardLoader
from countersign.store import ContBusy, ContRecord, ContWon, LeaseLost, NotClaimed, NotReady, Refused
from countersign.store.protocols import ContinuationStore
from countersign.v1 import common_pb2, continuation_pb2

LABEL = "continue"  # the continuation token's MAC label: a confirmation token never fits
STATES = {
    "pending": continuation_pb2.CONTINUATION_STATE_PENDING,
    "ready": continuation_pb2.CONTINUATION_STATE_READY,
    "running": continuation_pb2.CONTINUATION_STATE_RUNNING,
    "settled": continuation_pb2.CONTINUATION_STATE_SETTLED,
}
MAX_SNAPSHOT_BYTES = 64 * 1024


class Continuations:
    def __init__(
        self,
        *,
        store: ContinuationStore,
        keyring: Keyring,
        registry: Registry,
        guard: GuardLoader,
        audit: Audit,
        metrics: Metrics,
        continuation_lease_ms: int,
        replay_ttl_ms: int,
    ) -> None:
        self.store, self.keyring, self.registry, self.guard, self.audit = store, keyring, registry, guard, audit
        self.metrics, self.continuation_lease_ms, self.replay_ttl_ms = metrics, continuation_lease_ms, replay_ttl_ms

    async def open(
        self, context: common_pb2.CallContext, action_id: str, snapshot: continuation_pb2.ContinuationSnapshot
    ) -> continuation_pb2.Continuation:
        found = await cards.owned_action(self.store, self.keyring, context, action_id)  # a copied binding opens
        kid = found.kid if found.kid in self.keyring.keys else self.keyring.active  # nothing
        binding = cards.binding_of(self.keyring, found, context)
        snap = canonical(json_format.MessageToDict(snapshot, preserving_proto_field_name=True))
        if len(snap) > MAX_SNAPSHOT_BYTES:  # what a tenant may keep is counted in records: each is bounded
            raise InvalidArgument(
                Reason.SNAPSHOT_TOO_LARGE,
                f"the snapshot is larger than {MAX_SNAPSHOT_BYTES} "
                "bytes as JSON; send the question and a short lead-in, not the conversation",
            )
        turn = turn_key(self.keyring, context)
        mac = self._mac(kid, action_id, binding, snap, turn)
        record = await self.store.cont_open(action_id, binding, kid, snap, turn, mac, self.replay_ttl_ms)
        if isinstance(record, Refused):
            raise cards.refusal_error(record)
        self.audit.event(action_id, "continuation_opened", state=record.state)
        return self._proto(action_id, record, kid)

    async def claim(self, context: common_pb2.CallContext, token: str) -> continuation_pb2.Continuation:
        kid, action_id, binding = self._token(context, token)
        claim_id = os.urandom(12).hex()
        found = await self.store.cont_claim(action_id, binding, self.continuation_lease_ms, claim_id)
        if isinstance(found, Refused):
            raise cards.refusal_error(found)
        if isinstance(found, NotReady):
            raise FailedPrecondition(Reason.CONTINUATION_NOT_READY, _why_not_ready(found))
        if isinstance(found, ContBusy):
            return continuation_pb2.Continuation(
                continuation_id=action_id,
                action_id=action_id,
                state=continuation_pb2.CONTINUATION_STATE_RUNNING,
                replayed=True,
            )
        record = found.cont if isinstance(found, ContWon) else found
        self._verify(kid, action_id, binding, record)
        out = self._proto(action_id, record, kid)
        if isinstance(found, ContWon):
            action = open_action(self.keyring, action_id, found.run, replayed=False)
            if (action.state, action.receipt.status) != (
                common_pb2.ACTION_STATE_SUCCEEDED,
                common_pb2.RECEIPT_STATUS_SUCCEEDED,
            ):
                # the flags that made it READY (its own state, the settle's "rs") were changed by hand (I8)
                raise DataLoss(Reason.RECORD_TAMPERED, "the continuation is ready but its action did not succeed")
            out.claim_id = claim_id  # the lease: only the winner learns it
            self.audit.event(action_id, "continuation_claimed")
            out.receipt.CopyFrom(action.receipt)
            out.facts.extend(await self._facts(record.turn))
        else:
            settled = await settled_action(self.store, self.keyring, action_id)
            out.receipt.CopyFrom(settled.receipt if settled is not None else common_pb2.Receipt())
        return out

    async def settle(
        self, context: common_pb2.CallContext, token: str, reply_text: str, claim_id: str
    ) -> continuation_pb2.Continuation:
        kid, action_id, binding = self._token(context, token)
        check_size(reply_text)
        action = await settled_action(self.store, self.keyring, action_id)
        shown = [evidence(self.registry, action)] if action is not None else []
        verdict = (await self.guard.get()).check(reply_text, context.locale, shown)
        self.metrics.guard.labels(verdict_label(verdict)).inc()
        text = verdict.text.encode("utf-8", "replace")
        stored = await self.store.cont_settle(
            action_id, binding, text, self._rmac(kid, action_id, text), verdict_json(verdict), claim_id
        )
        if isinstance(stored, Refused):
            raise cards.refusal_error(stored)
        if isinstance(stored, LeaseLost):
            raise _lease_lost(stored.state)
        if isinstance(stored, NotClaimed):
            raise FailedPrecondition(
                Reason.CONTINUATION_NOT_CLAIMED, f"the continuation is {stored.state.upper()}: claim it before settling"
            )
        if not self.keyring.verify(kid, "reply:" + action_id, stored.reply, stored.rmac):
            raise DataLoss(Reason.RECORD_TAMPERED, "the stored reply of this continuation was changed")
        if not stored.replayed:
            self.audit.event(
                action_id,
                "continuation_settled",
                guard=verdict.reason,
                reply_hmac=self.keyring.digest("reply", stored.reply),
                claims=logged_statements(self.keyring, verdict),
            )
        out = continuation_pb2.Continuation(
            continuation_id=action_id,
            token=self.keyring.token(action_id, kid, LABEL),
            action_id=action_id,
            state=continuation_pb2.CONTINUATION_STATE_SETTLED,
            reply_text=stored.reply.decode("utf-8", "replace"),
            replayed=stored.replayed,
        )
        if action is not None and action.HasField("receipt"):
            out.receipt.CopyFrom(action.receipt)
        return out

    async def release(
        self, context: common_pb2.CallContext, token: str, claim_id: str
    ) -> continuation_pb2.Continuation:
        kid, action_id, binding = self._token(context, token)
        result = await self.store.cont_release(action_id, binding, claim_id)
        if isinstance(result, Refused):
            raise cards.refusal_error(result)
        if isinstance(result, LeaseLost):
            raise _lease_lost("running")
        if isinstance(result, NotClaimed):
            state = result.state
        else:
            state = "ready"
            self.audit.event(action_id, "continuation_released")
        return continuation_pb2.Continuation(
            continuation_id=action_id,
            action_id=action_id,
            token=self.keyring.token(action_id, kid, LABEL),
            state=STATES.get(state, 0),  # type: ignore[arg-type]
        )

    # -- pieces --------------------------------------------------------------------------------

    def _token(self, context: common_pb2.CallContext, token: str) -> tuple[str, str, str]:
        if not token:
            raise InvalidArgument(Reason.CONTINUATION_TOKEN_INVALID, "token is required")
        try:
            kid, action_id = self.keyring.parse_token(token, LABEL)
        except InvalidArgument as exc:
            raise InvalidArgument(
                Reason.CONTINUATION_TOKEN_INVALID,
                "the continuation token is malformed or forged (a confirmation token is not a continuation token)",
            ) from exc
        policy.check_context(context)
        return kid, action_id, self.keyring.binding(kid, cards.owner(context))

    def _mac(self, kid: str, action_id: str, binding: str, snap: bytes, turn: str) -> str:
        return self.keyring.mac(kid, "cont:" + action_id, canonical([binding, snap.decode(), turn]))

    def _rmac(self, kid: str, action_id: str, reply: bytes) -> str:
        return self.keyring.mac(kid, "reply:" + action_id, reply)

    def _verify(self, kid: str, action_id: str, binding: str, record: ContRecord) -> None:
        expected = self._mac(record.kid or kid, action_id, binding, record.snapshot, record.turn)
        if expected != record.mac:
            raise DataLoss(Reason.RECORD_TAMPERED, "the stored continuation was changed")

    def _proto(self, action_id: str, record: ContRecord, kid: str) -> continuation_pb2.Continuation:
        out = continuation_pb2.Continuation(
            continuation_id=action_id,
            token=self.keyring.token(action_id, record.kid or kid, LABEL),
            action_id=action_id,
            state=STATES.get(record.state, 0),  # type: ignore[arg-type]
            replayed=record.state == "settled",
        )
        if record.snapshot:
            json_format.ParseDict(json.loads(record.snapshot), out.snapshot, ignore_unknown_fields=True)
        if record.state == "settled":
            if not self.keyring.verify(record.kid or kid, "reply:" + action_id, record.reply, record.rmac):
                raise DataLoss(Reason.RECORD_TAMPERED, "the stored reply of this continuation was changed")
            out.reply_text = record.reply.decode("utf-8", "replace")
        return out

    async def _facts(self, turn: str) -> list[continuation_pb2.ReadFact]:
        facts = []
        for raw in await self.store.recall(turn):
            entry = json.loads(raw)
            if entry.get("k") == "fact":
                facts.append(
                    continuation_pb2.ReadFact(tool_name=entry["tool"], status=entry["status"], summary=entry["summary"])
                )
        return facts


def _why_not_ready(found: NotReady) -> str:
    state, reason = found.run_state, found.reason
    if state in ("none", ""):
        return "the action has not been confirmed yet; the continuation opens when it SUCCEEDS"
    if state == "running":
        return "the action is still running; the continuation opens when it SUCCEEDS"
    if state == "unknown":
        return (
            f"the action's outcome is UNKNOWN ({reason or 'no answer'}): the request may have reached the "
            "downstream, it was not retried, and reconciliation is asking the downstream by its idempotency "
            "key; the continuation opens if that finds it SUCCEEDED"
        )
    return f"the action did not succeed ({reason or state}); it never activates a continuation"


def _lease_lost(state: str) -> FailedPrecondition:
    """A generator that does not hold the continuation's claim (a second one, or one whose lease lapsed and
    was claimed again): its reply is not stored."""
    now = (
        "another generation settled it (ClaimContinuation returns its reply)"
        if state == "settled"
        else "another generation holds it: your lease lapsed and it was claimed again, or you never won the claim"
    )
    return FailedPrecondition(
        Reason.CONTINUATION_LEASE_LOST,
        f"{now}; your reply was not stored. Settle and release with the claim_id your ClaimContinuation returned",
    )
