"""Approval: Confirm's check of the user's signed approval, before Redis is touched (docs/design.md §12, I1).

The approval (``ConfirmRequest.approval``, a compact JWS from a configured issuer) is verified here: signature,
issuer, audience, lifetime, owner (sub = actor, tid = tenant, sid = session) and action (act = the token's action
id). What needs the card is compared by claim.lua, atomically with the claim: the approval's ``dig`` against the
card's approval digest, and the card's risk against the risks the approval's ``acr`` satisfies (step-up rules).
A refusal, here or there, claims nothing: the card stays READY and the user can still approve it.

An approval given for a card that does not require one is verified all the same (a bad approval is refused, never
ignored). Without any issuer configured, an approval cannot be verified and is refused (check ``issuer``).

Verifying does no network I/O while the token's key is known; only an unknown ``kid`` of a JWKS URL fetches that
issuer's keys again (rate-limited by the issuer's settings).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

from countersign.approvals import ApprovalError, ApprovalEvidence, ApprovalInvalid, Expected, Verifier
from countersign.errors import CountersignError, FailedPrecondition, PermissionDenied
from countersign.reasons import Reason
from countersign.store import ClaimApproval, Refused
from countersign.v1 import common_pb2

STILL_READY = "nothing was claimed: the card is still READY"


class Checked(NamedTuple):
    """A Confirm's approval after the checks that need no card."""

    claim: ClaimApproval  # what claim.lua compares with the card
    evidence: ApprovalEvidence | None = None  # a verified approval (kept in the receipt and the audit)
    refused: ApprovalError | None = None  # why it was refused before Redis (the claim answers it for a READY card)


class Approvals:
    """The verifier of the configured issuers (None: none configured), as Confirm uses it."""

    def __init__(self, verifier: Verifier | None, clock: Callable[[], float] = time.time) -> None:
        self.verifier, self.clock = verifier, clock

    async def check(self, signed_tools: str, context: common_pb2.CallContext, action_id: str, token: str) -> Checked:
        """Verify ``token`` for this caller and action; ``signed_tools`` are the writes the registry in force
        requires a signed approval for (",tool,tool,")."""
        if not token:
            return Checked(ClaimApproval(signed_tools=signed_tools))
        if self.verifier is None:
            refused = ApprovalInvalid("issuer", "this sidecar trusts no approval issuer (--approvals is not set)")
            return Checked(ClaimApproval(failed=refused.check, signed_tools=signed_tools), refused=refused)
        expect = Expected(
            actor_id=context.actor_id,
            tenant_id=context.tenant_id,
            session_id=context.session_id,
            action_id=action_id,
            digest=None,  # compared by claim.lua with the card's
            now=self.clock(),
        )
        try:
            try:
                evidence = self.verifier.verify_approval(token, expect=expect)  # no network I/O
            except ApprovalInvalid as exc:
                if exc.check != "key":
                    raise
                # an unknown kid: a URL issuer's keys are fetched again (rate-limited), then it is tried once more
                evidence = await self.verifier.verify_approval_async(token, expect=expect)
        except ApprovalError as exc:
            return Checked(ClaimApproval(failed=exc.check, signed_tools=signed_tools), refused=exc)
        risks = "," + ",".join(self.verifier.satisfied_risks(evidence.acr)) + ","
        return Checked(ClaimApproval(evidence.digest, risks, "", signed_tools), evidence)


# what an approval fails when it does not fit the card it is presented for (claim.lua compares them; the approval
# inbox, on arrival)
CARD_CHECKS = {
    "digest": "the approval is for other arguments, preview, policy or expiry than this card's",
    "step_up": "the card's risk needs a stronger authentication (acr, the step_up rules) than the approval carries",
}


def claimed_as_sealed(approval: str, digest: str, risk: str, checked: Checked | None) -> str:
    """Why a won claim disagrees with its MAC'd card ("" when it agrees): the card requires a signed approval
    and none was verified, or the approval's digest or acr is not what the card's digest and risk demand. Only a
    hash field changed in Redis (claim.lua compares those) lets such a claim through."""
    evidence = checked.evidence if checked is not None else None
    if evidence is None:
        return "the card requires a signed approval and was claimed without one" if approval == "signed" else ""
    if evidence.digest != digest:
        return "the card was claimed with an approval of another digest"
    if checked is not None and f",{risk}," not in checked.claim.risks:
        return "the card was claimed with an approval whose acr does not satisfy its risk"
    return ""


def refusal(found: Refused, checked: Checked) -> CountersignError:
    """What the caller hears when claim.lua refused for want of a (valid) approval; the check is named in the
    message and as ErrorInfo metadata ``check``."""
    if found.why == "approval_required" and found.check == "registry":
        return FailedPrecondition(
            Reason.POLICY_CHANGED,
            "the registry in force requires the user's signed approval for this tool, which it did not when the "
            f"card was issued; {STILL_READY}: confirm it with an approval (ConfirmRequest.approval)",
            metadata={"check": "missing"},
        )
    if found.why == "approval_required":
        return PermissionDenied(
            Reason.APPROVAL_REQUIRED,
            "this card needs the user's signed approval: ConfirmRequest.approval, a JWS from a configured issuer "
            f"whose dig is the card's approval_digest; {STILL_READY}",
            metadata={"check": "missing"},
        )
    check = found.check or "malformed"
    if checked.refused is not None and checked.refused.check == check:
        detail = checked.refused.message
    else:
        detail = CARD_CHECKS.get(check, "the approval failed this check")
    metadata = {"check": check}
    if checked.refused is not None and checked.refused.issuer:
        metadata["issuer"] = checked.refused.issuer
    return PermissionDenied(
        Reason.APPROVAL_INVALID, f"the approval was refused ({check}): {detail}; {STILL_READY}", metadata=metadata
    )


def evidence_proto(evidence: ApprovalEvidence) -> common_pb2.ApprovalEvidence:
    """What the receipt keeps of an approval: never the JWS."""
    return common_pb2.ApprovalEvidence(
        issuer=evidence.issuer, kid=evidence.kid, jti=evidence.jti, acr=evidence.acr, amr=list(evidence.amr)
    )


def evidence_event(evidence: common_pb2.ApprovalEvidence) -> dict[str, object]:
    """What the audit events (claimed, settled) keep of an approval."""
    return {"issuer": evidence.issuer, "kid": evidence.kid, "jti": evidence.jti, "acr": evidence.acr}
