"""A tool's registration rules: its keys, capability, risk and confirmation, schema (closed), aliases,
templates, adapter (its downstream calls), receipt, compensation and the verbs a reply may use of it."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

import jsonschema_rs

from countersign.registry.model import (
    APPROVALS,
    CONFIRMATIONS,
    HTTP_METHODS,
    RISKS,
    SCOPES,
    VERBS,
    AdapterSpec,
    Capability,
    Compensation,
    HttpCall,
    ReceiptSpec,
    Tool,
)
from countersign.registry.schema import open_objects
from countersign.registry.templates import ACTION_FIELDS, PLACEHOLDER, RECEIPT_FIELDS

_TOOL_KEYS = {
    "name",
    "capability",
    "is_write",
    "risk",
    "confirmation",
    "roles",
    "intent_scope",
    "aliases",
    "schema",
    "preview",
    "adapter",
    "receipt",
    "compensation",
    "description",
    "verbs",
    "approval",
}
# what an adapter of each kind may say (a key of another kind is a mistake, not a no-op)
_ADAPTER_KEYS = {
    "http": {"kind", "execute", "lookup", "fence", "prepare", "timeout_ms"},
    "grpc": {"kind", "target", "execute", "lookup", "fence", "prepare", "timeout_ms", "tls"},
    "mcp": {"kind", "url", "tool", "lookup", "prepare", "timeout_ms"},
}
_MCP_TOOL = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")  # an MCP tool name (the specification's characters)
_CALL_KEYS = {"method", "url"}
_PREVIEW_KEYS = {"title", "target", "impact", "details", "locales"}
_RECEIPT_KEYS = {"resource_id", "resource_version", "summary"}
_COMP_KEYS = {"tool", "args"}


def check_keys(raw: Mapping[str, Any], allowed: set[str], tool: str, where: str, fail: Any) -> None:
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise fail(tool, "known-keys", f"unknown key(s) {', '.join(map(str, unknown))} in {where}")


def check_preview(preview: Mapping[str, Any], known: set[str], tool: str, where: str, fail: Any) -> None:
    """A preview's keys are known and its templates name only the tool's properties and the action's fields."""
    check_keys(preview, _PREVIEW_KEYS, tool, where, fail)
    for key in ("title", "target", "impact"):
        check_template(str(preview.get(key, "")), known, tool, fail)
    for detail in preview.get("details") or []:
        if not isinstance(detail, dict) or set(detail) != {"label", "value"}:
            raise fail(tool, "known-keys", f"{where} details are {{label, value}} mappings")
        check_template(str(detail["value"]), known, tool, fail)


