"""Confirmation cards: sealed (MAC'd) records of what exactly the user is asked to countersign.

A card binds the server-prepared canonical arguments to owner (as a keyed hash), tool,
capability, risk, policy version, admin context and expiry (I2). A card whose record changed in
Redis fails its MAC check: DATA_LOSS, CONFIRMATION_TAMPERED, and nothing executes.

The body also carries what Confirm needs besides the token (docs/design.md §12): ``approval`` (none | signed, the
registry's at issue) and ``approval_digest``, the hash of what the user is shown (countersign/approvals/digest.py:
tool, prepared arguments, preview, policy version, expiry), computed once here; an approval's ``dig`` must equal
it. Both are also written as the card's own hash fields (with the risk), which claim.lua compares atomically; the
executor checks what the claim let through against the MAC'd body (execute.py), so a hash field flipped in Redis
never runs a write without the approval its card requires. ``tenant_binding`` (a keyed hash of the tenant) lets an
admin context be checked against the action's tenant without storing the tenant.

The run record keeps the sealed card it was claimed from, so its owner binding, key id and tool
are checked against the MAC'd body at every read (``check_run``): a binding copied from another
record is RECORD_TAMPERED, never a way into someone else's receipt. The card's sealed expiry is
enforced by the scripts themselves (claim, issue, peek, reject read it from the body), whatever
TTL the key has.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, NamedTuple

from google.protobuf import json_format

from countersign.approvals import approval_digest
from countersign.canonical import canonical, loads
from countersign.errors import (
    CountersignError,
    DataLoss,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
)
from countersign.keyring import Keyring, is_action_id
from countersign.path import approval, policy
from countersign.reasons import Reason
from countersign.registry import RISKS, Tool
from countersign.store import NO_APPROVAL, CardRecord, Refused, RunRecord
from countersign.store.protocols import Peek
from countersign.v1 import common_pb2, gateway_pb2

VERSION = 1
RISK_ENUM = {r: i + 1 for i, r in enumerate(RISKS)}
APPROVAL_ENUM = {"none": common_pb2.APPROVAL_REQUIREMENT_NONE, "signed": common_pb2.APPROVAL_REQUIREMENT_SIGNED}


class Card(NamedTuple):
    """An opened (verified) card. Immutable; a NamedTuple rather than a frozen dataclass, whose __init__ sets
    each of its 19 fields through object.__setattr__ (~30k instructions of every Confirm)."""

    action_id: str
    kid: str
    binding: str
    tool: str
    capability: str
    risk: str
    confirmation: str
    policy_version: str
    arguments: dict[str, Any]
    resource_version: str
    preview: dict[str, Any]
    issued_at_ms: int
    expires_at_ms: int
    compensates: str = ""  # an inverse's card: the action it undoes (path/inverse.py)
    compensates_tool: str = ""
    grant: str = ""  # issued under a standing grant: its id (no card was shown; path/grants.py)
    approval: str = "none"  # none | signed: what Confirm needs besides the token (sealed at issue)
    approval_digest: str = ""  # the dig an approval of this card carries ("" on a card sealed before issue 13)
    tenant_binding: str = ""  # keyed hash of the owner's tenant (admin contexts are checked against it)


def owner(context: common_pb2.CallContext) -> list[str]:
    """What a card is bound to, besides the tool: who, for whom, where, under which admin context."""
    return [context.tenant_id, context.actor_id, context.subject_id, context.session_id, context.admin_context_id]


def tenant_binding(keyring: Keyring, kid: str, tenant_id: str) -> str:
    """The owner's tenant as a keyed hash (never the tenant itself), under key ``kid``."""
    return keyring.binding(kid, ["tenant", tenant_id])


def binding_of(keyring: Keyring, record: CardRecord | RunRecord, context: common_pb2.CallContext) -> str:
    """The caller's binding, keyed like the record's (its key id, or the active key if that one is gone)."""
    kid = record.kid if record.kid in keyring.keys else keyring.active
    return keyring.binding(kid, owner(context))


def check_run(keyring: Keyring, action_id: str, run: RunRecord) -> None:
    """DATA_LOSS unless the run record's binding, key id and tool are those of the card it was claimed from,
    and that card is this action's and verifies (I2: the binding is MAC'd too). A card that does not verify is
    CONFIRMATION_TAMPERED (what its claim answered too); a record that disagrees with it is RECORD_TAMPERED."""
    tampered = DataLoss(Reason.RECORD_TAMPERED, "the stored record of this action was changed; it is not trusted")
    try:
        body = loads(run.card)
    except ValueError as exc:
        raise tampered from exc
    if not isinstance(body, dict) or (body.get("action_id"), body.get("kid"), body.get("tool"), body.get("b")) != (
        action_id,
        run.kid,
        run.tool,
        run.binding,
    ):
        raise tampered
    if run.kid not in keyring.keys:
        raise DataLoss(
            Reason.RECORD_TAMPERED,
            f"the record was sealed with key {run.kid[:32]!r}, which this "
            "sidecar's keys file does not list (changed by hand, or a key removed while records it "
            "sealed are live)",
        )
    if not keyring.verify(run.kid, "card", run.card, run.cmac):
        raise DataLoss(Reason.CONFIRMATION_TAMPERED, "the stored confirmation was changed; nothing was executed")


