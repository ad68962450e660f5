"""The adapter protocol: one downstream call for a prepared action, and the answer classified.

An adapter never decides policy and never retries a write. It reports one of three outcomes
(docs/design.md §8):

    SUCCEEDED   the downstream answered 2xx / OK with every receipt field the tool declares
    FAILED      it answered a refusal (4xx / INVALID_ARGUMENT, FAILED_PRECONDITION, ...; a 412 or ABORTED
                to an If-Match is RESOURCE_VERSION_CONFLICT), or the request was never sent (connection
                refused: reason NOT_SENT, retryable, and the executor gives the card back; a URL or header
                that cannot be sent safely: URL_UNSAFE, RESOURCE_VERSION_INVALID; one the HTTP client
                refuses to build: REQUEST_NOT_BUILDABLE — these fail the same way on every retry)
    UNKNOWN     the request may have landed and no usable answer came back (timeout after send, reset,
                5xx, UNAVAILABLE / DEADLINE_EXCEEDED after send; a redirect; a 2xx answer that is cut,
                oversize, unreadable or lacks a declared receipt field: RECEIPT_INVALID): the claim stays held

A read never holds a claim, so for a read the unusable answers above are FAILED instead
(DOWNSTREAM_REDIRECT, DOWNSTREAM_ANSWER_INVALID).
"""

from __future__ import annotations

import enum
import json
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from countersign.reasons import Reason
from countersign.registry import HttpCall, Tool
from countersign.registry.templates import PLACEHOLDER, path_problem, path_span, safe_url, text_of

UPPER_SNAKE = re.compile(r"^[A-Z][A-Z0-9_]{1,63}$")
MAX_ANSWER_BYTES = 1 << 20  # the largest answer an adapter reads (decoded); beyond it: unusable
ANSWER_HEADROOM = 16 << 10  # what a reply needs besides a downstream's answer (it must fit in one message)
# What an If-Match may carry: a strong entity-tag's characters (RFC 9110 §8.8.3, etagc without obs-text).
_ETAG = re.compile(r"^[\x21\x23-\x7e]{1,256}$")