def tool_from(raw: dict[str, Any], caps: Mapping[str, Capability], fail: Any, *, issuers: bool = False) -> Tool:
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise fail("-", "known-keys", "a tool needs a string name")
    check_keys(raw, _TOOL_KEYS, name, "tool", fail)
    is_write = raw.get("is_write")
    if not isinstance(is_write, bool):
        raise fail(name, "known-keys", "is_write must be true or false")
    risk = raw.get("risk", "low")
    confirmation = raw.get("confirmation", "default" if is_write else "none")
    if risk not in RISKS:
        raise fail(name, "known-keys", f"risk must be one of {', '.join(RISKS)}")
    if confirmation not in CONFIRMATIONS:
        raise fail(name, "known-keys", f"confirmation must be one of {', '.join(CONFIRMATIONS)}")

    cap_id = raw.get("capability")
    cap = caps.get(cap_id) if isinstance(cap_id, str) else None
    if is_write:
        if cap is None or cap.status != "enabled":
            if cap_id is None:
                detail = "no capability is named"
            else:
                detail = f"{cap_id!r} is {'not declared' if cap is None else cap.status}"
            raise fail(
                name, "write-needs-enabled-capability", f"a write tool must name an enabled capability; {detail}"
            )
        if confirmation == "none":
            raise fail(name, "write-needs-confirmation", "a write tool may not set confirmation: none")
    elif cap_id is not None and cap is None:
        raise fail(name, "capability-exists", f"capability {cap_id!r} is not declared")
    if cap is not None and cap.tool != name:
        raise fail(name, "capability-names-tool", f"capability {cap.id!r} names tool {cap.tool!r}, not {name!r}")
    if is_write and cap is not None:
        if cap.risk and cap.risk != risk:
            raise fail(
                name, "risk-matches-capability", f"risk {risk!r} differs from capability {cap.id!r} risk {cap.risk!r}"
            )
        if cap.confirmation and cap.confirmation != confirmation:
            raise fail(
                name,
                "confirmation-matches-capability",
                f"confirmation {confirmation!r} differs from capability {cap.id!r} confirmation {cap.confirmation!r}",
            )

    roles = raw.get("roles", [])
    if not isinstance(roles, list) or not roles or not all(isinstance(r, str) for r in roles):
        raise fail(name, "known-keys", "roles must be a non-empty list of role names")
    scope = raw.get("intent_scope", "request")
    if scope not in SCOPES:
        raise fail(name, "known-keys", f"intent_scope must be one of {', '.join(SCOPES)}")

    schema = raw.get("schema")
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise fail(name, "schema-valid", "schema must be a JSON Schema with type: object")
    try:
        validator = jsonschema_rs.validator_for(schema)
    except Exception as exc:  # the library raises several types for a bad schema
        raise fail(name, "schema-valid", str(exc).splitlines()[0]) from exc
    for problem in open_objects(schema, "schema"):
        raise fail(name, "schema-closed", problem)

    props = set(schema.get("properties", {}))
    aliases = raw.get("aliases") or {}
    if not isinstance(aliases, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in aliases.items()):
        raise fail(name, "known-keys", "aliases must map alias to property (both strings)")
    for alias, target in aliases.items():
        if alias in props:
            raise fail(name, "alias-no-collision", f"alias {alias!r} is also a declared property")
        if target not in props:
            raise fail(name, "alias-no-collision", f"alias {alias!r} maps to {target!r}, which is not a property")

    known = props | ACTION_FIELDS
    preview = raw.get("preview") or {}
    if not isinstance(preview, dict):
        raise fail(name, "known-keys", "preview must be a mapping")
    check_preview(preview, known, name, "preview", fail)
    locales = preview.get("locales") or {}
    if not isinstance(locales, dict):
        raise fail(name, "known-keys", "preview.locales must map a locale to a preview")
    for locale, variant in locales.items():
        if not isinstance(variant, dict) or "locales" in variant:
            raise fail(name, "known-keys", f"preview.locales.{locale} must be a preview (title, target, impact…)")
        check_preview(variant, known, name, f"preview.locales.{locale}", fail)

    adapter = adapter_spec(raw.get("adapter"), name, known, fail)
    receipt_raw = raw.get("receipt") or {}
    if not isinstance(receipt_raw, dict):
        raise fail(name, "known-keys", "receipt must be a mapping")
    check_keys(receipt_raw, _RECEIPT_KEYS, name, "receipt", fail)
    receipt = ReceiptSpec(
        str(receipt_raw.get("resource_id", "id")),
        str(receipt_raw.get("resource_version", "version")),
        str(receipt_raw.get("summary", "")),
        frozenset(k for k in ("resource_id", "resource_version") if k in receipt_raw),
    )
    check_template(receipt.summary, known | RECEIPT_FIELDS, name, fail)

    comp_raw = raw.get("compensation")
    compensation = None
    if comp_raw is not None:
        if not isinstance(comp_raw, dict) or not isinstance(comp_raw.get("tool"), str):
            raise fail(name, "compensation-is-write-tool", "compensation needs a tool name")
        check_keys(comp_raw, _COMP_KEYS, name, "compensation", fail)
        args = comp_raw.get("args") or {}
        if not isinstance(args, dict):
            raise fail(name, "known-keys", "compensation args must be a mapping")
        compensation = Compensation(comp_raw["tool"], {str(k): str(v) for k, v in args.items()})

    approval = _approval(raw, cap, name, is_write, risk, confirmation, issuers, fail)
    verbs = raw.get("verbs") or []
    if not isinstance(verbs, list) or not all(isinstance(v, str) for v in verbs) or not set(verbs) <= VERBS:
        raise fail(name, "known-keys", f"verbs must be a list drawn from {', '.join(sorted(VERBS))}")
    return Tool(
        verbs=frozenset(verbs),
        name=name,
        capability=cap.id if cap else "",
        is_write=is_write,
        risk=risk,
        confirmation=confirmation,
        roles=frozenset(roles),
        intent_scope=scope,
        aliases={str(k): str(v) for k, v in aliases.items()},
        schema=schema,
        validator=validator,
        preview=preview,
        adapter=adapter,
        receipt=receipt,
        compensation=compensation,
        approval=approval,
    )