def require_owner(
    keyring: Keyring, action_id: str, record: CardRecord | RunRecord, context: common_pb2.CallContext
) -> None:
    """The record verifies (DATA_LOSS if not), and the caller is who it is bound to (PERMISSION_DENIED if not)."""
    if isinstance(record, RunRecord):
        check_run(keyring, action_id, record)
    else:
        open_card(keyring, action_id, record)
    if record.binding != binding_of(keyring, record, context):
        raise PermissionDenied(Reason.CONFIRMATION_BINDING_MISMATCH, "the action belongs to another owner or session")


ADMIN_READ = frozenset({common_pb2.ADMIN_MODE_READONLY, common_pb2.ADMIN_MODE_MAINTAIN})
ADMIN_MAINTAIN = frozenset({common_pb2.ADMIN_MODE_MAINTAIN})


async def owned_action(
    store: Peek,
    keyring: Keyring,
    context: common_pb2.CallContext,
    action_id: str,
    *,
    admin_modes: frozenset[int] = frozenset(),
) -> CardRecord | RunRecord:
    """The action a caller names by id, checked once for every entry that takes an id (GetAction, Compensate,
    Reconcile, OpenContinuation): a valid context, a well-formed id, an action that exists, records that verify,
    and the caller its owner, or (``admin_modes``) an admin context in one of these modes whose tenant is the
    action's (the admin rules themselves, role admin and an id of its own tenant, are check_context's)."""
    policy.check_context(context)
    if not is_action_id(action_id):
        raise InvalidArgument(Reason.REQUEST_INVALID, "action_id must be 32 lower-case hex characters")
    found = await store.peek(action_id)
    if found is None:
        raise NotFound(Reason.ACTION_NOT_FOUND, "no such action: never issued, or its records expired")
    if context.admin_context_id and context.admin_mode in admin_modes:
        _require_tenant(keyring, action_id, found, context)
    else:
        require_owner(keyring, action_id, found, context)
    return found


def _require_tenant(
    keyring: Keyring, action_id: str, record: CardRecord | RunRecord, context: common_pb2.CallContext
) -> None:
    """The record verifies, and its owner's tenant is the caller's (an admin acts inside its own tenant only)."""
    if isinstance(record, RunRecord):
        check_run(keyring, action_id, record)
        card = open_card(keyring, action_id, CardRecord(record.kid, record.tool, record.card, record.cmac))
    else:
        card = open_card(keyring, action_id, record)
    mine = card.tenant_binding and card.tenant_binding == tenant_binding(keyring, card.kid, context.tenant_id)
    if not mine:  # a card sealed before tenant bindings were kept names no tenant: only its owner may look
        raise PermissionDenied(Reason.CONFIRMATION_BINDING_MISMATCH, "the action belongs to another owner or session")


def refusal_error(refused: Refused) -> CountersignError:
    """What a caller hears when a transition was refused and nothing changed (the one mapping of every
    ``Refused``: a card's claim or reject, a compensation's claim, a continuation's transitions)."""
    if refused.why == "expired":
        return NotFound(Reason.CONFIRMATION_EXPIRED, "the confirmation expired or was never issued")
    if refused.why == "none":
        return NotFound(
            Reason.CONTINUATION_NOT_FOUND, "no continuation (or action) by that id: never opened, or expired"
        )
    if refused.why == "role":
        return PermissionDenied(
            Reason.ROLE_NOT_ALLOWED, f"your role may not run {refused.tool!r}; the card is still waiting"
        )
    if refused.why in ("approval_required", "approval_invalid"):
        return approval.refusal(refused, approval.Checked(NO_APPROVAL))
    return PermissionDenied(Reason.CONFIRMATION_BINDING_MISMATCH, "this belongs to another owner or session")


def seal(
    keyring: Keyring,
    *,
    action_id: str,
    binding: str,
    tool: Tool,
    policy_version: str,
    arguments: dict[str, Any],
    resource_version: str,
    preview: common_pb2.Preview,
    now_ms: int,
    ttl_ms: int,
    tenant: str = "",
    extra: dict[str, Any] | None = None,
) -> CardRecord:
    """The card's record: its body canonical and MAC'd, with the approval digest of what the user will see
    (FAILED_PRECONDITION PREPARED_ARGS_INVALID when the prepared arguments are not I-JSON)."""
    expires_at_ms = now_ms + ttl_ms
    try:
        digest = approval_digest(tool.name, arguments, preview, policy_version, expires_at_ms)
    except ValueError as exc:
        raise FailedPrecondition(
            Reason.PREPARED_ARGS_INVALID, f"the prepared arguments of {tool.name!r} are not canonical JSON: {exc}"
        ) from exc
    body = {
        "v": VERSION,
        "action_id": action_id,
        "kid": keyring.active,
        "b": binding,
        "tool": tool.name,
        "capability": tool.capability,
        "risk": tool.risk,
        "confirmation": tool.confirmation,
        "policy_version": policy_version,
        "args": arguments,
        "resource_version": resource_version,
        "preview": json_format.MessageToDict(preview, preserving_proto_field_name=True),
        "issued_at_ms": now_ms,
        "expires_at_ms": expires_at_ms,
        "approval": tool.approval,
        "approval_digest": digest,
        "tenant_binding": tenant_binding(keyring, keyring.active, tenant),
        **(extra or {}),
    }
    raw = canonical(body)
    return CardRecord(
        keyring.active,
        tool.name,
        raw,
        keyring.mac(keyring.active, "card", raw),
        binding,
        approval=tool.approval,
        digest=digest,
        risk=tool.risk,
    )


