"""Standing grants (docs/design.md §12): the user's signed consent to a number of writes of one capability, which
then run at Invoke without a card.

CreateGrant verifies the approval (kind "grant", signed by a configured issuer, its owner the caller: actor and
tenant), checks the capability against the registry (enabled, a write a grant may cover: ``never_covered``), and
records the grant once: the grant id derives from the approval's iss and jti, so the same approval offered twice
is one grant, never a second one with fresh uses, and a revoked grant stays revoked.

An Invoke of a write covered by a live grant of its owner (the capability, and every pinned argument equal to the
*prepared* argument of that name, compared as canonical JSON: what would execute is what was granted) takes one
use (grant_use.lua, idempotent per action id) and is then issued directly as running (grant_run.lua) and executed
like any claimed action; its receipt and its audit events name the grant. Anything that does not fit falls back
to the card: a grant never refuses a call, it only spares a confirmation.

Grants are their owner's own: they cover only calls in which the actor acts for themselves (no admin context), and
only an owner's hash is ever read for them (store/keys.py: grants_key), so another owner's grant covers nothing.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from countersign.approvals import ApprovalError, ApprovalRequired, GrantClaims, GrantExpected, Verifier
from countersign.audit import Audit
from countersign.canonical import canonical
from countersign.errors import (
    DataLoss,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
)
from countersign.keyring import Keyring, is_action_id
from countersign.observability.metrics import Metrics
from countersign.path import policy
from countersign.reasons import Reason
from countersign.registry import Registry, Tool
from countersign.store import GrantCreated, GrantRecord, GrantsFull, GrantTaken
from countersign.store.protocols import GrantStore
from countersign.v1 import common_pb2, gateway_pb2

log = logging.getLogger("countersign.grants")

VERSION = 1
# A grant stays recorded this long after its expiry, revoked or used up as it may be: longer than any approval's
# leeway (at most 300 s), so its approval cannot create it afresh while it could still verify.
KEEP_MS = 15 * 60 * 1000
MAX_LIVE = 100  # live grants one owner may hold (each covered write reads them all, in one round trip)


def never_covered(tool: Tool) -> str:
    """Why no grant may ever cover this tool; "" when one may. The one place that decides it, at creation and at
    every Invoke (the approvals wiring adds here: a tool whose card requires ``approval: signed``)."""
    if not tool.is_write:
        return f"{tool.name!r} only reads: it needs no confirmation"
    if tool.confirmation == "always":
        return f"{tool.name!r} is confirmation: always (every call is confirmed on its own card)"
    if tool.risk in ("high", "irreversible"):
        return f"{tool.name!r} is risk: {tool.risk} (every call is confirmed on its own card)"
    return ""


def acting_for_themselves(context: common_pb2.CallContext) -> bool:
    """A grant is its owner's consent about their own data: never used by an admin, nor for another subject."""
    return context.actor_id == context.subject_id and not context.admin_context_id


def owner_of(keyring: Keyring, context: common_pb2.CallContext) -> str:
    """The owner's key: a keyed hash of tenant and actor under the id key (it never changes when keys rotate)."""
    return keyring.id_hash("grant-owner", [context.tenant_id, context.actor_id])


@dataclass(frozen=True)
class Grant:
    """A grant as read back from the store and verified (its MAC and its owner)."""

    grant_id: str
    owner: str
    capability: str
    uses: int
    args: Mapping[str, Any] | None
    exp_ms: int
    issuer: str
    created_ms: int
    mac: str
    taken: int = 0
    revoked: bool = False

    def covers(self, tool: Tool, arguments: Mapping[str, Any], now_ms: int) -> bool:
        """Live (not revoked, not expired, a use left) and about this call: its capability, its pinned values."""
        if self.revoked or now_ms >= self.exp_ms or self.taken >= self.uses or self.capability != tool.capability:
            return False
        try:
            return all(
                name in arguments and canonical(arguments[name]) == canonical(value)
                for name, value in (self.args or {}).items()
            )
        except ValueError:
            return False  # a value that is not I-JSON matches nothing


def seal(keyring: Keyring, claims: GrantClaims, owner: str, now_ms: int) -> bytes:
    """The grant as stored: its body (what the verified approval granted, and to whom) and the body's MAC."""
    body = canonical(
        {
            "v": VERSION,
            "grant_id": claims.grant_id,
            "owner": owner,
            "cap": claims.capability,
            "uses": claims.uses,
            "args": dict(claims.args) if claims.args is not None else None,
            "exp_ms": int(claims.exp * 1000),
            "iss": claims.issuer,
            "kid": claims.kid,
            "jti": claims.jti,
            "acr": claims.acr,
            "created_ms": now_ms,
        }
    ).decode()
    kid = keyring.active
    mac = keyring.mac(kid, "grant:" + claims.grant_id, body.encode())
    return canonical({"kid": kid, "mac": mac, "body": body})


