"""Loading a registry: the strict YAML loader, ``build`` and every registration rule (listed in the package
docstring, ``countersign.registry``), and ``check_deadlines``, the one rule that needs the settings too."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import jsonschema_rs
import yaml

from countersign.errors import RegistryError
from countersign.registry.model import (
    CONFIRMATIONS,
    HTTP_METHODS,
    RISKS,
    SCOPES,
    STATUSES,
    VERBS,
    AdapterSpec,
    Capability,
    Compensation,
    HttpCall,
    ReceiptSpec,
    Registry,
    Tool,
)
from countersign.registry.schema import open_objects
from countersign.registry.templates import ACTION_FIELDS, PLACEHOLDER, RECEIPT_FIELDS

_TOP_KEYS = {"policy_version", "capabilities", "tools"}
_CAP_KEYS = {"id", "status", "tool", "risk", "confirmation", "guidance"}
_TOOL_KEYS = {
    "name", "capability", "is_write", "risk", "confirmation", "roles", "intent_scope", "aliases",
    "schema", "preview", "adapter", "receipt", "compensation", "description", "verbs",
}
_ADAPTER_KEYS = {"kind", "execute", "lookup", "fence", "prepare", "target", "timeout_ms"}
_CALL_KEYS = {"method", "url"}
_PREVIEW_KEYS = {"title", "target", "impact", "details"}
_RECEIPT_KEYS = {"resource_id", "resource_version", "summary"}
_COMP_KEYS = {"tool", "args"}


def load(path: str) -> Registry:
    """Load and validate a registry file; raise RegistryError naming file, tool and rule."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise RegistryError(path, "-", "readable", str(exc)) from exc
    return loads(raw, path)


def loads(text: str | bytes, path: str) -> Registry:
    """Validate a registry given as YAML text; ``path`` names it in the errors (a file, or a ConfigMap)."""
    try:
        doc = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise RegistryError(path, "-", "yaml", str(exc).replace("\n", " ")) from exc
    except (UnicodeDecodeError, TypeError, ValueError, RecursionError) as exc:
        raise RegistryError(path, "-", "yaml", f"not a readable YAML mapping: {type(exc).__name__}: "
                            f"{str(exc)[:200]}") from exc
    try:
        return build(doc, path)
    except RegistryError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, RecursionError) as exc:
        # A shape no rule above anticipated: still a clear refusal, never a traceback.
        raise RegistryError(path, "-", "known-keys", f"malformed registry: {type(exc).__name__}: "
                            f"{str(exc)[:200]}") from exc


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (YAML would keep the last)."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def build(doc: Any, path: str = "<registry>") -> Registry:
    def fail(tool: str, rule: str, detail: str) -> RegistryError:
        return RegistryError(path, tool, rule, detail)

    if not isinstance(doc, dict):
        raise fail("-", "known-keys", "the registry must be a mapping with policy_version, capabilities, tools")
    _keys(doc, _TOP_KEYS, "-", "registry", fail)
    version = doc.get("policy_version")
    if version is None or str(version).strip() == "":
        raise fail("-", "known-keys", "policy_version is required")

    caps: dict[str, Capability] = {}
    for raw in _list(doc.get("capabilities"), "capabilities", fail):
        cap = _capability(raw, fail)
        if cap.id in caps:
            raise fail(cap.tool, "unique-names", f"capability {cap.id!r} is declared twice")
        caps[cap.id] = cap

    tools: dict[str, Tool] = {}
    for raw in _list(doc.get("tools"), "tools", fail):
        tool = _tool(raw, caps, fail)
        if tool.name in tools:
            raise fail(tool.name, "unique-names", "the tool is declared twice")
        tools[tool.name] = tool

    refusals: dict[str, Capability] = {}
    for cap in caps.values():
        if cap.status != "enabled":
            if cap.tool in tools:
                raise fail(cap.tool, "no-tool-for-disabled-capability",
                           f"capability {cap.id!r} is {cap.status}; no tool of that name may be registered")
            refusals[cap.tool] = cap
            refusals[cap.id] = cap

    for tool in tools.values():
        comp = tool.compensation
        if comp is None:
            continue
        inverse = tools.get(comp.tool)
        if inverse is None or not inverse.is_write:
            raise fail(tool.name, "compensation-is-write-tool",
                       f"compensation names {comp.tool!r}, which is not a registered write tool")
        known = _fields(inverse) | RECEIPT_FIELDS | ACTION_FIELDS | _fields(tool)
        for key, template in comp.args.items():
            if key not in inverse.schema.get("properties", {}):
                raise fail(tool.name, "template-fields",
                           f"compensation argument {key!r} is not a property of {comp.tool!r}")
            _check_template(template, known, tool.name, fail)

    writes = sorted(t.name for t in tools.values() if t.is_write)
    roles = {role for t in tools.values() for role in t.roles}
    denied = {role: _csv(n for n in writes if role not in tools[n].roles) for role in roles}
    return Registry(path, str(version), caps, tools, refusals, denied, _csv(writes))