def _approval(
    raw: Mapping[str, Any],
    cap: Capability | None,
    name: str,
    is_write: bool,
    risk: str,
    confirmation: str,
    issuers: bool,
    fail: Any,
) -> str:
    """What Confirm of this tool needs besides the token: none or signed (docs/design.md §12)."""
    declared = raw.get("approval", "")
    if declared and declared not in APPROVALS:
        raise fail(name, "known-keys", f"approval must be one of {', '.join(APPROVALS)}")
    if not is_write:
        if declared == "signed":
            raise fail(name, "known-keys", "approval: signed applies to write tools only (a read runs at Invoke)")
        return "none"
    from_cap = cap.approval if cap is not None else ""
    if declared and from_cap and declared != from_cap:
        raise fail(
            name,
            "approval-matches-capability",
            f"approval {declared!r} differs from capability {cap.id if cap else ''!r} approval {from_cap!r}",
        )
    approval = declared or from_cap
    if approval == "signed" and not issuers:
        raise fail(
            name,
            "approval-needs-issuer",
            "approval: signed needs an approval issuer, and none is configured (--approvals / "
            "COUNTERSIGN_APPROVALS); without one no Confirm could ever carry a valid approval",
        )
    if approval:
        return approval
    return "signed" if issuers and (confirmation == "always" or risk in ("high", "irreversible")) else "none"


def adapter_spec(raw: Any, tool: str, known: set[str], fail: Any) -> AdapterSpec:
    if not isinstance(raw, dict):
        raise fail(tool, "adapter-valid", "adapter is required (kind: http, grpc or mcp)")
    kind = raw.get("kind")
    if kind not in _ADAPTER_KEYS:
        raise fail(tool, "adapter-valid", f"adapter kind must be http, grpc or mcp, not {kind!r}")
    if kind != "grpc" and "tls" in raw:
        raise fail(tool, "adapter-valid", f"an {kind} adapter takes TLS from its URLs (https://), not from tls")
    check_keys(raw, _ADAPTER_KEYS[kind], tool, f"adapter (kind {kind})", fail)
    timeout = raw.get("timeout_ms", 0)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 0:
        raise fail(tool, "adapter-valid", "timeout_ms must be a non-negative integer")
    if kind == "mcp":
        return _mcp_spec(raw, tool, timeout, fail)
    if kind == "grpc":
        target = raw.get("target")
        if not isinstance(target, str) or not target:
            raise fail(tool, "adapter-valid", "a grpc adapter needs a target (host:port or unix:/path)")
        flags = {k: raw.get(k, False) for k in ("prepare", "lookup", "fence", "execute", "tls")}
        if not all(isinstance(v, bool) for v in flags.values()):
            raise fail(tool, "adapter-valid", "grpc adapter prepare/lookup/fence/tls are true or false")
        return AdapterSpec(
            "grpc",
            target=target,
            grpc_prepare=bool(flags["prepare"]),
            grpc_lookup=bool(flags["lookup"] or flags["fence"]),
            grpc_fence=bool(flags["fence"]),
            timeout_ms=timeout,
            tls=bool(flags["tls"]),
        )
    calls: dict[str, HttpCall | None] = {}
    for key, default in (("execute", "POST"), ("lookup", "GET"), ("fence", "POST"), ("prepare", "POST")):
        call = raw.get(key)
        if call is None:
            calls[key] = None
            continue
        if not isinstance(call, dict) or not isinstance(call.get("url"), str):
            raise fail(tool, "adapter-valid", f"adapter.{key} needs a url")
        check_keys(call, _CALL_KEYS, tool, f"adapter.{key}", fail)
        method = str(call.get("method", default)).upper()
        if method not in HTTP_METHODS:
            raise fail(tool, "adapter-valid", f"adapter.{key}.method {method!r} is not an HTTP method")
        url = call["url"]
        if not url.startswith(("http://", "https://")):
            raise fail(tool, "adapter-valid", f"adapter.{key}.url must be an http(s) URL")
        authority = url.split("://", 1)[1].split("/", 1)[0]
        if PLACEHOLDER.search(authority):
            # a template there would let an argument pick the host a write goes to
            raise fail(tool, "adapter-valid", f"adapter.{key}.url may not take its host or port from a template")
        check_template(url, known, tool, fail)
        calls[key] = HttpCall(method, url)
    if calls["execute"] is None:
        raise fail(tool, "adapter-valid", "an http adapter needs execute")
    return AdapterSpec(
        "http",
        execute=calls["execute"],
        lookup=calls["lookup"],
        fence=calls["fence"],
        prepare=calls["prepare"],
        timeout_ms=timeout,
    )


