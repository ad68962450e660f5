"""CheckReply: the reply guard on its own, over the receipts of the actions a reply may speak of (the ones named,
and every action the same turn proposed). A success statement no succeeded receipt backs is replaced (I5)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Protocol

from countersign.audit import Audit
from countersign.errors import InvalidArgument
from countersign.keyring import Keyring, is_action_id
from countersign.observability.metrics import Metrics
from countersign.path import policy
from countersign.path.turn import turn_key
from countersign.reasons import Reason
from countersign.registry import Registry
from countersign.reply.evidence import check_size, evidence, logged_statements, settled_action, verdict_label
from countersign.reply.guard_loader import GuardLoader
from countersign.store.protocols import Peek, TurnStore
from countersign.v1 import common_pb2, guard_pb2

log = logging.getLogger("countersign.continuations")
VERDICTS = {False: guard_pb2.GUARD_VERDICT_PASSED, True: guard_pb2.GUARD_VERDICT_REPLACED}
MAX_NAMED = 32  # action ids one CheckReply may name


class CheckStore(Peek, TurnStore, Protocol):
    """What CheckReply reads: the actions, and the turn's list of them."""


class ReplyCheck:
    def __init__(
        self,
        *,
        store: CheckStore,
        keyring: Keyring,
        registry: Registry,
        guard: GuardLoader,
        audit: Audit,
        metrics: Metrics,
    ) -> None:
        self.store, self.keyring, self.registry, self.guard = store, keyring, registry, guard
        self.audit, self.metrics = audit, metrics

    async def check_reply(
        self, context: common_pb2.CallContext, reply_text: str, action_ids: Sequence[str]
    ) -> guard_pb2.CheckReplyResponse:
        """Guard a reply against the receipts of the named actions and of the same turn."""
        policy.check_context(context)
        check_size(reply_text)
        ids: list[str] = []
        for action_id in action_ids[:MAX_NAMED]:
            if not is_action_id(action_id):
                raise InvalidArgument(Reason.REQUEST_INVALID, f"action id {action_id[:40]!r} is not 32 hex characters")
            ids.append(action_id)
        for raw in await self.store.recall(turn_key(self.keyring, context)):
            entry = json.loads(raw)
            if entry.get("k") == "action" and entry["id"] not in ids:
                ids.append(entry["id"])
        shown = []
        for action_id in ids:
            action = await settled_action(self.store, self.keyring, action_id, context)
            if action is not None:
                shown.append(evidence(self.registry, action))
        verdict = (await self.guard.get()).check(reply_text, context.locale, shown)
        self.metrics.guard.labels(verdict_label(verdict)).inc()
        statements = logged_statements(self.keyring, verdict)
        for item in shown:
            self.audit.event(
                item.action_id,
                "guard",
                verdict=verdict.reason,
                reply_hmac=self.keyring.digest("reply", reply_text.encode("utf-8", "replace")),
                claims=statements,
            )
        # the decision log names the rules and keys a hash of each clause: it never holds the reply's text
        log.info(
            json.dumps(
                {
                    "event": "guard",
                    "verdict": "replaced" if verdict.replaced else "passed",
                    "reason": verdict.reason,
                    "claims": statements,
                    "unsupported_language": verdict.language,
                }
            )
        )
        return guard_pb2.CheckReplyResponse(
            verdict=VERDICTS[verdict.replaced],
            reply_text=verdict.text,
            matched_claims=list(verdict.matched_claims),
            reason=f"{verdict.reason}: {verdict.explanation}",
            claims=[
                guard_pb2.GuardClaim(
                    clause=c.clause, rule=c.rule, verb=c.verb, verb_class=c.verb_class, lexicon=c.lexicon
                )
                for c in verdict.claims
            ],
            exclusions=[
                guard_pb2.GuardExclusion(clause=clause, rule=rule, cue=cue)
                for clause, rule, cue in verdict.excluded[:16]
            ],
            unsupported_language=verdict.language,
        )