class Opened:
    """The cards this process sealed and opened at Invoke, kept (the newest ``size``: 256, ~2.65 KB each, so at
    most ~0.7 MB; minutes of cards at one agent's pace, seconds at 100 writes/s) for the Confirm that claims them,
    so that work is not done twice for one card: a claimed record whose key id, tool, body and MAC are byte for
    byte the ones kept is the card as sealed here, and is not verified and decoded again (~88k instructions of a
    Confirm, counted: notes/lean-cpu4.md). Any other record (a byte changed, a card another replica sealed, one
    dropped or taken before) is opened as before, so a changed record is still CONFIRMATION_TAMPERED (I2)."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._cards: OrderedDict[str, tuple[CardRecord, Card]] = OrderedDict()

    def keep(self, record: CardRecord, card: Card) -> None:
        self._cards[card.action_id] = (record, card)
        if len(self._cards) > self.size:
            self._cards.popitem(last=False)

    def take(self, action_id: str, record: CardRecord) -> Card | None:
        """The card kept for this action if ``record`` is the one sealed (once: a won claim opens its card once)."""
        kept = self._cards.pop(action_id, None)
        if kept is None:
            return None
        sealed, card = kept
        same = (record.kid, record.tool, record.body, record.mac) == (sealed.kid, sealed.tool, sealed.body, sealed.mac)
        return card if same and (not record.binding or record.binding == card.binding) else None


def _tampered() -> DataLoss:
    return DataLoss(Reason.CONFIRMATION_TAMPERED, "the stored confirmation was changed; nothing was executed")


def open_card(keyring: Keyring, action_id: str, record: CardRecord, opened: Opened | None = None) -> Card:
    """Verify the record's MAC and that it is this action's; raise CONFIRMATION_TAMPERED if not. ``opened``: the
    cards this process sealed (a record identical to the one kept is that card)."""
    if record.kid not in keyring.keys:
        raise DataLoss(
            Reason.CONFIRMATION_TAMPERED,
            f"the stored confirmation names key {record.kid[:32]!r}, which "
            "this sidecar's keys file does not list (changed by hand, or a key removed while cards it "
            "sealed were live); nothing was executed",
        )
    kept = opened.take(action_id, record) if opened is not None else None
    if kept is not None:
        return kept
    if not keyring.verify(record.kid, "card", record.body, record.mac):
        raise _tampered()
    try:
        body = loads(record.body)
    except ValueError as exc:
        raise _tampered() from exc
    if (
        body.get("action_id") != action_id
        or body.get("kid") != record.kid
        or body.get("tool") != record.tool
        or (record.binding and body.get("b") != record.binding)
    ):
        raise _tampered()
    args = body["args"]
    return Card(
        action_id=action_id,
        kid=record.kid,
        binding=body["b"],
        tool=body["tool"],
        capability=body["capability"],
        risk=body["risk"],
        confirmation=body["confirmation"],
        policy_version=body["policy_version"],
        arguments=args,
        resource_version=body.get("resource_version", ""),
        preview=body.get("preview", {}),
        issued_at_ms=int(body["issued_at_ms"]),
        expires_at_ms=int(body["expires_at_ms"]),
        compensates=str(body.get("compensates", "")),
        compensates_tool=str(body.get("compensates_tool", "")),
        grant=str(body.get("grant", "")),
        approval=body.get("approval", "none"),
        approval_digest=body.get("approval_digest", ""),
        tenant_binding=body.get("tenant_binding", ""),
    )


def to_proto(keyring: Keyring, card: Card) -> gateway_pb2.ConfirmationCard:
    out = gateway_pb2.ConfirmationCard(
        token=keyring.token(card.action_id, card.kid),
        action_id=card.action_id,
        capability_id=card.capability,
        tool_name=card.tool,
        risk=RISK_ENUM.get(card.risk, 0),  # type: ignore[arg-type]
        prepared_arguments_json=canonical(card.arguments).decode(),
        approval_digest=card.approval_digest,
        approval=APPROVAL_ENUM.get(card.approval, common_pb2.APPROVAL_REQUIREMENT_UNSPECIFIED),
    )
    json_format.ParseDict(card.preview, out.preview)
    out.expires_at.FromMilliseconds(card.expires_at_ms)
    return out
