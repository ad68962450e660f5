"""The registry's types: one frozen snapshot of capabilities and tools (docs/design.md §4)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("enabled", "planned", "forbidden")
RISKS = ("low", "medium", "high", "irreversible")
CONFIRMATIONS = ("default", "always", "none")
SCOPES = ("request", "session", "none")
APPROVALS = ("none", "signed")  # what Confirm needs besides the token (docs/design.md §12)
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
VERBS = frozenset({"create", "delete", "add", "save", "update", "complete", "send"})


@dataclass(frozen=True)
class Capability:
    id: str
    status: str
    tool: str
    risk: str = ""
    confirmation: str = ""
    guidance: Mapping[str, str] = field(default_factory=dict)
    approval: str = ""  # none | signed, or "" (not declared: the tool's, else the default)

    def guidance_for(self, locale: str) -> str:
        """Guidance in the caller's locale: exact tag, then its language, then en, then any."""
        g = self.guidance
        key = locale_key(g, locale)
        return g[key] if key is not None else g.get("en") or next(iter(g.values()), "")


def locale_key(options: Mapping[str, Any], locale: str) -> str | None:
    """The key of ``options`` (locale tag -> text) for the caller's locale: the exact tag, then its language, then
    another tag of that language; None when none fits (the caller picks its own default)."""
    lang = locale.split("-")[0].lower() if locale else ""
    for key in (locale, lang):
        if key and key in options:
            return key
    for key in options:
        if lang and key.split("-")[0].lower() == lang:  # language subtags are case-insensitive (BCP 47)
            return key
    return None


@dataclass(frozen=True)
class HttpCall:
    method: str
    url: str


@dataclass(frozen=True)
class AdapterSpec:
    kind: str  # http | grpc | mcp
    execute: HttpCall | None = None
    lookup: HttpCall | None = None
    fence: HttpCall | None = None
    prepare: HttpCall | None = None
    target: str = ""  # grpc: host:port or unix:/path; mcp: the server's Streamable HTTP endpoint URL
    grpc_prepare: bool = False
    grpc_lookup: bool = False
    grpc_fence: bool = False
    mcp_tool: str = ""  # mcp: the server's tool the execute calls
    mcp_lookup: str = ""  # mcp: its read tool that finds the effect of an idempotency key
    mcp_fence: bool = False  # mcp: that lookup tool also fences (``fence: true``)
    mcp_prepare: str = ""  # mcp: its tool that prepares the arguments
    timeout_ms: int = 0  # 0: the sidecar's downstream deadline
    tls: bool = False  # grpc: a TLS channel (--downstream-ca, --downstream-cert); http: the URL's scheme says

    @property
    def can_fence(self) -> bool:
        """A lookup that marks an absent key never-to-be-applied: the only proof of "not applied"."""
        return self.fence is not None or self.grpc_fence or self.mcp_fence

    @property
    def can_lookup(self) -> bool:
        return self.can_fence or self.lookup is not None or self.grpc_lookup or bool(self.mcp_lookup)


@dataclass(frozen=True)
class ReceiptSpec:
    resource_id: str = "id"
    resource_version: str = "version"
    summary: str = ""
    # the fields the registry names (resource_id, resource_version): a 2xx without one is RECEIPT_INVALID
    declared: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Compensation:
    tool: str
    args: Mapping[str, str]


@dataclass(frozen=True)
class Tool:
    name: str
    capability: str
    is_write: bool
    risk: str
    confirmation: str
    roles: frozenset[str]
    intent_scope: str
    aliases: Mapping[str, str]
    schema: Mapping[str, Any]
    validator: Any = field(repr=False, compare=False)
    preview: Mapping[str, Any]
    adapter: AdapterSpec
    receipt: ReceiptSpec
    compensation: Compensation | None
    verbs: frozenset[str] = frozenset()  # what a success claim about this tool may say (reply guard)
    approval: str = "none"  # signed: Confirm must carry the user's approval (docs/design.md §12)


@dataclass(frozen=True)
class Registry:
    """One immutable snapshot; a request uses the snapshot it started with."""

    path: str
    policy_version: str
    capabilities: Mapping[str, Capability]
    tools: Mapping[str, Tool]
    refusals: Mapping[str, Capability]  # tool name or capability id -> planned/forbidden
    denied_by_role: Mapping[str, str]  # role -> ",tool,tool," write tools the role may not run
    all_writes: str  # ",tool,tool," every registered write tool
    signed_writes: str = ",,"  # ",tool,tool," the write tools whose Confirm needs a signed approval

    def denied_tools(self, role: str) -> str:
        """What the claim script refuses for this role, leaving the card READY (docs/design.md §5).

        A tool that is no longer a registered write tool is not in this set: its claim goes
        ahead and the re-check settles it FAILED with POLICY_CHANGED.
        """
        return self.denied_by_role.get(role, self.all_writes)
