"""The one policy function (docs/design.md §5): every step, its status and its reason; strict argument decoding."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from countersign import registry
from countersign.errors import CountersignError, FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from countersign.path import policy
from countersign.path.policy import Allowed, Phase
from countersign.registry import Capability, Registry, Tool
from countersign.testing.processes import ROOT
from countersign.v1 import common_pb2

REGISTRY = registry.load(str(ROOT / "examples" / "registry.yaml"))
FIXTURE_REGISTRY = registry.load(str(ROOT / "tests" / "fixtures" / "registry" / "valid.yaml"))


def ctx(**overrides: Any) -> common_pb2.CallContext:
    fields: dict[str, Any] = {
        "tenant_id": "t1",
        "actor_id": "u1",
        "subject_id": "u1",
        "session_id": "s1",
        "request_id": "r1",
        "role": "user",
        "locale": "zh-CN",
        "session_mode": common_pb2.SESSION_MODE_AUTO,
    }
    fields.update(overrides)
    return common_pb2.CallContext(**fields)


def authorize(
    tool: str,
    args: Mapping[str, Any] | str | None = None,
    *,
    context: common_pb2.CallContext | None = None,
    phase: Phase = Phase.INVOKE,
    claimed: bool = False,
    reg: Registry = REGISTRY,
) -> Allowed | Capability:
    return policy.authorize(reg, context or ctx(), tool, args, phase, claimed=claimed)


def allowed(tool: str, args: Mapping[str, Any] | str | None = None, **kw: Any) -> Allowed:
    out = authorize(tool, args, **kw)
    assert isinstance(out, Allowed)
    return out


NESTED = registry.build(
    {
        "policy_version": "t.1",
        "capabilities": [
            {"id": "n.write", "status": "enabled", "tool": "write_note", "risk": "low", "confirmation": "default"}
        ],
        "tools": [
            {
                "name": "write_note",
                "capability": "n.write",
                "is_write": True,
                "roles": ["user"],
                "aliases": {"text": "body"},
                "schema": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "body": {"type": "string"},
                        "count": {"type": "integer"},
                        "note": {"type": "string"},
                        "meta": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "tag": {"type": "string"},
                                "items": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "properties": {"k": {"type": "integer"}},
                                    },
                                },
                            },
                        },
                    },
                },
                "adapter": {"kind": "http", "execute": {"url": "http://127.0.0.1:9/notes"}},
            }
        ],
    },
    "nested",
)


def raises(
    exc_type: type[CountersignError], reason: str, code: grpc.StatusCode, fn: Any, *a: Any, **kw: Any
) -> CountersignError:
    with pytest.raises(exc_type) as info:
        fn(*a, **kw)
    assert info.value.reason == reason, info.value
    assert info.value.code == code
    return info.value


# -- 1. tool exists; planned and forbidden are refusals, not errors ---------------------------


def test_unknown_tool_is_not_found() -> None:
    err = raises(NotFound, "TOOL_NOT_FOUND", grpc.StatusCode.NOT_FOUND, authorize, "drop_database", "{}")
    assert err.metadata == {"tool": "drop_database"}
    raises(NotFound, "TOOL_NOT_FOUND", grpc.StatusCode.NOT_FOUND, policy.resolve, REGISTRY, "x" * 500)


def test_a_name_the_caller_sent_is_quoted_whole_up_to_64_characters_and_cut_beyond() -> None:
    """What a model sent comes back in messages and metadata, never more than 64 of its characters."""
    for name, quoted in (("x" * 64, "x" * 64), ("x" * 65, "x" * 64 + "…"), ("y" * 500, "y" * 64 + "…")):
        err = raises(NotFound, "TOOL_NOT_FOUND", grpc.StatusCode.NOT_FOUND, policy.resolve, REGISTRY, name)
        assert err.message == f"no tool named {quoted!r} is registered"
        assert err.metadata == {"tool": name[:64]}


@pytest.mark.parametrize(
    ("name", "cap_id", "status"),
    [
        ("delete_note", "note.delete", "planned"),
        ("note.delete", "note.delete", "planned"),
        ("delete_account", "account.delete", "forbidden"),
        ("account.delete", "account.delete", "forbidden"),
    ],
)
def test_planned_and_forbidden_return_the_capability(name: str, cap_id: str, status: str) -> None:
    out = authorize(name, '{"anything": 1}')
    assert isinstance(out, Capability)
    assert out is REGISTRY.capabilities[cap_id]
    assert out.status == status
    assert out.guidance_for("en")
    assert policy.resolve(REGISTRY, name) is out


def test_a_refusal_is_returned_whatever_the_role_or_mode() -> None:
    context = ctx(role="nobody", session_mode=common_pb2.SESSION_MODE_CHAT_ONLY)
    assert isinstance(authorize("delete_account", None, context=context), Capability)


# -- 2. actor/subject boundary and admin mode -------------------------------------------------


def test_actor_for_another_subject_needs_an_admin_context() -> None:
    err = raises(
        PermissionDenied,
        "SUBJECT_NOT_ALLOWED",
        grpc.StatusCode.PERMISSION_DENIED,
        authorize,
        "list_todos",
        "{}",
        context=ctx(subject_id="u2"),
    )
    assert err.message == "acting for another subject needs an admin context"
    # an admin context id without an admin mode is not enough: refused as an incomplete admin context (issue 13)
    err = raises(
        PermissionDenied,
        "CONTEXT_MISMATCH",
        grpc.StatusCode.PERMISSION_DENIED,
        authorize,
        "list_todos",
        "{}",
        context=ctx(subject_id="u2", admin_context_id="t1:adm1", admin_mode=common_pb2.ADMIN_MODE_NONE),
    )
    assert err.metadata == {"check": "admin_context"}
    # a mode without an admin context id is not enough either
    err = raises(
        PermissionDenied,
        "CONTEXT_MISMATCH",
        grpc.StatusCode.PERMISSION_DENIED,
        authorize,
        "list_todos",
        "{}",
        context=ctx(subject_id="u2", admin_mode=common_pb2.ADMIN_MODE_MAINTAIN),
    )
    assert err.metadata == {"check": "admin_context"}


def test_admin_maintain_may_act_for_another_subject() -> None:
    context = ctx(subject_id="u2", role="admin", admin_context_id="t1:adm1", admin_mode=common_pb2.ADMIN_MODE_MAINTAIN)
    assert allowed("create_todo", '{"title": "x"}', context=context).arguments == {"title": "x"}
    assert allowed("list_todos", "{}", context=context).arguments == {}


def test_admin_readonly_may_read_but_not_prepare_a_write() -> None:
    context = ctx(subject_id="u2", role="admin", admin_context_id="t1:adm1", admin_mode=common_pb2.ADMIN_MODE_READONLY)
    assert allowed("list_todos", '{"status": "open"}', context=context).arguments == {"status": "open"}
    for phase in Phase:
        raises(
            PermissionDenied,
            "ADMIN_READONLY",
            grpc.StatusCode.PERMISSION_DENIED,
            authorize,
            "create_todo",
            '{"title": "x"}',
            context=context,
            phase=phase,
            claimed=True,
        )
    raises(PermissionDenied, "ADMIN_READONLY", grpc.StatusCode.PERMISSION_DENIED, policy.may_write_now, context)


# -- 3. role ----------------------------------------------------------------------------------


def test_role_not_allowed() -> None:
    for tool in ("list_todos", "create_todo"):
        err = raises(
            PermissionDenied,
            "ROLE_NOT_ALLOWED",
            grpc.StatusCode.PERMISSION_DENIED,
            authorize,
            tool,
            "{}",
            context=ctx(role="guest"),
        )
        assert "guest" in err.message
    raises(
        PermissionDenied,
        "ROLE_NOT_ALLOWED",
        grpc.StatusCode.PERMISSION_DENIED,
        authorize,
        "list_todos",
        "{}",
        context=ctx(role=""),
    )


# -- 4. aliases and the closed schema ---------------------------------------------------------


def test_extra_property_at_the_top_level() -> None:
    err = raises(
        InvalidArgument,
        "ARGS_INVALID",
        grpc.StatusCode.INVALID_ARGUMENT,
        authorize,
        "create_todo",
        '{"title": "x", "owner": "someone-else"}',
    )
    # the violation names the unexpected key itself, so a client can point at it
    assert [(v.field, "'owner'" in v.description) for v in err.violations] == [("owner", True)]
    two = raises(
        InvalidArgument,
        "ARGS_INVALID",
        grpc.StatusCode.INVALID_ARGUMENT,
        authorize,
        "create_todo",
        '{"title": "x", "owner": "a", "group": "b"}',
    )
    assert sorted(v.field for v in two.violations) == ["group", "owner"], "one violation per unexpected key"


def test_a_missing_required_property_is_named_as_the_field() -> None:
    err = raises(
        InvalidArgument,
        "ARGS_INVALID",
        grpc.StatusCode.INVALID_ARGUMENT,
        authorize,
        "create_todo",
        '{"deadline": "2026-12-01T09:00"}',
    )
    assert [(v.field, "title" in v.description) for v in err.violations] == [("title", True)]


def test_extra_property_nested() -> None:
    err = raises(
        InvalidArgument,
        "ARGS_INVALID",
        grpc.StatusCode.INVALID_ARGUMENT,
        authorize,
        "write_note",
        '{"body": "b", "meta": {"tag": "t", "smuggled": 1}}',
        reg=NESTED,
    )
    assert [v.field for v in err.violations] == ["meta.smuggled"]
    assert "'smuggled'" in err.violations[0].description
    err = raises(
        InvalidArgument,
        "ARGS_INVALID",
        grpc.StatusCode.INVALID_ARGUMENT,
        authorize,
        "write_note",
        '{"meta": {"items": [{"k": 1}, {"k": 2, "z": 3}]}}',
        reg=NESTED,
    )
    assert [v.field for v in err.violations] == ["meta.items.1.z"]
    assert "'z'" in err.violations[0].description


def test_one_violation_per_problem() -> None:
    err = raises(
        InvalidArgument,
        "ARGS_INVALID",
        grpc.StatusCode.INVALID_ARGUMENT,
        authorize,
        "create_todo",
        '{"title": "", "priority": 7}',
    )
    fields = sorted({v.field for v in err.violations})
    assert fields == ["priority", "title"]


def test_aliases_are_normalised() -> None:
    out = allowed("create_todo", '{"taskTitle": "Buy milk", "deadline": "2026-12-01T09:00", "importance": 2}')
    assert out.arguments == {"title": "Buy milk", "dueAt": "2026-12-01T09:00", "priority": 2}
    assert out.canonical_args == b'{"dueAt":"2026-12-01T09:00","priority":2,"title":"Buy milk"}'


def test_what_normalisation_produces_is_validated_under_the_normalised_name() -> None:
    # an alias is renamed first, then the closed schema judges the result (docs/design.md §5): a value the alias
    # carries is refused as the property it became
    err = raises(
        InvalidArgument,
        "ARGS_INVALID",
        grpc.StatusCode.INVALID_ARGUMENT,
        authorize,
        "write_note",
        '{"text": {"evil": {"rm": "-rf"}}}',
        reg=NESTED,
    )
    assert [v.field for v in err.violations] == ["body"]
    err = raises(
        InvalidArgument,
        "ARGS_INVALID",
        grpc.StatusCode.INVALID_ARGUMENT,
        authorize,
        "create_todo",
        '{"taskTitle": "", "importance": 9}',
    )
    assert sorted(v.field for v in err.violations) == ["priority", "title"]


def test_a_missing_optional_argument_stays_missing() -> None:
    assert allowed("create_todo", '{"taskTitle": "Buy milk"}').arguments == {"title": "Buy milk"}


@pytest.mark.parametrize(
    "text",
    [
        '{"taskTitle": "a", "title": "b"}',
        '{"title": "b", "taskTitle": "a"}',
        '{"title": "b", "deadline": "x", "dueAt": "y"}',
    ],
)
def test_an_alias_and_its_target_both_given(text: str) -> None:
    err = raises(InvalidArgument, "ARGS_INVALID", grpc.StatusCode.INVALID_ARGUMENT, authorize, "create_todo", text)
    assert len(err.violations) == 1
    assert err.violations[0].field in ("title", "dueAt")
    assert "given twice" in err.violations[0].description


# -- 5. a write runs only with a claimed confirmation -----------------------------------------


@pytest.mark.parametrize("phase", [Phase.EXECUTE])
def test_write_without_claim_needs_confirmation(phase: Phase) -> None:
    raises(
        FailedPrecondition,
        "TOOL_CONFIRMATION_REQUIRED",
        grpc.StatusCode.FAILED_PRECONDITION,
        authorize,
        "create_todo",
        '{"title": "x"}',
        phase=phase,
    )
    assert allowed("create_todo", '{"title": "x"}', phase=phase, claimed=True).arguments == {"title": "x"}


def test_a_write_executed_by_a_caller_that_says_nothing_of_a_claim_needs_confirmation() -> None:
    """The safe default: a caller that forgets to say whether it holds a claim is one that does not."""
    with pytest.raises(FailedPrecondition) as info:
        policy.authorize(REGISTRY, ctx(), "create_todo", '{"title": "x"}', Phase.EXECUTE)
    assert info.value.reason == "TOOL_CONFIRMATION_REQUIRED"
    assert isinstance(policy.authorize(REGISTRY, ctx(), "list_todos", "{}", Phase.EXECUTE), Allowed)


def test_reads_and_prepares_need_no_claim() -> None:
    allowed("list_todos", "{}", phase=Phase.EXECUTE)
    # COMPENSATE proposes the inverse as a card (issue 13, item 7): it runs only when that card is confirmed
    for phase in (Phase.INVOKE, Phase.CONFIRM, Phase.RECONCILE, Phase.COMPENSATE):
        allowed("create_todo", '{"title": "x"}', phase=phase)


# -- 6. the session's mode --------------------------------------------------------------------


def test_read_only_session_admits_reads_only() -> None:
    context = ctx(session_mode=common_pb2.SESSION_MODE_READ_ONLY)
    allowed("list_todos", "{}", context=context)
    err = raises(
        PermissionDenied,
        "SESSION_MODE_FORBIDS",
        grpc.StatusCode.PERMISSION_DENIED,
        authorize,
        "create_todo",
        '{"title": "x"}',
        context=context,
    )
    assert "SESSION_MODE_READ_ONLY" in err.message
    raises(PermissionDenied, "SESSION_MODE_FORBIDS", grpc.StatusCode.PERMISSION_DENIED, policy.may_write_now, context)


def test_chat_only_session_admits_nothing() -> None:
    context = ctx(session_mode=common_pb2.SESSION_MODE_CHAT_ONLY)
    for tool, args in (("list_todos", "{}"), ("create_todo", '{"title": "x"}')):
        raises(
            PermissionDenied,
            "SESSION_MODE_FORBIDS",
            grpc.StatusCode.PERMISSION_DENIED,
            authorize,
            tool,
            args,
            context=context,
        )


def test_auto_and_unspecified_sessions_admit_writes() -> None:
    for mode in (common_pb2.SESSION_MODE_AUTO, common_pb2.SESSION_MODE_UNSPECIFIED):
        allowed("create_todo", '{"title": "x"}', context=ctx(session_mode=mode))
        policy.may_write_now(ctx(session_mode=mode))


# -- the context ids --------------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["tenant_id", "actor_id", "subject_id", "session_id"])
def test_missing_context_ids(missing: str) -> None:
    err = raises(
        InvalidArgument,
        "REQUEST_INVALID",
        grpc.StatusCode.INVALID_ARGUMENT,
        authorize,
        "list_todos",
        "{}",
        context=ctx(**{missing: ""}),
    )
    assert [v.field for v in err.violations] == [f"context.{missing}"]


def test_missing_context_ids_are_checked_before_the_tool() -> None:
    err = raises(
        InvalidArgument,
        "REQUEST_INVALID",
        grpc.StatusCode.INVALID_ARGUMENT,
        authorize,
        "no_such_tool",
        "{}",
        context=common_pb2.CallContext(),
    )
    assert [v.field for v in err.violations] == [
        "context.tenant_id",
        "context.actor_id",
        "context.subject_id",
        "context.session_id",
    ]


# -- strict JSON decoding ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('{"title": "a", "title": "b"}', id="duplicate-key"),
        pytest.param('{"title": "a", "meta": {"k": 1, "k": 2}}', id="duplicate-nested-key"),
        pytest.param('{"title": "a", "priority": NaN}', id="nan"),
        pytest.param('{"title": "a", "priority": Infinity}', id="infinity"),
        pytest.param('{"title": "a", "priority": -Infinity}', id="minus-infinity"),
        pytest.param("[]", id="list"),
        pytest.param('"title"', id="string"),
        pytest.param("null", id="null"),
        pytest.param("42", id="number"),
        pytest.param("true", id="bool"),
        pytest.param('{"title": "a", "x": ' + "[" * 100 + "]" * 100 + "}", id="100-nested-lists"),
        pytest.param('{"x": ' + '{"x": ' * 40 + "1" + "}" * 40 + "}", id="40-nested-objects"),
        pytest.param("{" + '"a":' * 1 + "[" * 30000 + "]" * 30000 + "}", id="30000-nested-lists"),
        pytest.param('{"title": "' + "a" * policy.MAX_ARGUMENTS_BYTES + '"}', id="too-large"),
        pytest.param("{", id="truncated"),
        pytest.param('{"title": }', id="no-value"),
        pytest.param('{"title": "a",}', id="trailing-comma"),
        pytest.param("{'title': 'a'}", id="single-quotes"),
        pytest.param('{"title": "a"} x', id="trailing-garbage"),
        pytest.param("\x00", id="nul"),
    ],
)
def test_strict_json_is_args_invalid(text: str) -> None:
    err = raises(InvalidArgument, "ARGS_INVALID", grpc.StatusCode.INVALID_ARGUMENT, authorize, "create_todo", text)
    assert [v.field for v in err.violations] == ["arguments_json"]
    assert err.violations[0].description == err.message


def test_an_overflowing_float_is_args_invalid() -> None:
    # 1e400 decodes to inf (parse_constant is not called for it); the schema or JCS refuses it
    raises(
        InvalidArgument,
        "ARGS_INVALID",
        grpc.StatusCode.INVALID_ARGUMENT,
        authorize,
        "create_todo",
        '{"title": "a", "priority": 1e400}',
    )
    raises(
        InvalidArgument,
        "ARGS_INVALID",
        grpc.StatusCode.INVALID_ARGUMENT,
        authorize,
        "write_note",
        '{"count": 1e400}',
        reg=NESTED,
    )


def test_exactly_at_the_depth_limit_is_accepted() -> None:
    inner: Any = 1
    for _ in range(policy.MAX_DEPTH - 1):
        inner = [inner]
    assert policy.decode_arguments(json.dumps({"x": inner[0]}))
    with pytest.raises(InvalidArgument):
        policy.decode_arguments(json.dumps({"x": inner}))


def test_empty_or_absent_arguments_are_an_empty_object() -> None:
    assert policy.decode_arguments("") == {}
    assert policy.decode_arguments(None) == {}
    assert allowed("list_todos", "").arguments == {}
    assert allowed("list_todos", None).arguments == {}


@pytest.mark.parametrize("value", [2**53 + 1, 2**70, -(2**53) - 1, -(2**70)])
def test_integers_beyond_2_pow_53_are_args_invalid(value: int) -> None:
    text = json.dumps({"id": "t1", "status": "done", "version": value})
    raises(InvalidArgument, "ARGS_INVALID", grpc.StatusCode.INVALID_ARGUMENT, authorize, "set_todo_status", text)
    raises(
        InvalidArgument,
        "ARGS_INVALID",
        grpc.StatusCode.INVALID_ARGUMENT,
        authorize,
        "write_note",
        json.dumps({"count": value}),
        reg=NESTED,
    )


def test_safe_integers_are_accepted() -> None:
    out = allowed("set_todo_status", json.dumps({"id": "t1", "status": "done", "version": 2**53 - 1}))
    assert out.arguments["version"] == 2**53 - 1


def test_the_size_limit_counts_bytes() -> None:
    text = json.dumps({"note": "€" * 30000}, ensure_ascii=False)
    assert len(text.encode("utf-8")) > policy.MAX_ARGUMENTS_BYTES
    raises(InvalidArgument, "ARGS_INVALID", grpc.StatusCode.INVALID_ARGUMENT, authorize, "write_note", text, reg=NESTED)


def test_a_lone_surrogate_in_a_key_is_args_invalid() -> None:
    raises(
        InvalidArgument,
        "ARGS_INVALID",
        grpc.StatusCode.INVALID_ARGUMENT,
        authorize,
        "create_todo",
        '{"title": "x", "\\ud800": 1}',
    )


@pytest.mark.parametrize("text", ['{"title": "\\ud800"}', '{"title": "x\\udfff"}'])
def test_a_lone_surrogate_in_a_value_is_args_invalid(text: str) -> None:
    raises(InvalidArgument, "ARGS_INVALID", grpc.StatusCode.INVALID_ARGUMENT, authorize, "create_todo", text)


def test_a_literal_lone_surrogate_is_args_invalid_though_no_escape_names_it() -> None:
    # a str from another front door (not a protobuf string) may hold one as it is; only ASCII text without a \\u
    # escape skips the surrogate check
    text = '{"title": "x' + chr(0xD800) + '"}'
    assert "\\u" not in text
    with pytest.raises(InvalidArgument, match="lone UTF-16 surrogate"):
        policy.decode_arguments(text)


def test_a_byte_order_mark_is_refused_in_json_loads_words() -> None:
    with pytest.raises(InvalidArgument, match="BOM"):
        policy.decode_arguments('\ufeff{"title": "x"}')


@pytest.mark.parametrize(
    "text",
    ['{"status": "done"}', '{"a": {"b": [1, 2.5, true, null]}}', '{"t": "\\u00e9\\n"}', '{"t": "é"}', " {} ", ""],
)
def test_arguments_decode_as_json_loads_decodes_them(text: str) -> None:
    assert policy.decode_arguments(text) == json.loads(text or "{}")


# -- normalisation never invents a value (docs/design.md §5, required) --------------------------------


def _sample(schema: Mapping[str, Any]) -> Any:
    """A value that the (sub)schema accepts, for the simple schemas of a registry."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "string":
        return "x" * max(1, int(schema.get("minLength", 1)))
    if kind == "integer":
        return int(schema.get("minimum", 1))
    if kind == "number":
        return float(schema.get("minimum", 1))
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return {k: _sample(sub) for k, sub in schema.get("properties", {}).items() if k in schema.get("required", [])}
    return None


