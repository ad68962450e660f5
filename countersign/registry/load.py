"""Loading a registry: the strict YAML loader, ``build`` and every registration rule (listed in the package
docstring, ``countersign.registry``), and ``check_deadlines``, the one rule that needs the settings too."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from countersign.errors import RegistryError
from countersign.registry.model import (
    APPROVALS,
    CONFIRMATIONS,
    RISKS,
    STATUSES,
    Capability,
    Registry,
    Tool,
)
from countersign.registry.templates import ACTION_FIELDS, RECEIPT_FIELDS
from countersign.registry.tools import check_keys, check_template, fields_of, tool_from

_TOP_KEYS = {"policy_version", "capabilities", "tools"}
_CAP_KEYS = {"id", "status", "tool", "risk", "confirmation", "guidance", "approval"}


def load(path: str, *, issuers: bool = False) -> Registry:
    """Load and validate a registry file; raise RegistryError naming file, tool and rule. ``issuers``: whether an
    approval issuer is configured (--approvals), which decides approval's default and whether ``signed`` may be
    declared."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise RegistryError(path, "-", "readable", str(exc)) from exc
    return loads(raw, path, issuers=issuers)


def loads(text: str | bytes, path: str, *, issuers: bool = False) -> Registry:
    """Validate a registry given as YAML text; ``path`` names it in the errors (a file, or a ConfigMap)."""
    try:
        doc = parse(text)
    except yaml.YAMLError as exc:
        raise RegistryError(path, "-", "yaml", str(exc).replace("\n", " ")) from exc
    except (UnicodeDecodeError, TypeError, ValueError, RecursionError) as exc:
        raise RegistryError(
            path, "-", "yaml", f"not a readable YAML mapping: {type(exc).__name__}: {str(exc)[:200]}"
        ) from exc
    try:
        return build(doc, path, issuers=issuers)
    except RegistryError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, RecursionError) as exc:
        # A shape no rule above anticipated: still a clear refusal, never a traceback.
        raise RegistryError(
            path, "-", "known-keys", f"malformed registry: {type(exc).__name__}: {str(exc)[:200]}"
        ) from exc


def parse(text: str | bytes) -> Any:
    """The YAML document, parsed by libyaml when PyYAML has it (~8x faster: 4 against 31 ms for the example
    registry at load 7, most of what a start does after its imports; notes/lean-start2.md), by the pure-Python
    parser otherwise. Both build the document with the same strict SafeConstructor, and give the same document
    (tests/unit/test_registry_parse.py: every registry of the repository, generated documents, hostile ones). A
    document libyaml refuses is parsed again by the pure-Python parser, whose verdict and message stand: it names
    more (the undefined alias, the line with a caret under the column)."""
    if _FastStrictLoader is not None:
        try:
            return yaml.load(text, Loader=_FastStrictLoader)
        except yaml.YAMLError:
            pass
    return yaml.load(text, Loader=_StrictLoader)


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
_FastStrictLoader: type[yaml.CSafeLoader] | None = None
if yaml.__with_libyaml__:

    class _CStrictLoader(yaml.CSafeLoader):
        """The same strict constructor over libyaml's parser."""

    _CStrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
    _FastStrictLoader = _CStrictLoader


def build(doc: Any, path: str = "<registry>", *, issuers: bool = False) -> Registry:
    def fail(tool: str, rule: str, detail: str) -> RegistryError:
        return RegistryError(path, tool, rule, detail)

    if not isinstance(doc, dict):
        raise fail("-", "known-keys", "the registry must be a mapping with policy_version, capabilities, tools")
    check_keys(doc, _TOP_KEYS, "-", "registry", fail)
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
        tool = tool_from(raw, caps, fail, issuers=issuers)
        if tool.name in tools:
            raise fail(tool.name, "unique-names", "the tool is declared twice")
        tools[tool.name] = tool

    refusals: dict[str, Capability] = {}
    for cap in caps.values():
        if cap.status != "enabled":
            if cap.tool in tools:
                raise fail(
                    cap.tool,
                    "no-tool-for-disabled-capability",
                    f"capability {cap.id!r} is {cap.status}; no tool of that name may be registered",
                )
            refusals[cap.tool] = cap
            refusals[cap.id] = cap

    for tool in tools.values():
        comp = tool.compensation
        if comp is None:
            continue
        inverse = tools.get(comp.tool)
        if inverse is None or not inverse.is_write:
            raise fail(
                tool.name,
                "compensation-is-write-tool",
                f"compensation names {comp.tool!r}, which is not a registered write tool",
            )
        known = fields_of(inverse) | RECEIPT_FIELDS | ACTION_FIELDS | fields_of(tool)
        for key, template in comp.args.items():
            if key not in inverse.schema.get("properties", {}):
                raise fail(
                    tool.name, "template-fields", f"compensation argument {key!r} is not a property of {comp.tool!r}"
                )
            check_template(template, known, tool.name, fail)

    writes = sorted(t.name for t in tools.values() if t.is_write)
    roles = {role for t in tools.values() for role in t.roles}
    denied = {role: _csv(n for n in writes if role not in tools[n].roles) for role in roles}
    signed = _csv(n for n in writes if tools[n].approval == "signed")
    return Registry(path, str(version), caps, tools, refusals, denied, _csv(writes), signed)


def _csv(names: Iterable[str]) -> str:
    return "," + ",".join(names) + ","


# -- pieces -----------------------------------------------------------------------------------


def _list(value: Any, where: str, fail: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise fail("-", "known-keys", f"{where} must be a list of mappings")
    return value


def _capability(raw: dict[str, Any], fail: Any) -> Capability:
    tool = str(raw.get("tool", "-"))
    check_keys(raw, _CAP_KEYS, tool, "capability", fail)
    cid, status = raw.get("id"), raw.get("status")
    if not isinstance(cid, str) or not cid or not isinstance(raw.get("tool"), str):
        raise fail(tool, "known-keys", "a capability needs a string id and tool")
    if status not in STATUSES:
        raise fail(tool, "known-keys", f"capability {cid!r}: status must be one of {', '.join(STATUSES)}")
    guidance = raw.get("guidance") or {}
    if not isinstance(guidance, dict) or not all(isinstance(v, str) for v in guidance.values()):
        raise fail(tool, "known-keys", f"capability {cid!r}: guidance must map locale to text")
    risk, conf, approval = raw.get("risk", ""), raw.get("confirmation", ""), raw.get("approval", "")
    if risk and risk not in RISKS:
        raise fail(tool, "known-keys", f"capability {cid!r}: risk must be one of {', '.join(RISKS)}")
    if conf and conf not in CONFIRMATIONS:
        raise fail(tool, "known-keys", f"capability {cid!r}: confirmation must be one of {', '.join(CONFIRMATIONS)}")
    if approval and approval not in APPROVALS:
        raise fail(tool, "known-keys", f"capability {cid!r}: approval must be one of {', '.join(APPROVALS)}")
    return Capability(
        cid, status, raw["tool"], risk or "", conf or "", {str(k): v for k, v in guidance.items()}, approval or ""
    )


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
            which = (
                f"adapter.timeout_ms {tool.adapter.timeout_ms} ms"
                if own
                else f"--downstream-deadline ({default_deadline:g} s)"
            )
            raise RegistryError(
                registry.path,
                tool.name,
                "deadline-below-lease",
                f"{which} plus a {margin * 1000:g} ms margin must not exceed --lease "
                f"({lease:g} s), or a call still running when the lease lapses is reported "
                "UNKNOWN and reconciled under it; lower timeout_ms or raise --lease",
            )
