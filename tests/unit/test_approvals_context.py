"""merge_context: every mode × a verified assertion that agrees / disagrees / is missing × the admin rules."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from countersign.approvals import (
    AdminClaim,
    ContextFields,
    ContextInvalid,
    ContextMismatch,
    ContextMode,
    VerifiedContext,
    merge_context,
)
from countersign.v1 import common_pb2

OFF, OPTIONAL, REQUIRED = ContextMode.OFF, ContextMode.OPTIONAL, ContextMode.REQUIRED
SENT = ContextFields(tenant_id="t1", actor_id="alice", subject_id="alice", session_id="s1", role="user")
EMPTY = ContextFields()
ALICE = VerifiedContext(
    issuer="https://app.example",
    kid="k1",
    actor_id="alice",
    tenant_id="t1",
    session_id="s1",
    role="user",
    admin=None,
    exp=0.0,
)
ADMIN = replace(ALICE, actor_id="ops-ann", role="admin", admin=AdminClaim("t1:ops", "MAINTAIN"))
ADMIN_SENT = ContextFields(tenant_id="t1", actor_id="ops-ann", subject_id="alice", session_id="s1", role="admin")


def sent(**fields: Any) -> ContextFields:
    return replace(SENT, **fields)


# (mode, sent, verified, expected merge or the check that refuses it)
CASES: list[tuple[str, ContextMode, ContextFields, VerifiedContext | None, ContextFields | str]] = [
    # off: the fields as sent, whatever an assertion says
    ("off: no assertion", OFF, SENT, None, SENT),
    ("off: a disagreeing assertion is ignored", OFF, sent(tenant_id="t2"), ALICE, sent(tenant_id="t2")),
    ("off: empty fields stay empty", OFF, EMPTY, ALICE, EMPTY),
    # optional: without an assertion as sent; with one, as required
    ("optional: no assertion", OPTIONAL, SENT, None, SENT),
    ("optional: agree", OPTIONAL, SENT, ALICE, SENT),
    ("optional: empty fields take the verified ones", OPTIONAL, EMPTY, ALICE, SENT),
    ("optional: another tenant", OPTIONAL, sent(tenant_id="t2"), ALICE, "tenant_id"),
    ("optional: another actor", OPTIONAL, sent(actor_id="mallory"), ALICE, "actor_id"),
    ("optional: another session", OPTIONAL, sent(session_id="s2"), ALICE, "session_id"),
    ("optional: a raised role", OPTIONAL, sent(role="admin"), ALICE, "role"),
    ("optional: acting for another subject", OPTIONAL, sent(subject_id="bob"), ALICE, "subject_id"),
    # required: no assertion, no call
    ("required: no assertion", REQUIRED, SENT, None, "missing"),
    ("required: no assertion, empty fields", REQUIRED, EMPTY, None, "missing"),
    ("required: agree", REQUIRED, SENT, ALICE, SENT),
    ("required: empty fields take the verified ones", REQUIRED, EMPTY, ALICE, SENT),
    ("required: partly empty", REQUIRED, sent(actor_id="", session_id=""), ALICE, SENT),
    ("required: another tenant", REQUIRED, sent(tenant_id="t2"), ALICE, "tenant_id"),
    ("required: another actor", REQUIRED, sent(actor_id="mallory"), ALICE, "actor_id"),
    ("required: another session", REQUIRED, sent(session_id="s2"), ALICE, "session_id"),
    ("required: a raised role", REQUIRED, sent(role="admin"), ALICE, "role"),
    ("required: acting for another subject", REQUIRED, sent(subject_id="bob"), ALICE, "subject_id"),
    ("required: admin mode NONE is no admin", REQUIRED, sent(admin_mode="NONE"), ALICE, sent(admin_mode="NONE")),
    # admin contexts, unverified (off, optional without an assertion): consistency rules still hold
    (
        "off: admin with role admin in its own tenant",
        OFF,
        replace(ADMIN_SENT, admin_context_id="t1:ops", admin_mode="MAINTAIN"),
        None,
        replace(ADMIN_SENT, admin_context_id="t1:ops", admin_mode="MAINTAIN"),
    ),
    (
        "off: self-asserted admin with role user",
        OFF,
        sent(admin_context_id="t1:ops", admin_mode="MAINTAIN"),
        None,
        "admin_role",
    ),
    (
        "off: an admin of t1 acting in t2",
        OFF,
        replace(ADMIN_SENT, tenant_id="t2", admin_context_id="t1:ops", admin_mode="READONLY"),
        None,
        "admin_tenant",
    ),
    (
        "off: an admin id that only starts like the tenant",
        OFF,
        replace(ADMIN_SENT, admin_context_id="t1x:ops", admin_mode="READONLY"),
        None,
        "admin_tenant",
    ),
    (
        "off: an admin context without tenant",
        OFF,
        replace(ADMIN_SENT, tenant_id="", admin_context_id=":ops", admin_mode="READONLY"),
        None,
        "admin_tenant",
    ),
    ("off: an admin id without a mode", OFF, replace(ADMIN_SENT, admin_context_id="t1:ops"), None, "admin_context"),
    ("off: an admin mode without an id", OFF, replace(ADMIN_SENT, admin_mode="MAINTAIN"), None, "admin_context"),
    (
        "optional, no assertion: self-asserted admin",
        OPTIONAL,
        sent(admin_context_id="t1:ops", admin_mode="READONLY"),
        None,
        "admin_role",
    ),
    # admin contexts, verified
    (
        "required: a verified admin, fields empty",
        REQUIRED,
        replace(EMPTY, subject_id="alice"),
        ADMIN,
        replace(ADMIN_SENT, admin_context_id="t1:ops", admin_mode="MAINTAIN"),
    ),
    (
        "required: a verified admin acting for themself",
        REQUIRED,
        EMPTY,
        ADMIN,
        replace(ADMIN_SENT, subject_id="ops-ann", admin_context_id="t1:ops", admin_mode="MAINTAIN"),
    ),
    (
        "required: a verified admin, another mode sent",
        REQUIRED,
        replace(ADMIN_SENT, admin_context_id="t1:ops", admin_mode="READONLY"),
        ADMIN,
        "admin_mode",
    ),
    (
        "required: a verified admin, another admin context sent",
        REQUIRED,
        replace(ADMIN_SENT, admin_context_id="t1:root", admin_mode="MAINTAIN"),
        ADMIN,
        "admin_context_id",
    ),
    (
        "required: a verified admin in another tenant",
        REQUIRED,
        replace(ADMIN_SENT, tenant_id="t2"),
        ADMIN,
        "tenant_id",
    ),
    (
        "required: an assertion granting t2's admin context to a t1 user",
        REQUIRED,
        EMPTY,
        replace(ADMIN, admin=AdminClaim("t2:ops", "MAINTAIN")),
        "admin_tenant",
    ),
    (
        "required: an admin context asserted for a role user",
        REQUIRED,
        EMPTY,
        replace(ADMIN, role="user"),
        "admin_role",
    ),
    (
        "required: a verified user sending an admin context",
        REQUIRED,
        replace(SENT, role="", admin_context_id="t1:ops", admin_mode="MAINTAIN"),
        ALICE,
        "admin_context_id",
    ),
    (
        "optional: a verified user sending an admin mode",
        OPTIONAL,
        sent(admin_mode="MAINTAIN"),
        ALICE,
        "admin_mode",
    ),
]


@pytest.mark.parametrize(("mode", "fields", "verified", "outcome"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_merge_context(
    mode: ContextMode, fields: ContextFields, verified: VerifiedContext | None, outcome: ContextFields | str
) -> None:
    if isinstance(outcome, ContextFields):
        assert merge_context(fields, verified, mode) == outcome
        return
    error = ContextInvalid if outcome == "missing" else ContextMismatch
    with pytest.raises(error) as caught:
        merge_context(fields, verified, mode)
    assert caught.value.check == outcome
    assert caught.value.reason == ("CONTEXT_INVALID" if outcome == "missing" else "CONTEXT_MISMATCH")


def test_an_honoured_admin_context_is_marked_as_admin() -> None:
    merged = merge_context(EMPTY, ADMIN, REQUIRED)
    assert merged.is_admin and merged.admin_mode == "MAINTAIN"
    assert not merge_context(SENT, ALICE, REQUIRED).is_admin


def test_fields_round_trip_through_the_proto_call_context() -> None:
    proto = common_pb2.CallContext(
        tenant_id="t1",
        actor_id="ops-ann",
        subject_id="alice",
        session_id="s1",
        request_id="r1",
        role="admin",
        admin_context_id="t1:ops",
        admin_mode=common_pb2.ADMIN_MODE_READONLY,
        locale="en",
    )
    fields = ContextFields.from_proto(proto)
    assert fields.admin_mode == "READONLY" and fields.is_admin
    merged = merge_context(
        replace(fields, actor_id=""), replace(ADMIN, admin=AdminClaim("t1:ops", "READONLY")), REQUIRED
    )
    back = merged.to_proto(proto)
    assert back == proto  # request_id and locale kept; the identity the same as the verified one
    assert ContextFields.from_proto(common_pb2.CallContext()).admin_mode == ""