ALL_TOOLS = [
    pytest.param(reg, name, id=f"{label}:{name}")
    for label, reg in (("example", REGISTRY), ("fixture", FIXTURE_REGISTRY), ("nested", NESTED))
    for name in reg.tools
]


def _check_normalised(tool: Tool, given: dict[str, Any]) -> dict[str, Any] | None:
    try:
        out = policy.normalise(tool, given)
    except InvalidArgument as exc:
        assert exc.reason == "ARGS_INVALID"
        return None
    expected_keys = {tool.aliases.get(k, k) for k in given}
    assert set(out) <= expected_keys, f"normalisation invented {set(out) - expected_keys}"
    assert set(out) == expected_keys
    for key, value in given.items():
        assert out[tool.aliases.get(key, key)] == value
    assert policy.validate(tool, out) == []
    # the same again from the JSON text a model sends
    assert policy.normalise(tool, json.dumps(given)) == out
    return out


@pytest.mark.parametrize(("reg", "name"), ALL_TOOLS)
def test_normalisation_of_nothing_invents_nothing(reg: Registry, name: str) -> None:
    tool = reg.tools[name]
    out = _check_normalised(tool, {})
    if out is not None:
        assert out == {}
    else:
        assert tool.schema.get("required"), "only a tool with required arguments may refuse {}"


