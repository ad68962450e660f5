"""Reply continuations and the reply guard: describing what happened, never doing it again (I5, I8).

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
import logging
import os
from collections.abc import Callable, Sequence

from google.protobuf import json_format

from countersign.canonical import canonical
from countersign.errors import DataLoss, FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from countersign.guard import Evidence, ReplyGuard, Verdict, verbs_of
from countersign.keyring import Keyring, is_action_id
from countersign.observability.metrics import Metrics
from countersign.registry import Registry, Tool
from countersign.registry.templates import render
from countersign.sidecar import cards, policy
from countersign.sidecar.audit import Audit
from countersign.sidecar.execute import open_action
from countersign.sidecar.store import CardRecord, ContRecord, Refused, RunRecord, Store
from countersign.v1 import common_pb2, continuation_pb2, guard_pb2

log = logging.getLogger("countersign.continuations")
LABEL = "continue"            # the continuation token's MAC label: a confirmation token never fits
STATES = {"pending": continuation_pb2.CONTINUATION_STATE_PENDING,
          "ready": continuation_pb2.CONTINUATION_STATE_READY,
          "running": continuation_pb2.CONTINUATION_STATE_RUNNING,
          "settled": continuation_pb2.CONTINUATION_STATE_SETTLED}
VERDICTS = {False: guard_pb2.GUARD_VERDICT_PASSED, True: guard_pb2.GUARD_VERDICT_REPLACED}
MAX_REPLY_BYTES = 64 * 1024
MAX_SNAPSHOT_BYTES = 64 * 1024


def request_key(keyring: Keyring, context: common_pb2.CallContext) -> str:
    """Where one user turn's read facts and proposed actions are kept (a keyed hash, no raw ids). Keyed by the
    id key: two sidecars mid-rotation must keep one turn's facts in one place."""
    return keyring.id_hash("request", [*cards.owner(context), context.request_id])


def read_summary(tool: Tool, body: object, message: str = "") -> str:
    """A short line about what a read returned, for the continuation's facts (never the whole answer)."""
    if isinstance(body, dict):
        if tool.receipt.summary:
            return render(tool.receipt.summary, {k: v for k, v in body.items() if not isinstance(v, (dict, list))})
        if isinstance(body.get("count"), int):
            return f"{body['count']} result(s)"
    if body is None:
        return message[:200]
    text = json.dumps(body, ensure_ascii=False)
    return text if len(text) <= 200 else text[:197] + "..."


def fact_entry(tool: str, status: str, summary: str) -> bytes:
    return canonical({"k": "fact", "tool": tool, "status": status, "summary": summary[:300]})


def action_entry(action_id: str) -> bytes:
    return canonical({"k": "action", "id": action_id})


