"""The adapter protocol: one downstream call for a prepared action, and the answer classified.

An adapter never decides policy and never retries a write. It reports one of three outcomes
(DESIGN §8):

    SUCCEEDED   the downstream answered 2xx / OK
    FAILED      it answered a refusal (4xx / INVALID_ARGUMENT, FAILED_PRECONDITION, ...), or the
                request was never sent (connection refused: reason NOT_SENT, retryable)
    UNKNOWN     the request may have landed and no answer came back (timeout after send, reset,
                5xx, UNAVAILABLE / DEADLINE_EXCEEDED after send): the claim stays held
"""

from __future__ import annotations

import enum
import json
import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from countersign.sidecar.observability import tracing
from countersign.sidecar.registry import PLACEHOLDER, HttpCall, Tool

UPPER_SNAKE = re.compile(r"^[A-Z][A-Z0-9_]{1,63}$")


class Kind(enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Outcome:
    kind: Kind
    reason: str = ""
    message: str = ""
    retryable: bool = False
    status: str = ""                     # "201", "409", "OK", "FAILED_PRECONDITION", "" when not sent
    body: Any = None                     # the downstream's parsed answer
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
    UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class Lookup:
    kind: LookupKind
    outcome: Outcome | None = None       # when APPLIED: the answer the key produced
    message: str = ""


@dataclass(frozen=True)
class CallMeta:
    """What travels with every downstream call besides the arguments."""

    idempotency_key: str = ""            # the action id for writes; empty for reads
    attempt: int = 1
    policy_version: str = ""
    tenant_id: str = ""
    actor_id: str = ""
    subject_id: str = ""
    locale: str = ""
    headers: dict[str, str] = field(default_factory=dict)    # propagation (traceparent, ...)

    def wire_headers(self) -> dict[str, str]:
        out = {**tracing.outgoing_headers(), **self.headers}
        if self.idempotency_key:
            out["Idempotency-Key"] = f'"{self.idempotency_key}"'
            out["X-Countersign-Action"] = self.idempotency_key
        out["X-Countersign-Attempt"] = str(self.attempt)
        out["X-Countersign-Policy-Version"] = self.policy_version
        for name, value in (("Tenant", self.tenant_id), ("Actor", self.actor_id), ("Subject", self.subject_id)):
            if value:
                out[f"X-Countersign-{name}"] = value
        return out


class Adapter(Protocol):
    async def prepare(self, tool: Tool, arguments: Mapping[str, Any], meta: CallMeta,
                      timeout: float) -> Prepared: ...

    async def execute(self, tool: Tool, arguments: Mapping[str, Any], meta: CallMeta,
                      timeout: float) -> Outcome: ...

    async def lookup(self, tool: Tool, meta: CallMeta, fence: bool, timeout: float) -> Lookup: ...

    async def close(self) -> None: ...


def address(tool: Tool, call: HttpCall | None = None) -> str:
    """Where a tool's downstream is, as callers and logs may see it: the gRPC target, or the HTTP call's URL
    with its {placeholders} unfilled and no query or credentials (never an argument value)."""
    if tool.adapter.kind == "grpc":
        return tool.adapter.target
    call = call or tool.adapter.execute
    return tracing.safe_url(call.url) if call is not None else ""


def render(template: str, values: Mapping[str, Any], *, url: bool = False) -> str:
    """Fill ``{name}`` placeholders from values only; URL-escape each value in a URL."""

    def one(match: re.Match[str]) -> str:
        value = values.get(match.group(1))
        if value is None:
            return ""
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        return urllib.parse.quote(text, safe="") if url else text

    return PLACEHOLDER.sub(one, template)


def field_of(body: Any, path: str) -> str:
    """A dotted field of a JSON answer as a string ("" when absent)."""
    value = body
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return ""
        value = value[part]
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)