@pytest.mark.parametrize(("reg", "name"), ALL_TOOLS)
def test_normalisation_of_every_alias(reg: Registry, name: str) -> None:
    tool = reg.tools[name]
    props = tool.schema.get("properties", {})
    given = {alias: _sample(props[target]) for alias, target in tool.aliases.items()}
    _check_normalised(tool, given)
    # the aliases plus every required property they do not already provide: must pass
    provided = set(tool.aliases.values())
    full = dict(given)
    full.update({k: _sample(props[k]) for k in tool.schema.get("required", []) if k not in provided})
    out = _check_normalised(tool, full)
    assert out is not None, f"{name}: aliases with schema-valid values were refused"
    # each alias alone, with the required properties
    for alias, target in tool.aliases.items():
        one = {k: _sample(props[k]) for k in tool.schema.get("required", []) if k != target}
        one[alias] = _sample(props[target])
        assert _check_normalised(tool, one) is not None


@pytest.mark.parametrize(("reg", "name"), ALL_TOOLS)
def test_normalisation_of_every_property(reg: Registry, name: str) -> None:
    tool = reg.tools[name]
    given = {k: _sample(sub) for k, sub in tool.schema.get("properties", {}).items()}
    assert _check_normalised(tool, given) is not None


# -- property: nothing but a CountersignError ever escapes ------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
_keys = st.sampled_from(["title", "taskTitle", "dueAt", "deadline", "priority", "importance"]) | st.text(max_size=8)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_keys, _json_values, max_size=6))
def test_arbitrary_json_objects_only_raise_countersign_errors(obj: dict[str, Any]) -> None:
    text = json.dumps(obj)
    try:
        out = policy.authorize(REGISTRY, ctx(), "create_todo", text, Phase.INVOKE)
    except CountersignError as exc:
        assert exc.reason
        assert exc.reason == "ARGS_INVALID"
        return
    assert isinstance(out, Allowed)
    assert policy.validate(out.tool, out.arguments) == []
    assert set(out.arguments) <= {"title", "dueAt", "priority"}