def _csv(names: Iterable[str]) -> str:
    return "," + ",".join(names) + ","


# -- pieces -----------------------------------------------------------------------------------


def _keys(raw: Mapping[str, Any], allowed: set[str], tool: str, where: str, fail: Any) -> None:
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise fail(tool, "known-keys", f"unknown key(s) {', '.join(map(str, unknown))} in {where}")


def _list(value: Any, where: str, fail: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise fail("-", "known-keys", f"{where} must be a list of mappings")
    return value


def _capability(raw: dict[str, Any], fail: Any) -> Capability:
    tool = str(raw.get("tool", "-"))
    _keys(raw, _CAP_KEYS, tool, "capability", fail)
    cid, status = raw.get("id"), raw.get("status")
    if not isinstance(cid, str) or not cid or not isinstance(raw.get("tool"), str):
        raise fail(tool, "known-keys", "a capability needs a string id and tool")
    if status not in STATUSES:
        raise fail(tool, "known-keys", f"capability {cid!r}: status must be one of {', '.join(STATUSES)}")
    guidance = raw.get("guidance") or {}
    if not isinstance(guidance, dict) or not all(isinstance(v, str) for v in guidance.values()):
        raise fail(tool, "known-keys", f"capability {cid!r}: guidance must map locale to text")
    risk, conf = raw.get("risk", ""), raw.get("confirmation", "")
    if risk and risk not in RISKS:
        raise fail(tool, "known-keys", f"capability {cid!r}: risk must be one of {', '.join(RISKS)}")
    if conf and conf not in CONFIRMATIONS:
        raise fail(tool, "known-keys", f"capability {cid!r}: confirmation must be one of {', '.join(CONFIRMATIONS)}")
    return Capability(cid, status, raw["tool"], risk or "", conf or "", {str(k): v for k, v in guidance.items()})


def _tool(raw: dict[str, Any], caps: Mapping[str, Capability], fail: Any) -> Tool:
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise fail("-", "known-keys", "a tool needs a string name")
    _keys(raw, _TOOL_KEYS, name, "tool", fail)
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
            raise fail(name, "write-needs-enabled-capability",
                       f"a write tool must name an enabled capability; {detail}")
        if confirmation == "none":
            raise fail(name, "write-needs-confirmation", "a write tool may not set confirmation: none")
    elif cap_id is not None and cap is None:
        raise fail(name, "capability-exists", f"capability {cap_id!r} is not declared")
    if cap is not None and cap.tool != name:
        raise fail(name, "capability-names-tool", f"capability {cap.id!r} names tool {cap.tool!r}, not {name!r}")
    if is_write and cap is not None:
        if cap.risk and cap.risk != risk:
            raise fail(name, "risk-matches-capability",
                       f"risk {risk!r} differs from capability {cap.id!r} risk {cap.risk!r}")
        if cap.confirmation and cap.confirmation != confirmation:
            raise fail(name, "confirmation-matches-capability",
                       f"confirmation {confirmation!r} differs from capability {cap.id!r} "
                       f"confirmation {cap.confirmation!r}")

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
    if not isinstance(aliases, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                for k, v in aliases.items()):
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
    _keys(preview, _PREVIEW_KEYS, name, "preview", fail)
    for key in ("title", "target", "impact"):
        _check_template(str(preview.get(key, "")), known, name, fail)
    for detail in preview.get("details") or []:
        if not isinstance(detail, dict) or set(detail) != {"label", "value"}:
            raise fail(name, "known-keys", "preview details are {label, value} mappings")
        _check_template(str(detail["value"]), known, name, fail)

    adapter = _adapter(raw.get("adapter"), name, known, fail)
    receipt_raw = raw.get("receipt") or {}
    if not isinstance(receipt_raw, dict):
        raise fail(name, "known-keys", "receipt must be a mapping")
    _keys(receipt_raw, _RECEIPT_KEYS, name, "receipt", fail)
    receipt = ReceiptSpec(str(receipt_raw.get("resource_id", "id")),
                          str(receipt_raw.get("resource_version", "version")),
                          str(receipt_raw.get("summary", "")),
                          frozenset(k for k in ("resource_id", "resource_version") if k in receipt_raw))
    _check_template(receipt.summary, known | RECEIPT_FIELDS, name, fail)

    comp_raw = raw.get("compensation")
    compensation = None
    if comp_raw is not None:
        if not isinstance(comp_raw, dict) or not isinstance(comp_raw.get("tool"), str):
            raise fail(name, "compensation-is-write-tool", "compensation needs a tool name")
        _keys(comp_raw, _COMP_KEYS, name, "compensation", fail)
        args = comp_raw.get("args") or {}
        if not isinstance(args, dict):
            raise fail(name, "known-keys", "compensation args must be a mapping")
        compensation = Compensation(comp_raw["tool"], {str(k): str(v) for k, v in args.items()})

    verbs = raw.get("verbs") or []
    if not isinstance(verbs, list) or not all(isinstance(v, str) for v in verbs) or not set(verbs) <= VERBS:
        raise fail(name, "known-keys", f"verbs must be a list drawn from {', '.join(sorted(VERBS))}")
    return Tool(
        verbs=frozenset(verbs), name=name, capability=cap.id if cap else "", is_write=is_write, risk=risk,
        confirmation=confirmation, roles=frozenset(roles), intent_scope=scope,
        aliases={str(k): str(v) for k, v in aliases.items()}, schema=schema, validator=validator,
        preview=preview, adapter=adapter, receipt=receipt, compensation=compensation,
    )


def _adapter(raw: Any, tool: str, known: set[str], fail: Any) -> AdapterSpec:
    if not isinstance(raw, dict):
        raise fail(tool, "adapter-valid", "adapter is required (kind: http or grpc)")
    _keys(raw, _ADAPTER_KEYS, tool, "adapter", fail)
    kind = raw.get("kind")
    timeout = raw.get("timeout_ms", 0)
    if not isinstance(timeout, int) or timeout < 0:
        raise fail(tool, "adapter-valid", "timeout_ms must be a non-negative integer")
    if kind == "grpc":
        target = raw.get("target")
        if not isinstance(target, str) or not target:
            raise fail(tool, "adapter-valid", "a grpc adapter needs a target (host:port or unix:/path)")
        flags = {k: raw.get(k, False) for k in ("prepare", "lookup", "fence", "execute")}
        if not all(isinstance(v, bool) for v in flags.values()):
            raise fail(tool, "adapter-valid", "grpc adapter prepare/lookup/fence are true or false")
        return AdapterSpec("grpc", target=target, grpc_prepare=bool(flags["prepare"]),
                           grpc_lookup=bool(flags["lookup"] or flags["fence"]), grpc_fence=bool(flags["fence"]),
                           timeout_ms=timeout)
    if kind != "http":
        raise fail(tool, "adapter-valid", f"adapter kind must be http or grpc, not {kind!r}")
    calls: dict[str, HttpCall | None] = {}
    for key, default in (("execute", "POST"), ("lookup", "GET"), ("fence", "POST"), ("prepare", "POST")):
        call = raw.get(key)
        if call is None:
            calls[key] = None
            continue
        if not isinstance(call, dict) or not isinstance(call.get("url"), str):
            raise fail(tool, "adapter-valid", f"adapter.{key} needs a url")
        _keys(call, _CALL_KEYS, tool, f"adapter.{key}", fail)
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
        _check_template(url, known, tool, fail)
        calls[key] = HttpCall(method, url)
    if calls["execute"] is None:
        raise fail(tool, "adapter-valid", "an http adapter needs execute")
    return AdapterSpec("http", execute=calls["execute"], lookup=calls["lookup"], fence=calls["fence"],
                       prepare=calls["prepare"], timeout_ms=timeout)


def _check_template(template: str, known: set[str] | frozenset[str], tool: str, fail: Any) -> None:
    for name in PLACEHOLDER.findall(template):
        if name not in known:
            raise fail(tool, "template-fields", f"template {template!r} names {{{name}}}, which is not "
                       "an argument, the action or the receipt")


def _fields(tool: Tool) -> set[str]:
    return set(tool.schema.get("properties", {}))


def check_deadlines(registry: Registry, lease: float, default_deadline: float, margin: float) -> None:
    """Refuse a write tool whose call could outlive its claim's lease (raise RegistryError).

    A claim whose lease lapses while its call still runs is reported UNKNOWN and taken over by a
    reconciler; the caller would then get the call's outcome while the record says otherwise. Reads
    and prepares hold no lease and are not bound by it."""
    for tool in registry.tools.values():
        if not tool.is_write:
            continue
        own = tool.adapter.timeout_ms / 1000 if tool.adapter.timeout_ms else 0.0
        if (own or default_deadline) + margin > lease:
            which = f"adapter.timeout_ms {tool.adapter.timeout_ms} ms" if own else \
                f"--downstream-deadline ({default_deadline:g} s)"
            raise RegistryError(registry.path, tool.name, "deadline-below-lease",
                                f"{which} plus a {margin * 1000:g} ms margin must not exceed --lease "
                                f"({lease:g} s), or a call still running when the lease lapses is reported "
                                "UNKNOWN and reconciled under it; lower timeout_ms or raise --lease")