def open_grant(keyring: Keyring, record: GrantRecord, owner: str) -> Grant | None:
    """The verified grant, or None when the stored one was changed (or sealed with a key this sidecar lacks)."""
    try:
        sealed = json.loads(record.sealed)
        kid, mac, raw = str(sealed["kid"]), str(sealed["mac"]), str(sealed["body"])
        if not keyring.verify(kid, "grant:" + record.grant_id, raw.encode(), mac):
            return None
        body = json.loads(raw)
        if body["grant_id"] != record.grant_id or body["owner"] != owner:
            return None
        return Grant(
            grant_id=record.grant_id,
            owner=owner,
            capability=str(body["cap"]),
            uses=int(body["uses"]),
            args=body["args"],
            exp_ms=int(body["exp_ms"]),
            issuer=str(body["iss"]),
            created_ms=int(body["created_ms"]),
            mac=mac,
            taken=record.taken,
            revoked=record.revoked,
        )
    except (ValueError, KeyError, TypeError):
        return None


def to_proto(grant: Grant) -> gateway_pb2.Grant:
    out = gateway_pb2.Grant(
        grant_id=grant.grant_id,
        capability_id=grant.capability,
        uses=grant.uses,
        uses_left=max(grant.uses - grant.taken, 0),
        pinned_arguments_json=canonical(dict(grant.args)).decode() if grant.args is not None else "",
        issuer=grant.issuer,
        revoked=grant.revoked,
    )
    out.expires_at.FromMilliseconds(grant.exp_ms)
    out.created_at.FromMilliseconds(grant.created_ms)
    return out