# -- the context's ids: present, bounded, printable (they travel on to the downstream as headers) ---------------


def test_two_aliases_each_given_with_its_target_are_both_named() -> None:
    err = raises(
        InvalidArgument,
        "ARGS_INVALID",
        grpc.StatusCode.INVALID_ARGUMENT,
        authorize,
        "create_todo",
        '{"taskTitle": "a", "title": "b", "deadline": "x", "dueAt": "y"}',
    )
    assert sorted(v.field for v in err.violations) == ["dueAt", "title"]
    assert err.message.startswith("arguments of 'create_todo' do not match its schema: ")
    assert "title: given twice (as 'title' and an alias)" in err.message


@pytest.mark.parametrize("field", ["tenant_id", "actor_id", "session_id", "request_id", "role", "locale"])
def test_a_context_id_is_at_most_256_bytes_of_printable_text(field: str) -> None:
    """At the limit, in characters and in bytes, it passes; one over, or a control character, is refused naming
    the field (at Invoke and wherever an action is named by id: policy.check_context)."""
    same = {"actor_id": ("actor_id", "subject_id")}.get(field, (field,))  # acting for oneself

    def with_value(value: str) -> common_pb2.CallContext:
        return ctx(**dict.fromkeys(same, value))

    for fits in ("x" * 256, "é" * 128, "用户" * 42 + "ab"):
        policy.check_context(with_value(fits))
    for value in ("x" * 257, "é" * 129, "a\nb", "tab\there", "\x00"):
        with pytest.raises(InvalidArgument) as info:
            policy.check_context(with_value(value))
        err = info.value
        assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_INVALID")
        assert err.message == f"context.{same[0]} must be at most 256 bytes of printable text"
        assert [(v.field, v.description) for v in err.violations] == [
            (f"context.{f}", "at most 256 bytes, no control characters") for f in same
        ]