class Continuations:
    def __init__(self, *, store: Store, keyring: Keyring, registry: Callable[[], Registry], guard: ReplyGuard,
                 audit: Audit, lease_ms: int, ttl_ms: int, metrics: Metrics) -> None:
        self.store, self.keyring, self.registry, self.guard, self.audit = store, keyring, registry, guard, audit
        self.lease_ms, self.ttl_ms, self.metrics = lease_ms, ttl_ms, metrics

    # -- the four transitions ------------------------------------------------------------------

    async def open(self, context: common_pb2.CallContext, action_id: str,
                   snapshot: continuation_pb2.ContinuationSnapshot) -> continuation_pb2.Continuation:
        policy.check_context(context)
        if not is_action_id(action_id):
            raise InvalidArgument("REQUEST_INVALID", "action_id must be 32 lower-case hex characters")
        found = await self.store.peek(action_id)
        if found is None:
            raise NotFound("ACTION_NOT_FOUND", "no such action: never issued, or its card expired")
        cards.require_owner(self.keyring, action_id, found, context)     # a copied binding opens nothing
        kid = found.kid if found.kid in self.keyring.keys else self.keyring.active
        binding = cards.binding_of(self.keyring, found, context)
        snap = canonical(json_format.MessageToDict(snapshot, preserving_proto_field_name=True))
        if len(snap) > MAX_SNAPSHOT_BYTES:    # what a tenant may keep is counted in records: each is bounded
            raise InvalidArgument("SNAPSHOT_TOO_LARGE", f"the snapshot is larger than {MAX_SNAPSHOT_BYTES} bytes "
                                  "as JSON; send the question and a short lead-in, not the conversation")
        request = request_key(self.keyring, context)
        mac = self._mac(kid, action_id, binding, snap, request)
        record = await self.store.cont_open(action_id, binding, kid, snap, request, mac, self.ttl_ms)
        if isinstance(record, Refused):
            raise _refused(record.why)
        self.audit.event(action_id, "continuation_opened", state=record.state)
        return self._proto(action_id, record, kid)

    async def claim(self, context: common_pb2.CallContext, token: str) -> continuation_pb2.Continuation:
        kid, action_id, binding = self._token(context, token)
        claim_id = os.urandom(12).hex()
        record = await self.store.cont_claim(action_id, binding, self.lease_ms, claim_id)
        if isinstance(record, Refused):
            raise _refused(record.why)
        if record.state == "pending":
            raise FailedPrecondition("CONTINUATION_NOT_READY", _why_not_ready(record.detail))
        if record.state == "running":
            return continuation_pb2.Continuation(continuation_id=action_id, action_id=action_id,
                                                 state=continuation_pb2.CONTINUATION_STATE_RUNNING, replayed=True)
        self._verify(kid, action_id, binding, record)
        out = self._proto(action_id, record, kid)
        if record.state == "won":
            assert record.run is not None
            action = open_action(self.keyring, action_id, record.run, replayed=False)
            if (action.state, action.receipt.status) != (common_pb2.ACTION_STATE_SUCCEEDED,
                                                         common_pb2.RECEIPT_STATUS_SUCCEEDED):
                # the flags that made it READY (its own state, the settle's "rs") were changed by hand (I8)
                raise DataLoss("RECORD_TAMPERED", "the continuation is ready but its action did not succeed")
            out.claim_id = claim_id          # the lease: only the winner learns it
            self.audit.event(action_id, "continuation_claimed")
            out.receipt.CopyFrom(action.receipt)
            out.facts.extend(await self._facts(record.request))
        else:
            out.receipt.CopyFrom(await self._receipt(action_id))
        return out

    async def settle(self, context: common_pb2.CallContext, token: str, reply_text: str,
                     claim_id: str) -> continuation_pb2.Continuation:
        kid, action_id, binding = self._token(context, token)
        if len(reply_text.encode("utf-8", "surrogatepass")) > MAX_REPLY_BYTES:
            raise InvalidArgument("REPLY_TOO_LARGE", f"reply_text is larger than {MAX_REPLY_BYTES} bytes")
        action = await self._action(action_id)
        evidence = [self._evidence(action)] if action is not None else []
        verdict = self.guard.check(reply_text, context.locale, evidence)
        self.metrics.guard.labels(_label(verdict)).inc()
        text = verdict.text.encode("utf-8", "replace")
        record = await self.store.cont_settle(action_id, binding, text, self._rmac(kid, action_id, text),
                                              _verdict_json(verdict), claim_id)
        if isinstance(record, Refused):
            raise _refused(record.why)
        if record.state == "lost":
            raise _lease_lost(record.detail)
        if record.state not in ("settled", "replayed"):
            raise FailedPrecondition("CONTINUATION_NOT_CLAIMED",
                                     f"the continuation is {record.state.upper()}: claim it before settling")
        if not self.keyring.verify(kid, "reply:" + action_id, record.reply, record.rmac):
            raise DataLoss("RECORD_TAMPERED", "the stored reply of this continuation was changed")
        if record.state == "settled":
            self.audit.event(action_id, "continuation_settled", guard=verdict.reason,
                             reply_hmac=self.keyring.digest("reply", record.reply),
                             claims=self._logged_claims(verdict))
        out = continuation_pb2.Continuation(
            continuation_id=action_id, token=self.keyring.token(action_id, kid, LABEL), action_id=action_id,
            state=continuation_pb2.CONTINUATION_STATE_SETTLED, reply_text=record.reply.decode("utf-8", "replace"),
            replayed=record.state == "replayed")
        if action is not None and action.HasField("receipt"):
            out.receipt.CopyFrom(action.receipt)
        return out

    async def release(self, context: common_pb2.CallContext, token: str,
                      claim_id: str) -> continuation_pb2.Continuation:
        kid, action_id, binding = self._token(context, token)
        result = await self.store.cont_release(action_id, binding, claim_id)
        if result in ("none", "forbidden"):
            raise _refused(result)
        if result == "lost":
            raise _lease_lost("running")
        state = "ready" if result == "ok" else result
        if result == "ok":
            self.audit.event(action_id, "continuation_released")
        return continuation_pb2.Continuation(continuation_id=action_id, action_id=action_id,
                                             token=self.keyring.token(action_id, kid, LABEL),
                                             state=STATES.get(state, 0))  # type: ignore[arg-type]

    # -- the reply guard on its own --------------------------------------------------------------

    async def check_reply(self, context: common_pb2.CallContext, reply_text: str,
                          action_ids: Sequence[str]) -> guard_pb2.CheckReplyResponse:
        """Guard a reply against the receipts of the named actions and of the same request."""
        policy.check_context(context)
        if len(reply_text.encode("utf-8", "surrogatepass")) > MAX_REPLY_BYTES:
            raise InvalidArgument("REPLY_TOO_LARGE", f"reply_text is larger than {MAX_REPLY_BYTES} bytes")
        ids: list[str] = []
        for action_id in action_ids[:32]:
            if not is_action_id(action_id):
                raise InvalidArgument("REQUEST_INVALID", f"action id {action_id[:40]!r} is not 32 hex characters")
            ids.append(action_id)
        for raw in await self.store.recall(request_key(self.keyring, context)):
            entry = json.loads(raw)
            if entry.get("k") == "action" and entry["id"] not in ids:
                ids.append(entry["id"])
        evidence = []
        for action_id in ids:
            action = await self._action(action_id, context)
            if action is not None:
                evidence.append(self._evidence(action))
        verdict = self.guard.check(reply_text, context.locale, evidence)
        self.metrics.guard.labels(_label(verdict)).inc()
        claims = self._logged_claims(verdict)
        for item in evidence:
            self.audit.event(item.action_id, "guard", verdict=verdict.reason, reply_hmac=self.keyring.digest(
                "reply", reply_text.encode("utf-8", "replace")), claims=claims)
        # the decision log names the rules and keys a hash of each clause: it never holds the reply's text
        log.info(json.dumps({"event": "guard", "verdict": "replaced" if verdict.replaced else "passed",
                             "reason": verdict.reason, "claims": claims,
                             "unsupported_language": verdict.language}))
        return guard_pb2.CheckReplyResponse(
            verdict=VERDICTS[verdict.replaced], reply_text=verdict.text, matched_claims=list(verdict.matched_claims),
            reason=f"{verdict.reason}: {verdict.explanation}",
            claims=[guard_pb2.GuardClaim(clause=c.clause, rule=c.rule, verb=c.verb, verb_class=c.verb_class,
                                         lexicon=c.lexicon) for c in verdict.claims],
            exclusions=[guard_pb2.GuardExclusion(clause=clause, rule=rule, cue=cue)
                        for clause, rule, cue in verdict.excluded[:16]],
            unsupported_language=verdict.language)

    def _logged_claims(self, verdict: Verdict) -> list[dict[str, str]]:
        """What the decision log keeps of each claim: the rule that read it, and its clause as a keyed hash."""
        return [{"rule": c.rule, "verb_class": c.verb_class,
                 "clause_hmac": self.keyring.digest("claim", c.clause.encode("utf-8", "replace"))}
                for c in verdict.claims]

    # -- pieces --------------------------------------------------------------------------------

    def _token(self, context: common_pb2.CallContext, token: str) -> tuple[str, str, str]:
        if not token:
            raise InvalidArgument("CONTINUATION_TOKEN_INVALID", "token is required")
        try:
            kid, action_id = self.keyring.parse_token(token, LABEL)
        except InvalidArgument as exc:
            raise InvalidArgument("CONTINUATION_TOKEN_INVALID", "the continuation token is malformed or "
                                  "forged (a confirmation token is not a continuation token)") from exc
        policy.check_context(context)
        return kid, action_id, self.keyring.binding(kid, cards.owner(context))

    def _mac(self, kid: str, action_id: str, binding: str, snap: bytes, request: str) -> str:
        return self.keyring.mac(kid, "cont:" + action_id, canonical([binding, snap.decode(), request]))

    def _rmac(self, kid: str, action_id: str, reply: bytes) -> str:
        return self.keyring.mac(kid, "reply:" + action_id, reply)

    def _verify(self, kid: str, action_id: str, binding: str, record: ContRecord) -> None:
        expected = self._mac(record.kid or kid, action_id, binding, record.snapshot, record.request)
        if expected != record.mac:
            raise DataLoss("RECORD_TAMPERED", "the stored continuation was changed")

    def _proto(self, action_id: str, record: ContRecord, kid: str) -> continuation_pb2.Continuation:
        out = continuation_pb2.Continuation(
            continuation_id=action_id, token=self.keyring.token(action_id, record.kid or kid, LABEL),
            action_id=action_id, state=STATES.get("running" if record.state == "won" else record.state, 0),  # type: ignore[arg-type]
            replayed=record.state == "settled")
        if record.snapshot:
            json_format.ParseDict(json.loads(record.snapshot), out.snapshot, ignore_unknown_fields=True)
        if record.state == "settled":
            if not self.keyring.verify(record.kid or kid, "reply:" + action_id, record.reply, record.rmac):
                raise DataLoss("RECORD_TAMPERED", "the stored reply of this continuation was changed")
            out.reply_text = record.reply.decode("utf-8", "replace")
        return out

    async def _facts(self, request: str) -> list[continuation_pb2.ReadFact]:
        facts = []
        for raw in await self.store.recall(request):
            entry = json.loads(raw)
            if entry.get("k") == "fact":
                facts.append(continuation_pb2.ReadFact(tool_name=entry["tool"], status=entry["status"],
                                                       summary=entry["summary"]))
        return facts

    async def _action(self, action_id: str,
                      context: common_pb2.CallContext | None = None) -> common_pb2.Action | None:
        """The settled action (None when not settled); with a context, only the caller's own."""
        found = await self.store.peek(action_id)
        if not isinstance(found, RunRecord) or found.state != "settled":
            if isinstance(found, (RunRecord, CardRecord)) and context is not None:
                cards.require_owner(self.keyring, action_id, found, context)
            return None
        if context is not None:
            cards.require_owner(self.keyring, action_id, found, context)
        return open_action(self.keyring, action_id, found, replayed=False)

    async def _receipt(self, action_id: str) -> common_pb2.Receipt:
        action = await self._action(action_id)
        return action.receipt if action is not None else common_pb2.Receipt()

    def _evidence(self, action: common_pb2.Action) -> Evidence:
        tool = self.registry().tools.get(action.tool_name)
        verbs = tool.verbs if tool is not None and tool.verbs else verbs_of(action.tool_name)
        return Evidence(action_id=action.action_id, tool_name=action.tool_name,
                        succeeded=action.receipt.status == common_pb2.RECEIPT_STATUS_SUCCEEDED, verbs=verbs)