class Grants:
    """CreateGrant, ListGrants, RevokeGrant, and Invoke's step one: a use of the grant that covers a write."""

    def __init__(
        self,
        store: GrantStore,
        keyring: Keyring,
        registry: Registry,
        verifier: Verifier | None,
        audit: Audit,
        metrics: Metrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store, self.keyring, self.registry, self.verifier = store, keyring, registry, verifier
        self.audit, self.metrics, self.clock = audit, metrics, clock

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- Invoke: step one --------------------------------------------------------------------------------------

    async def cover(
        self, context: common_pb2.CallContext, tool: Tool, arguments: Mapping[str, Any], action_id: str
    ) -> Grant | None:
        """The grant that covers this write, one use of it taken for ``action_id`` (again, for the same action);
        None: no grant covers it (the caller issues a card)."""
        if self.verifier is None or never_covered(tool) or not acting_for_themselves(context):
            return None
        owner, now_ms = owner_of(self.keyring, context), self._now_ms()
        candidates = sorted(
            (g for g in self._opened(owner, await self.store.grants(owner)) if g.covers(tool, arguments, now_ms)),
            key=lambda g: (g.exp_ms, g.grant_id),  # the one that lapses first is used first
        )
        for grant in candidates:
            taken = await self.store.grant_use(
                owner, grant.grant_id, action_id, grant.mac, grant.uses, grant.exp_ms, KEEP_MS
            )
            if isinstance(taken, GrantTaken):
                return grant
            if taken == "tampered":
                log.warning(json.dumps({"event": "grant_tampered", "grant_id": grant.grant_id}))
        return None

    def _opened(self, owner: str, records: list[GrantRecord]) -> list[Grant]:
        opened = []
        for record in records:
            grant = open_grant(self.keyring, record, owner)
            if grant is None:  # covers nothing and is not listed; said once per read
                log.warning(json.dumps({"event": "grant_tampered", "grant_id": record.grant_id[:64]}))
            else:
                opened.append(grant)
        return opened

    # -- CreateGrant, ListGrants, RevokeGrant ------------------------------------------------------------------

    async def create(self, context: common_pb2.CallContext, approval: str) -> gateway_pb2.CreateGrantResponse:
        policy.check_context(context)
        if not acting_for_themselves(context):
            raise PermissionDenied(
                Reason.SUBJECT_NOT_ALLOWED,
                "a grant is its owner's own: create it acting for yourself, no admin context",
            )
        if self.verifier is None:
            raise FailedPrecondition(
                Reason.APPROVALS_NOT_CONFIGURED,
                "this sidecar trusts no approval issuer (--approvals), so it cannot verify a grant",
            )
        now = self.clock()
        try:
            claims = await self.verifier.verify_grant_async(
                approval, expect=GrantExpected(actor_id=context.actor_id, tenant_id=context.tenant_id, now=now)
            )
        except ApprovalError as exc:
            reason = Reason.APPROVAL_REQUIRED if isinstance(exc, ApprovalRequired) else Reason.APPROVAL_INVALID
            raise PermissionDenied(
                reason, f"the grant was refused: {exc.check}: {exc.message}", metadata={"check": exc.check}
            ) from exc
        self._grantable(claims)
        owner, now_ms = owner_of(self.keyring, context), int(now * 1000)
        sealed = seal(self.keyring, claims, owner, now_ms)
        exp_ms = int(claims.exp * 1000)
        found = await self.store.grant_create(owner, claims.grant_id, sealed, exp_ms, KEEP_MS, MAX_LIVE)
        if isinstance(found, GrantsFull):
            raise ResourceExhausted(
                Reason.QUOTA_EXCEEDED, f"you hold {found.live} live grants, the most one owner may: revoke one first"
            )
        if isinstance(found, GrantCreated):
            self.audit.event(
                claims.grant_id,
                "granted",
                capability=claims.capability,
                uses=claims.uses,
                exp_ms=exp_ms,
                issuer=claims.issuer,
                kid=claims.kid,
                jti=claims.jti,
                acr=claims.acr,
                args_hmac=self.keyring.digest("args", canonical(dict(claims.args))) if claims.args else "",
            )
            record = GrantRecord(claims.grant_id, sealed)
        else:
            record = found
        grant = open_grant(self.keyring, record, owner)
        if grant is None:
            raise DataLoss(Reason.RECORD_TAMPERED, "the stored grant of this approval was changed; it covers nothing")
        if grant.revoked:
            raise FailedPrecondition(
                Reason.GRANT_REVOKED, "this grant was revoked; its approval cannot create it again (ask for a new one)"
            )
        return gateway_pb2.CreateGrantResponse(grant=to_proto(grant), replayed=not isinstance(found, GrantCreated))

    def _grantable(self, claims: GrantClaims) -> None:
        """The capability a grant names must be enabled, name a registered write a grant may cover, and every pinned
        argument must be one the tool takes (refused at creation, with the reason)."""
        registry = self.registry
        cap = registry.capabilities.get(claims.capability) or registry.refusals.get(claims.capability)
        why = ""
        if cap is None:
            why = f"no capability {policy.cut(claims.capability)!r} is registered"
        elif cap.status != "enabled":
            why = f"the capability {cap.id!r} is {cap.status}"
        elif cap.confirmation == "always" or cap.risk in ("high", "irreversible"):
            why = f"the capability {cap.id!r} is confirmation: {cap.confirmation or 'default'}, risk: {cap.risk}"
        else:
            tool = registry.tools.get(cap.tool)
            why = never_covered(tool) if tool is not None else f"the capability {cap.id!r} has no tool"
            if not why and tool is not None and claims.args:
                known = set((tool.schema.get("properties") or {}).keys())
                unknown = sorted(set(claims.args) - known)
                if unknown:
                    names = ", ".join(repr(policy.cut(n)) for n in unknown)
                    why = f"args pins {names}, which {tool.name!r} does not take"
        if why:
            raise FailedPrecondition(Reason.GRANT_NOT_ALLOWED, f"a grant cannot cover this: {why}")

    async def list(self, context: common_pb2.CallContext) -> gateway_pb2.ListGrantsResponse:
        policy.check_context(context)
        owner, now_ms = owner_of(self.keyring, context), self._now_ms()
        live = [
            g
            for g in self._opened(owner, await self.store.grants(owner))
            if not g.revoked and g.exp_ms > now_ms and g.taken < g.uses
        ]
        live.sort(key=lambda g: (g.exp_ms, g.grant_id))
        return gateway_pb2.ListGrantsResponse(grants=[to_proto(g) for g in live])

    async def revoke(self, context: common_pb2.CallContext, grant_id: str) -> gateway_pb2.RevokeGrantResponse:
        policy.check_context(context)
        if not is_action_id(grant_id):  # the same shape: 32 lower-case hex
            raise InvalidArgument(Reason.REQUEST_INVALID, "grant_id must be 32 lower-case hex characters")
        owner = owner_of(self.keyring, context)
        revoked = await self.store.grant_revoke(owner, grant_id)
        if revoked is None:  # never created, swept, or someone else's: the answer is the same
            raise NotFound(Reason.GRANT_NOT_FOUND, "you hold no grant by that id")
        grant = open_grant(self.keyring, revoked.grant, owner)
        if grant is None:
            raise DataLoss(
                Reason.RECORD_TAMPERED, "the stored grant was changed (it is revoked now, and covers nothing)"
            )
        if not revoked.before:
            self.audit.event(grant_id, "grant_revoked", taken=grant.taken)
        return gateway_pb2.RevokeGrantResponse(grant=to_proto(grant))