def test_a_missing_context_id_is_named_required() -> None:
    with pytest.raises(InvalidArgument) as info:
        policy.check_context(ctx(tenant_id="", session_id=""))
    assert info.value.message == "context is missing tenant_id, session_id"
    assert [(v.field, v.description) for v in info.value.violations] == [
        ("context.tenant_id", "required"),
        ("context.session_id", "required"),
    ]


def test_a_read_only_admin_may_not_prepare_a_write_and_is_told_so() -> None:
    context = ctx(subject_id="u2", role="admin", admin_context_id="t1:adm1", admin_mode=common_pb2.ADMIN_MODE_READONLY)
    err = raises(
        PermissionDenied,
        "ADMIN_READONLY",
        grpc.StatusCode.PERMISSION_DENIED,
        authorize,
        "create_todo",
        '{"title": "x"}',
        context=context,
    )
    assert err.message == "a read-only admin context may not prepare or run a write"


def test_an_incomplete_admin_context_is_told_which_rule_it_broke() -> None:
    err = raises(
        PermissionDenied,
        "CONTEXT_MISMATCH",
        grpc.StatusCode.PERMISSION_DENIED,
        authorize,
        "list_todos",
        "{}",
        context=ctx(subject_id="u2", admin_mode=common_pb2.ADMIN_MODE_MAINTAIN),
    )
    assert err.message.startswith("the context was refused (admin_context): ") and len(err.message) > 42


def test_a_reloaded_registry_checks_the_path_of_its_own_url_templates(tmp_path: Path) -> None:
    """The path arguments of a tool are found once per loaded tool: a registry reloaded with a template that now
    puts ``id`` in the path refuses a dot segment there, and the old one's tool (``id`` in the query) still takes
    it."""
    text = (ROOT / "examples" / "registry.yaml").read_text()
    query = text.replace('"http://127.0.0.1:8081/todos/{id}/status"', '"http://127.0.0.1:8081/todos/status?id={id}"')
    assert query != text
    (tmp_path / "query.yaml").write_text(query)
    before = registry.load(str(tmp_path / "query.yaml")).tools["set_todo_status"]
    after = REGISTRY.tools["set_todo_status"]
    arguments = {"id": "..", "status": "done"}
    for _ in range(2):
        assert policy.validate(before, arguments) == []
        assert [p.field for p in policy.validate(after, arguments)] == ["id"]