class Kind(enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"


class Outcome(NamedTuple):
    """What a downstream call came to. Immutable; a NamedTuple rather than a frozen dataclass, whose __init__ sets
    each of its 8 fields through object.__setattr__ (~15k instructions of every downstream call)."""

    kind: Kind
    reason: str = ""
    message: str = ""
    retryable: bool = False
    status: str = ""  # "201", "409", "OK", "FAILED_PRECONDITION", "" when not sent
    body: Any = None  # the downstream's parsed answer
    resource_id: str = ""
    resource_version: str = ""


@dataclass(frozen=True)
class Prepared:
    arguments: dict[str, Any]
    resource_version: str = ""
    preview: Mapping[str, Any] | None = None


class PrepareRefused(Exception):
    """The downstream refused to prepare (its reason is passed on; no card is issued)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


class PrepareUnavailable(Exception):
    """The downstream could not be asked to prepare (refused, timed out, 5xx)."""


class LookupKind(enum.Enum):
    APPLIED = "applied"
    ABSENT_FENCED = "absent_fenced"
    ABSENT_UNFENCED = "absent_unfenced"
    UNREACHABLE = "unreachable"  # no answer (refused, timeout, 5xx): ask again later
    UNREADABLE = "unreadable"  # an answer, but no verdict in it (redirect, cut, lacks the receipt fields)


@dataclass(frozen=True)
class Lookup:
    kind: LookupKind
    outcome: Outcome | None = None  # when APPLIED: the answer the key produced
    message: str = ""


class CallMeta(NamedTuple):
    """What travels with every downstream call besides the arguments. A NamedTuple, as Outcome (a frozen
    dataclass's 9 fields set through object.__setattr__: ~17k instructions of every call)."""

    idempotency_key: str = ""  # the action id for writes; empty for reads
    attempt: int = 1
    policy_version: str = ""
    tenant_id: str = ""
    actor_id: str = ""
    subject_id: str = ""
    locale: str = ""
    if_match: str = ""  # the prepared resource version the write expects to change
    # propagation (traceparent, tracestate): asked for each request as it is sent, so it names the span current
    # then. The caller hands it in (the executor: observability.tracing.outgoing_headers); adapters know no tracing.
    trace_headers: Callable[[], Mapping[str, str]] = dict

    def wire_headers(self) -> dict[str, str]:
        """The headers of the call; raises NotSendable when the If-Match cannot be written safely."""
        out = dict(self.trace_headers())
        if self.idempotency_key:
            out["Idempotency-Key"] = f'"{self.idempotency_key}"'
            out["X-Countersign-Action"] = self.idempotency_key
        if self.if_match:
            out["If-Match"] = entity_tag(self.if_match)
        out["X-Countersign-Attempt"] = str(self.attempt)
        out["X-Countersign-Policy-Version"] = self.policy_version
        for name, value in (("Tenant", self.tenant_id), ("Actor", self.actor_id), ("Subject", self.subject_id)):
            if value:
                out[f"X-Countersign-{name}"] = value
        return out


class Adapter(Protocol):
    async def prepare(self, tool: Tool, arguments: Mapping[str, Any], meta: CallMeta, timeout: float) -> Prepared: ...

    async def execute(self, tool: Tool, arguments: Mapping[str, Any], meta: CallMeta, timeout: float) -> Outcome: ...

    async def lookup(self, tool: Tool, meta: CallMeta, fence: bool, timeout: float) -> Lookup: ...

    async def close(self) -> None: ...


def address(tool: Tool, call: HttpCall | None = None) -> str:
    """Where a tool's downstream is, as callers and logs may see it: the gRPC target, the MCP endpoint, or the HTTP
    call's URL with its {placeholders} unfilled; no query or credentials (never an argument value)."""
    if tool.adapter.kind == "grpc":
        return tool.adapter.target
    if tool.adapter.kind == "mcp":
        return safe_url(tool.adapter.target)
    call = call or tool.adapter.execute
    return safe_url(call.url) if call is not None else ""


class NotSendable(Exception):
    """The call cannot be written safely (a path an argument would reshape, a bad If-Match): nothing is sent."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


def entity_tag(version: str) -> str:
    """A resource version as an If-Match value: quoted, or as given when it is a strong entity-tag already."""
    inner = version[1:-1] if len(version) >= 2 and version[0] == version[-1] == '"' else version
    if not _ETAG.match(inner):
        raise NotSendable(
            Reason.RESOURCE_VERSION_INVALID,
            "the resource version cannot be sent as an If-Match "
            "entity-tag (at most 256 visible ASCII characters, no quote or space)",
        )
    return f'"{inner}"'


def render_url(template: str, values: Mapping[str, Any]) -> str:
    """A URL template filled with percent-encoded values; raises NotSendable when a value bound into the
    path would change its shape (policy refuses such arguments at Invoke; this is the last line)."""
    if "{" not in template:  # nothing to fill (a create's URL): as the substitution below would leave it
        return template
    start, end = path_span(template)

    def one(match: re.Match[str]) -> str:
        text = text_of(values.get(match.group(1)))
        if start <= match.start() < end:
            problem = path_problem(text)
            if problem:
                raise NotSendable(Reason.URL_UNSAFE, f"{{{match.group(1)}}}: {problem}")
        return urllib.parse.quote(text, safe="")

    return PLACEHOLDER.sub(one, template)


def deadline(tool: Tool, default: float) -> float:
    """The tool's own deadline (adapter.timeout_ms) or the sidecar's."""
    return tool.adapter.timeout_ms / 1000 if tool.adapter.timeout_ms else default


def receipt_problem(tool: Tool, body: Any) -> str:
    """Why a write's answer yields no receipt ("" when it does): a declared field is absent, empty or not a
    string or number."""
    return receipt_fields(tool, body)[0]


def receipt_fields(tool: Tool, body: Any) -> tuple[str, str, str]:
    """``(receipt_problem(tool, body), field_of(body, resource_id path), field_of(body, resource_version path))``,
    each field found once (a classification asks for all three of the same answer)."""
    receipt = tool.receipt
    problem, texts = "", []
    for name, path in (("resource_id", receipt.resource_id), ("resource_version", receipt.resource_version)):
        value = _field(body, path)
        usable = (isinstance(value, str) and value) or (isinstance(value, (int, float)) and not isinstance(value, bool))
        if not usable and not problem and name in receipt.declared:
            problem = f"the answer lacks the receipt field {path!r} (a non-empty string or number)"
        elif isinstance(value, str) and not _is_text(value):
            # JSON admits a lone surrogate (\ud800); a receipt is a protobuf string, UTF-8 text: it was an INTERNAL
            # after the write, and the outcome was never recorded. Declared, the receipt is unreadable; else unused
            if not problem and name in receipt.declared:
                problem = f"the receipt field {path!r} holds a lone UTF-16 surrogate: it is not text"
            value = None
        texts.append(_text(value))
    return problem, texts[0], texts[1]


def _is_text(value: str) -> bool:
    """Unicode text: no lone surrogate (what json decodes from an escape such as \\ud800)."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _field(body: Any, path: str) -> Any:
    """A dotted field of a JSON answer (None when absent)."""
    value = body
    for part in path.split("."):
        # a dict first: an ABC's isinstance costs more than the lookup (json.loads gives dicts)
        if not (type(value) is dict or isinstance(value, Mapping)) or part not in value:
            return None
        value = value[part]
    return value


def _text(value: Any) -> str:
    if value is None:
        return ""
    if type(value) is int:  # what json.dumps writes for one, without its set-up (a version: every receipt has one)
        return str(value)
    return value if isinstance(value, str) else json.dumps(value)


def field_of(body: Any, path: str) -> str:
    """A dotted field of a JSON answer as a string ("" when absent)."""
    return _text(_field(body, path))