def _verdict_json(verdict: Verdict) -> bytes:
    return canonical({"replaced": verdict.replaced, "reason": verdict.reason,
                      "claims": list(verdict.matched_claims)})


def _label(verdict: Verdict) -> str:
    """The metric's verdict label: flagged is a pass in a language the guard has no lexicon for."""
    if verdict.replaced:
        return "replaced"
    return "flagged" if verdict.reason == "UNSUPPORTED_LANGUAGE" else "passed"





def _why_not_ready(detail: str) -> str:
    state, _, reason = detail.partition(" ")
    if state in ("none", ""):
        return "the action has not been confirmed yet; the continuation opens when it SUCCEEDS"
    if state == "running":
        return "the action is still running; the continuation opens when it SUCCEEDS"
    if state == "unknown":
        return (f"the action's outcome is UNKNOWN ({reason or 'no answer'}): the request may have reached the "
                "downstream, it was not retried, and reconciliation is asking the downstream by its idempotency "
                "key; the continuation opens if that finds it SUCCEEDED")
    return f"the action did not succeed ({reason or state}); it never activates a continuation"


def _lease_lost(state: str) -> Exception:
    """A generator that does not hold the continuation's claim (a second one, or one whose lease lapsed and
    was claimed again): its reply is not stored."""
    now = "another generation settled it (ClaimContinuation returns its reply)" if state == "settled" else \
        "another generation holds it: your lease lapsed and it was claimed again, or you never won the claim"
    return FailedPrecondition("CONTINUATION_LEASE_LOST", f"{now}; your reply was not stored. Settle and release "
                              "with the claim_id your ClaimContinuation returned")


def _refused(why: str) -> Exception:
    if why == "forbidden":
        return PermissionDenied("CONFIRMATION_BINDING_MISMATCH", "this belongs to another owner or session")
    return NotFound("CONTINUATION_NOT_FOUND", "no continuation (or action) by that id: never opened, or expired")