def _mcp_spec(raw: dict[str, Any], tool: str, timeout: int, fail: Any) -> AdapterSpec:
    """An MCP server's tool: one fixed endpoint URL (no template: no argument may pick where a write goes), the
    tool the execute calls, and optionally a lookup tool (that may fence) and a prepare tool, each another tool."""
    url = raw.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise fail(tool, "adapter-valid", "an mcp adapter needs url, the server's Streamable HTTP endpoint (http(s))")
    if PLACEHOLDER.search(url) or "{" in url or "}" in url:
        raise fail(tool, "adapter-valid", "adapter.url of an mcp adapter is one fixed endpoint: no template in it")
    if not urllib.parse.urlsplit(url).hostname:
        raise fail(tool, "adapter-valid", "adapter.url of an mcp adapter names no host")
    name = raw.get("tool")
    if not isinstance(name, str) or not _MCP_TOOL.match(name):
        raise fail(tool, "adapter-valid", "an mcp adapter needs tool, the server's tool name (1-128 of A-Za-z0-9_.-)")
    named: dict[str, str] = {}
    fence = False
    for key, allowed in (("lookup", {"tool", "fence"}), ("prepare", {"tool"})):
        call = raw.get(key)
        if call is None:
            continue
        if not isinstance(call, dict):
            raise fail(tool, "adapter-valid", f"adapter.{key} is a mapping {{tool: <the server's tool name>}}")
        check_keys(call, allowed, tool, f"adapter.{key}", fail)
        other = call.get("tool")
        if not isinstance(other, str) or not _MCP_TOOL.match(other):
            raise fail(
                tool, "adapter-valid", f"adapter.{key}.tool must be the server's tool name (1-128 of A-Za-z0-9_.-)"
            )
        if other == name:
            # the reconciler and Invoke call these freely: they must never be the write itself
            raise fail(tool, "adapter-valid", f"adapter.{key}.tool must be another tool than adapter.tool ({name!r})")
        named[key] = other
        if key == "lookup":
            fence = call.get("fence", False)
            if not isinstance(fence, bool):
                raise fail(tool, "adapter-valid", "adapter.lookup.fence is true or false")
    return AdapterSpec(
        "mcp",
        target=url,
        mcp_tool=name,
        mcp_lookup=named.get("lookup", ""),
        mcp_fence=fence,
        mcp_prepare=named.get("prepare", ""),
        timeout_ms=timeout,
    )


def check_template(template: str, known: set[str] | frozenset[str], tool: str, fail: Any) -> None:
    for name in PLACEHOLDER.findall(template):
        if name not in known:
            raise fail(
                tool,
                "template-fields",
                f"template {template!r} names {{{name}}}, which is not an argument, the action or the receipt",
            )


def fields_of(tool: Tool) -> set[str]:
    return set(tool.schema.get("properties", {}))
