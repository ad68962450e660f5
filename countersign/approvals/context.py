"""Who is calling: the CallContext's identity fields merged with a verified context assertion.

``merge_context(sent, verified, mode)``:

- ``off``: the fields as sent (an assertion, if any, is ignored);
- ``optional``: with an assertion, as ``required``; without one, as sent;
- ``required``: no assertion → ContextInvalid ``missing``. Tenant, actor, session, role and the admin
  context come from the verified claims; a field sent empty takes the verified value, a field that
  disagrees is ContextMismatch naming the field. The subject is the verified user (``sub``) unless the
  assertion grants an admin context, in which case the admin names the subject they act for.

In every mode an admin context (``admin_context_id`` or an admin mode) is honoured only when it is
complete (an id and READONLY or MAINTAIN), the role is ``admin`` (verified where verification is on) and
the id belongs to the request's tenant: an admin context id is ``<tenant_id>:<name>``, and a request in
tenant T may use only an id starting with ``T:`` (so an admin of t1 cannot act in t2).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Literal

from countersign.approvals.errors import ContextInvalid, ContextMismatch
from countersign.approvals.verify import VerifiedContext
from countersign.v1 import common_pb2

AdminMode = Literal["", "NONE", "READONLY", "MAINTAIN"]
_FROM_PROTO: dict[int, AdminMode] = {
    common_pb2.ADMIN_MODE_UNSPECIFIED: "",
    common_pb2.ADMIN_MODE_NONE: "NONE",
    common_pb2.ADMIN_MODE_READONLY: "READONLY",
    common_pb2.ADMIN_MODE_MAINTAIN: "MAINTAIN",
}
_TO_PROTO = {name: number for number, name in _FROM_PROTO.items()}
ADMIN_ROLE = "admin"


class ContextMode(StrEnum):
    """The ``--verified-context`` setting."""

    OFF = "off"
    OPTIONAL = "optional"
    REQUIRED = "required"


@dataclass(frozen=True)
class ContextFields:
    """The identity part of a CallContext (request_id, locale and session_mode are not identity)."""

    tenant_id: str = ""
    actor_id: str = ""
    subject_id: str = ""
    session_id: str = ""
    role: str = ""
    admin_context_id: str = ""
    admin_mode: AdminMode = ""

    @property
    def is_admin(self) -> bool:
        """An admin context is in use (after merge_context: one that is honoured)."""
        return bool(self.admin_context_id) and self.admin_mode in ("READONLY", "MAINTAIN")

    @classmethod
    def from_proto(cls, context: common_pb2.CallContext) -> ContextFields:
        return cls(
            tenant_id=context.tenant_id,
            actor_id=context.actor_id,
            subject_id=context.subject_id,
            session_id=context.session_id,
            role=context.role,
            admin_context_id=context.admin_context_id,
            admin_mode=_FROM_PROTO.get(context.admin_mode, "NONE"),
        )

    def to_proto(self, context: common_pb2.CallContext) -> common_pb2.CallContext:
        """A copy of ``context`` with these identity fields (the rest kept as sent)."""
        out = common_pb2.CallContext()
        out.CopyFrom(context)
        out.tenant_id, out.actor_id, out.subject_id = self.tenant_id, self.actor_id, self.subject_id
        out.session_id, out.role, out.admin_context_id = self.session_id, self.role, self.admin_context_id
        out.admin_mode = _TO_PROTO[self.admin_mode]  # type: ignore[assignment]
        return out


def merge_context(sent: ContextFields, verified: VerifiedContext | None, mode: ContextMode) -> ContextFields:
    """The identity to act on, or ContextInvalid (``missing``) / ContextMismatch (the field or admin rule)."""
    if mode is ContextMode.OFF or (verified is None and mode is ContextMode.OPTIONAL):
        merged = sent
    elif verified is None:
        raise ContextInvalid("missing", "this sidecar requires a verified context assertion (authorization: Bearer)")
    else:
        merged = _take_verified(sent, verified)
    _admin_rules(merged)
    return merged


def _take_verified(sent: ContextFields, verified: VerifiedContext) -> ContextFields:
    admin = verified.admin
    claims: dict[str, str] = {
        "tenant_id": verified.tenant_id,
        "actor_id": verified.actor_id,
        "session_id": verified.session_id,
        "role": verified.role,
        "admin_context_id": admin.id if admin else "",
        "admin_mode": admin.mode if admin else "",
    }
    if admin is None:  # a user acts for themself; only a verified admin names another subject
        claims["subject_id"] = verified.actor_id
    merged = sent
    for name, claim in claims.items():
        value = getattr(sent, name)
        if name == "admin_mode" and not claim and value == "NONE":
            continue  # NONE is what unspecified means
        if value and value != claim:
            raise ContextMismatch(name, f"{name} disagrees with the verified context assertion")
        merged = replace(merged, **{name: claim})  # type: ignore[arg-type]
    if admin is not None and not merged.subject_id:
        merged = replace(merged, subject_id=verified.actor_id)
    return merged


def _admin_rules(context: ContextFields) -> None:
    if not context.admin_context_id and context.admin_mode in ("", "NONE"):
        return
    if not context.is_admin:
        raise ContextMismatch("admin_context", "an admin context needs both an id and the mode READONLY or MAINTAIN")
    if context.role != ADMIN_ROLE:
        raise ContextMismatch("admin_role", "an admin context is honoured only with role admin")
    if not context.tenant_id or not context.admin_context_id.startswith(context.tenant_id + ":"):
        raise ContextMismatch("admin_tenant", "an admin context is honoured only inside its own tenant")
