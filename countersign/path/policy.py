"""The one policy function (docs/design.md §5), used by every entry: Invoke, Confirm, Compensate, Reconcile.

Order of checks, each with its status and reason:

1. tool exists                         NOT_FOUND          TOOL_NOT_FOUND
   (a planned/forbidden capability is not an error: ``resolve`` returns its Refusal)
2. actor/subject boundary              PERMISSION_DENIED  SUBJECT_NOT_ALLOWED / ADMIN_READONLY
3. role allowed                        PERMISSION_DENIED  ROLE_NOT_ALLOWED
4. aliases, then the closed schema     INVALID_ARGUMENT   ARGS_INVALID (+ field violations);
   and no value bound into a URL path may change its shape (empty, ".", "..", "/", "\\")
5. write executed without a claim      FAILED_PRECONDITION TOOL_CONFIRMATION_REQUIRED
6. the session's mode                  PERMISSION_DENIED  SESSION_MODE_FORBIDS
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

import jsonschema_rs

from countersign.approvals import ApprovalError, ContextFields, ContextInvalid, ContextMode, merge_context
from countersign.canonical import canonical
from countersign.errors import (
    CountersignError,
    FailedPrecondition,
    FieldViolation,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unauthenticated,
)
from countersign.reasons import Reason
from countersign.registry import Capability, Registry, Tool
from countersign.registry.templates import ACTION_FIELDS, path_fields, path_problem, text_of
from countersign.v1 import common_pb2

MAX_ARGUMENTS_BYTES = 64 * 1024
MAX_DEPTH = 32
_ID_FIELDS = ("tenant_id", "actor_id", "subject_id", "session_id")
_TEXT_FIELDS = (*_ID_FIELDS, "request_id", "role", "admin_context_id", "locale")
MAX_ID_BYTES = 256
_NO_ADMIN = (common_pb2.ADMIN_MODE_UNSPECIFIED, common_pb2.ADMIN_MODE_NONE)


class Phase(enum.Enum):
    INVOKE = "invoke"  # a read runs now; a write is prepared into a card
    CONFIRM = "confirm"  # may this context write now? (checked before the claim)
    EXECUTE = "execute"  # a write runs: only with a claimed confirmation
    COMPENSATE = "compensate"  # the inverse is proposed as a card, like a write at INVOKE
    RECONCILE = "reconcile"


class Allowed(NamedTuple):
    tool: Tool
    arguments: dict[str, Any]  # normalised and validated
    canonical_args: bytes  # RFC 8785 bytes of ``arguments`` (b"" when they are a sealed card's: _FROM_A_CARD)


# phases whose arguments are a sealed card's: canonical when the card was sealed (cards.seal encodes them), so their
# bytes are not encoded again (nothing at these phases hashes them; RFC 8785 was ~30k instructions of a Confirm)
_FROM_A_CARD = frozenset({Phase.EXECUTE, Phase.RECONCILE})


def resolve(registry: Registry, name: str) -> Tool | Capability:
    """The tool a model named, or the planned/forbidden capability that refuses it."""
    tool = registry.tools.get(name)
    if tool is not None:
        cap = registry.capabilities.get(tool.capability)
        if cap is not None and cap.status != "enabled":
            return cap
        return tool
    refusal = registry.refusals.get(name)
    if refusal is not None:
        return refusal
    raise NotFound(Reason.TOOL_NOT_FOUND, f"no tool named {cut(name)!r} is registered", metadata={"tool": name[:64]})


def check_context(context: common_pb2.CallContext) -> None:
    """The ids every call must carry: present, at most 256 bytes, no control characters (they travel
    on to the downstream as headers); and an admin context only where it is honoured (role admin, its own
    tenant: CONTEXT_MISMATCH otherwise, in every --verified-context mode)."""
    values = [getattr(context, f) for f in _TEXT_FIELDS]
    joined = "".join(values)
    # the common case in one look (ASCII: its bytes are its characters), else each field is named
    if not (all(values[:4]) and joined.isascii() and joined.isprintable() and max(map(len, values)) <= MAX_ID_BYTES):
        _context_problems(context)
    if context.admin_context_id or context.admin_mode not in _NO_ADMIN:
        try:  # an admin context only with role admin, only inside its own tenant (docs/design.md §12)
            merge_context(ContextFields.from_proto(context), None, ContextMode.OFF)
        except ApprovalError as exc:
            raise context_error(exc) from exc


def _context_problems(context: common_pb2.CallContext) -> None:
    """INVALID_ARGUMENT naming every missing or malformed id field (check_context's slow path)."""
    missing = [f for f in _ID_FIELDS if not getattr(context, f)]
    if missing:
        raise InvalidArgument(
            Reason.REQUEST_INVALID,
            f"context is missing {', '.join(missing)}",
            violations=tuple(FieldViolation(f"context.{f}", "required") for f in missing),
        )
    bad = [f for f in _TEXT_FIELDS if not _id_ok(getattr(context, f))]
    if bad:
        raise InvalidArgument(
            Reason.REQUEST_INVALID,
            f"context.{bad[0]} must be at most {MAX_ID_BYTES} bytes of printable text",
            violations=tuple(
                FieldViolation(f"context.{f}", f"at most {MAX_ID_BYTES} bytes, no control characters") for f in bad
            ),
        )


def context_error(exc: ApprovalError) -> CountersignError:
    """A refused context: UNAUTHENTICATED CONTEXT_INVALID (no, or no valid, assertion), else PERMISSION_DENIED
    CONTEXT_MISMATCH; ErrorInfo metadata ``check`` names the field or rule."""
    metadata = {"check": exc.check}
    if isinstance(exc, ContextInvalid):
        return Unauthenticated(
            Reason.CONTEXT_INVALID, f"the context assertion was refused ({exc.check}): {exc.message}", metadata=metadata
        )
    return PermissionDenied(
        Reason.CONTEXT_MISMATCH, f"the context was refused ({exc.check}): {exc.message}", metadata=metadata
    )


def _id_ok(value: str) -> bool:
    return (
        len(value) <= MAX_ID_BYTES
        and len(value.encode("utf-8", "surrogatepass")) <= MAX_ID_BYTES
        and value.isprintable()
    )


def cut(value: str, limit: int = 64) -> str:
    """A caller's value as it may appear in an error message: short."""
    return value if len(value) <= limit else value[:limit] + "…"


def may_write_now(context: common_pb2.CallContext) -> None:
    """Steps 2 and 6 for a write: who acts for whom, the admin mode, the session's mode."""
    _boundary(context, is_write=True)
    _session_mode(context, is_write=True)


def authorize(
    registry: Registry,
    context: common_pb2.CallContext,
    tool_name: str,
    arguments: Mapping[str, Any] | str | None,
    phase: Phase,
    *,
    claimed: bool = False,
    context_checked: bool = False,
) -> Allowed | Capability:
    """Run every policy step for one call; return what may proceed, or the capability's refusal.
    ``context_checked``: this call's context passed check_context already (the claim's), and is not checked again."""
    if not context_checked:
        check_context(context)
    found = resolve(registry, tool_name)
    if isinstance(found, Capability):
        return found
    tool = found
    _boundary(context, tool.is_write)
    if context.role not in tool.roles:
        raise PermissionDenied(Reason.ROLE_NOT_ALLOWED, f"role {cut(context.role)!r} may not use {tool.name!r}")
    args, canonical_args = _normalise(tool, arguments, encode=phase not in _FROM_A_CARD)
    if tool.is_write and phase is Phase.EXECUTE and not claimed:
        raise FailedPrecondition(
            Reason.TOOL_CONFIRMATION_REQUIRED, f"{tool.name!r} writes; it runs only after a claimed confirmation"
        )
    _session_mode(context, tool.is_write)
    return Allowed(tool, args, canonical_args)


def normalise(tool: Tool, arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
    """Decode, rename aliases, validate against the closed schema; never invent a value."""
    return _normalise(tool, arguments)[0]


def _normalise(
    tool: Tool, arguments: Mapping[str, Any] | str | None, *, encode: bool = True
) -> tuple[dict[str, Any], bytes]:
    """normalise, and the RFC 8785 bytes of its result (computed once: every hash uses them; b"" unless
    ``encode``)."""
    raw = decode_arguments(arguments) if isinstance(arguments, str) or arguments is None else dict(arguments)
    out: dict[str, Any] = {}
    problems: list[FieldViolation] = []
    for key, value in raw.items():
        target = tool.aliases.get(key, key)
        if target in out:
            problems.append(FieldViolation(cut(target), f"given twice (as {cut(target)!r} and an alias)"))
            continue
        out[target] = value
    if not problems:
        problems = validate(tool, out)
    if problems:
        raise InvalidArgument(
            Reason.ARGS_INVALID,
            f"arguments of {tool.name!r} do not match its schema: "
            + "; ".join(f"{p.field or '(root)'}: {p.description}" for p in problems[:5]),
            violations=tuple(problems[:20]),
        )
    if not encode:
        return out, b""
    try:
        return out, canonical(out)
    except ValueError as exc:
        raise InvalidArgument(
            Reason.ARGS_INVALID, f"arguments are not canonical JSON: {exc}", violations=(FieldViolation("", str(exc)),)
        ) from exc


def validate(tool: Tool, arguments: Mapping[str, Any]) -> list[FieldViolation]:
    """Closed-schema validation, then the URL paths; one violation per problem, named by its JSON path."""
    problems = [] if tool.validator.is_valid(arguments) else _schema_violations(tool, arguments)
    for name in _path_arguments(tool):
        problem = path_problem(text_of(arguments.get(name)))
        if problem:
            problems.append(FieldViolation(cut(name), problem))
    return problems


def _schema_violations(tool: Tool, arguments: Mapping[str, Any]) -> list[FieldViolation]:
    violations = []
    for err in tool.validator.iter_errors(arguments):
        path = [str(p) for p in err.instance_path]
        kind = err.kind
        # name the property itself, not the object holding it: the one that is missing, or each unexpected one
        if isinstance(kind, jsonschema_rs.ValidationErrorKind.Required):
            violations.append(FieldViolation(".".join([*path, str(kind.property)]), err.message[:300]))
        elif isinstance(kind, jsonschema_rs.ValidationErrorKind.AdditionalProperties):
            violations += [
                FieldViolation(
                    ".".join([*path, str(name)]),
                    f"additional properties are not allowed ({str(name)[:64]!r} was unexpected)",
                )
                for name in kind.unexpected
            ]
        else:
            violations.append(FieldViolation(".".join(path), err.message[:300]))
    return violations


# _path_arguments of each tool in use, by id, with the tool itself (held: its id names no other while kept)
_PATH_ARGUMENTS: dict[int, tuple[Tool, tuple[str, ...]]] = {}


def _path_arguments(tool: Tool) -> tuple[str, ...]:
    """The arguments a tool's URL templates bind into a path segment, sorted (so no card ever holds a value there
    that would send ``DELETE /todos/..``; the adapter refuses to send one too). Found once per tool (a Tool is
    frozen; its templates do not change): ~11k instructions of every validate."""
    kept = _PATH_ARGUMENTS.get(id(tool))
    if kept is not None and kept[0] is tool:
        return kept[1]
    calls = (tool.adapter.execute, tool.adapter.prepare, tool.adapter.lookup, tool.adapter.fence)
    names = tuple(sorted(frozenset().union(*(path_fields(c.url) for c in calls if c is not None)) - ACTION_FIELDS))
    if len(_PATH_ARGUMENTS) >= 1024:  # registries reloaded many times: the tools of the old ones let go
        _PATH_ARGUMENTS.clear()
    _PATH_ARGUMENTS[id(tool)] = (tool, names)
    return names


def decode_arguments(text: str | None) -> dict[str, Any]:
    """Strict JSON: an object, no duplicate keys, no NaN/Infinity, bounded size and depth."""
    text = text or "{}"
    if len(text) > MAX_ARGUMENTS_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_ARGUMENTS_BYTES:
        raise _bad(f"arguments_json is larger than {MAX_ARGUMENTS_BYTES} bytes")
    try:
        # json.loads's own answer to a BOM (its words), else the decoder it would build, made once
        value = json.loads(text) if text[:1] == "\ufeff" else _STRICT.decode(text)
    except RecursionError as exc:
        raise _bad("arguments_json is nested too deeply") from exc
    except ValueError as exc:
        raise _bad(f"arguments_json is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise _bad("arguments_json must be a JSON object")
    if _depth(value) > MAX_DEPTH:
        raise _bad(f"arguments_json is nested deeper than {MAX_DEPTH}")
    if text.isascii() and "\\u" not in text:
        return value  # no escape and no character beyond ASCII: no string in it can hold a lone surrogate
    try:  # a lone surrogate (\\ud800) decodes to a str that is not Unicode text
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _bad("arguments_json holds a lone UTF-16 surrogate") from exc
    return value


def _boundary(context: common_pb2.CallContext, is_write: bool) -> None:
    mode = context.admin_mode
    admin = bool(context.admin_context_id) and mode in (common_pb2.ADMIN_MODE_READONLY, common_pb2.ADMIN_MODE_MAINTAIN)
    if context.actor_id != context.subject_id and not admin:
        raise PermissionDenied(Reason.SUBJECT_NOT_ALLOWED, "acting for another subject needs an admin context")
    if is_write and mode == common_pb2.ADMIN_MODE_READONLY:
        raise PermissionDenied(Reason.ADMIN_READONLY, "a read-only admin context may not prepare or run a write")


def _session_mode(context: common_pb2.CallContext, is_write: bool) -> None:
    mode = context.session_mode
    if mode == common_pb2.SESSION_MODE_CHAT_ONLY or (mode == common_pb2.SESSION_MODE_READ_ONLY and is_write):
        name = common_pb2.SessionMode.Name(mode)
        raise PermissionDenied(Reason.SESSION_MODE_FORBIDS, f"the session is {name}; this tool is not admitted")


def _bad(message: str) -> InvalidArgument:
    return InvalidArgument(Reason.ARGS_INVALID, message, violations=(FieldViolation("arguments_json", message),))


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {cut(key)!r}")
        out[key] = value
    return out


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# json.loads with these hooks builds this decoder on every call (~5 µs of a read's ~20 µs policy): made once
_STRICT = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_no_constant, parse_float=_finite)


def _depth(value: Any, level: int = 1) -> int:
    if level > MAX_DEPTH:
        return level
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level)
    return level
