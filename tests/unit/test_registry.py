"""The capability registry (docs/design.md §4): one bad fixture per registration rule, the exact message of each.

Every fixture in tests/fixtures/registry/ is valid.yaml with exactly one defect. The messages are
asserted in full so that a change of wording is a conscious change.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from countersign import registry
from countersign.errors import RegistryError
from countersign.registry import Capability
from countersign.testing.processes import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "registry"
EXAMPLE = ROOT / "examples" / "registry.yaml"
COUNTERSIGN = ROOT / ".venv" / "bin" / "countersign"

ANY = "admits any value (an object with any keys): give it a type"
UNSUPPORTED = (
    ", which a tool schema may not use: closure is checked only through type, properties, items, enum, "
    "const, anyOf, oneOf and allOf"
)

# fixture file -> (tool, rule, detail)
BAD: dict[str, tuple[str, str, str]] = {
    "write-needs-enabled-capability": (
        "create_item",
        "write-needs-enabled-capability",
        "a write tool must name an enabled capability; 'item.archive' is planned",
    ),
    "write-without-capability": (
        "create_item",
        "write-needs-enabled-capability",
        "a write tool must name an enabled capability; no capability is named",
    ),
    "risk-matches-capability": (
        "delete_item",
        "risk-matches-capability",
        "risk 'high' differs from capability 'item.delete' risk 'medium'",
    ),
    "confirmation-matches-capability": (
        "delete_item",
        "confirmation-matches-capability",
        "confirmation 'default' differs from capability 'item.delete' confirmation 'always'",
    ),
    "write-needs-confirmation": (
        "create_item",
        "write-needs-confirmation",
        "a write tool may not set confirmation: none",
    ),
    "schema-closed": ("create_item", "schema-closed", "schema.properties.meta must set additionalProperties: false"),
    "schema-closed-top": ("list_items", "schema-closed", "schema must set additionalProperties: false"),
    "alias-no-collision": ("create_item", "alias-no-collision", "alias 'title' is also a declared property"),
    "alias-no-collision-target": (
        "create_item",
        "alias-no-collision",
        "alias 'name' maps to 'titel', which is not a property",
    ),
    "compensation-is-write-tool": (
        "create_item",
        "compensation-is-write-tool",
        "compensation names 'list_items', which is not a registered write tool",
    ),
    "no-tool-for-disabled-capability": (
        "archive_item",
        "no-tool-for-disabled-capability",
        "capability 'item.archive' is planned; no tool of that name may be registered",
    ),
    "known-keys": ("list_items", "known-keys", "unknown key(s) rolse in tool"),
    "template-fields": (
        "create_item",
        "template-fields",
        "template '{titel}' names {titel}, which is not an argument, the action or the receipt",
    ),
    "adapter-valid": ("delete_item", "adapter-valid", "adapter kind must be http, grpc or mcp, not 'ftp'"),
    # an MCP server's tool (issue 15, the back door): one fixed endpoint, the write's tool, other tools to look up
    "adapter-valid-mcp-url": (
        "delete_item",
        "adapter-valid",
        "an mcp adapter needs url, the server's Streamable HTTP endpoint (http(s))",
    ),
    "adapter-valid-mcp-url-template": (
        "delete_item",
        "adapter-valid",
        "adapter.url of an mcp adapter is one fixed endpoint: no template in it",
    ),
    "adapter-valid-mcp-no-host": ("delete_item", "adapter-valid", "adapter.url of an mcp adapter names no host"),
    "adapter-valid-mcp-tool": (
        "delete_item",
        "adapter-valid",
        "an mcp adapter needs tool, the server's tool name (1-128 of A-Za-z0-9_.-)",
    ),
    "adapter-valid-mcp-lookup-tool": (
        "delete_item",
        "adapter-valid",
        "adapter.lookup.tool must be the server's tool name (1-128 of A-Za-z0-9_.-)",
    ),
    "adapter-valid-mcp-lookup-is-the-write": (
        "delete_item",
        "adapter-valid",
        "adapter.lookup.tool must be another tool than adapter.tool ('delete_item')",
    ),
    "adapter-valid-mcp-fence": ("delete_item", "adapter-valid", "adapter.lookup.fence is true or false"),
    "adapter-valid-mcp-prepare": (
        "delete_item",
        "adapter-valid",
        "adapter.prepare is a mapping {tool: <the server's tool name>}",
    ),
    "known-keys-mcp-adapter": ("delete_item", "known-keys", "unknown key(s) execute in adapter (kind mcp)"),
    "known-keys-mcp-lookup": ("delete_item", "known-keys", "unknown key(s) fenc in adapter.lookup"),
    "unique-names": ("list_items", "unique-names", "the tool is declared twice"),
    "unique-names-capability": ("list_items", "unique-names", "capability 'item.list' is declared twice"),
    "schema-valid": (
        "list_items",
        "schema-valid",
        "\"strng\" is not valid under any of the schemas listed in the 'anyOf' keyword",
    ),
    "capability-exists": ("list_items", "capability-exists", "capability 'item.lists' is not declared"),
    "capability-names-tool": (
        "create_item",
        "capability-names-tool",
        "capability 'item.create' names tool 'make_item', not 'create_item'",
    ),
    "schema-closed-type-list": (
        "create_item",
        "schema-closed",
        "schema.properties.meta must set additionalProperties: false",
    ),
    # every way a schema could still admit an undeclared key (issue 11, item 13)
    "schema-closed-empty": ("create_item", "schema-closed", f"schema.properties.meta {ANY}, enum or const"),
    "schema-closed-true": ("create_item", "schema-closed", f"schema.properties.meta is true, which {ANY}"),
    "schema-closed-items-empty": ("create_item", "schema-closed", f"schema.properties.tags.items {ANY}, enum or const"),
    "schema-closed-array-without-items": (
        "create_item",
        "schema-closed",
        "schema.properties.tags is an array without items: declare a closed schema for its items",
    ),
    "schema-closed-anyof": ("create_item", "schema-closed", f"schema.properties.meta.anyOf[1] is true, which {ANY}"),
    "schema-closed-oneof": ("create_item", "schema-closed", f"schema.properties.meta.oneOf[1] {ANY}, enum or const"),
    "schema-closed-allof": ("create_item", "schema-closed", f"schema.properties.meta.allOf[0] {ANY}, enum or const"),
    "schema-closed-not": ("create_item", "schema-closed", f"schema.properties.meta uses 'not'{UNSUPPORTED}"),
    "schema-closed-dependent-schemas": (
        "create_item",
        "schema-closed",
        f"schema.properties.meta uses 'dependentSchemas'{UNSUPPORTED}",
    ),
    "schema-closed-pattern-properties": (
        "create_item",
        "schema-closed",
        f"schema.properties.meta uses 'patternProperties'{UNSUPPORTED}",
    ),
    "schema-closed-ref": ("create_item", "schema-closed", f"schema.properties.meta uses '$ref'{UNSUPPORTED}"),
    "schema-closed-if": ("create_item", "schema-closed", f"schema.properties.meta uses 'if', 'then'{UNSUPPORTED}"),
    "schema-closed-unevaluated": (
        "create_item",
        "schema-closed",
        f"schema.properties.meta uses 'unevaluatedProperties'{UNSUPPORTED}",
    ),
    "schema-closed-prefix-items": (
        "create_item",
        "schema-closed",
        f"schema.properties.tags uses 'prefixItems'{UNSUPPORTED}",
    ),
    "schema-closed-contains": ("create_item", "schema-closed", f"schema.properties.tags uses 'contains'{UNSUPPORTED}"),
    "schema-closed-additional-items": (
        "create_item",
        "schema-closed",
        f"schema.properties.tags uses 'additionalItems'{UNSUPPORTED}",
    ),
    "schema-closed-defs": ("create_item", "schema-closed", f"schema uses '$defs'{UNSUPPORTED}"),
    # the countersignature (issue 13, item 2)
    "approval-needs-issuer": (
        "delete_item",
        "approval-needs-issuer",
        "approval: signed needs an approval issuer, and none is configured (--approvals / COUNTERSIGN_APPROVALS); "
        "without one no Confirm could ever carry a valid approval",
    ),
    "approval-matches-capability": (
        "delete_item",
        "approval-matches-capability",
        "approval 'signed' differs from capability 'item.delete' approval 'none'",
    ),
}

# What each schema-closed fixture's schema, as JSON Schema alone, accepts although it carries a key the
# registry never declared: the hole is real, and only the schema-closed rule stands in front of it.
EVIL: dict[str, dict[str, Any]] = {
    "schema-closed": {"meta": {"evil": {"rm": "-rf"}}},
    "schema-closed-type-list": {"meta": {"evil": {"rm": "-rf"}}},
    "schema-closed-empty": {"meta": {"evil": {"rm": "-rf"}}},
    "schema-closed-true": {"meta": {"evil": {"rm": "-rf"}}},
    "schema-closed-items-empty": {"tags": [{"evil": {"rm": "-rf"}}]},
    "schema-closed-array-without-items": {"tags": [{"evil": {"rm": "-rf"}}]},
    "schema-closed-anyof": {"meta": {"evil": {"rm": "-rf"}}},
    "schema-closed-oneof": {"meta": {"evil": {"rm": "-rf"}}},
    "schema-closed-allof": {"meta": {"evil": {"rm": "-rf"}}},
    "schema-closed-not": {"meta": {"evil": {"rm": "-rf"}}},
    "schema-closed-dependent-schemas": {"meta": {"evil": {"rm": "-rf"}}},
    "schema-closed-pattern-properties": {"meta": {"xevil": {"rm": "-rf"}}},
    "schema-closed-ref": {"meta": {"evil": {"rm": "-rf"}}},
    "schema-closed-if": {"meta": {"evil": {"rm": "-rf"}}},
    "schema-closed-unevaluated": {"meta": {"evil": {"rm": "-rf"}}},
    "schema-closed-prefix-items": {"tags": [{"evil": {"rm": "-rf"}}]},
    "schema-closed-contains": {"tags": ["x", {"evil": {"rm": "-rf"}}]},
    "schema-closed-additional-items": {"tags": [{"evil": {"rm": "-rf"}}]},
    "schema-closed-defs": {"meta": {"evil": {"rm": "-rf"}}},
}


# a defect the rule should catch but does not (see the reason)
KNOWN_BUGS: dict[str, tuple[tuple[str, str, str], str]] = {}


def _cases() -> list[Any]:
    out = [pytest.param(name, *case, id=name) for name, case in BAD.items()]
    for name, (case, reason) in KNOWN_BUGS.items():
        out.append(
            pytest.param(
                name, *case, id=name, marks=pytest.mark.xfail(strict=True, raises=pytest.fail.Exception, reason=reason)
            )
        )
    return out


def test_every_rule_has_a_fixture_and_every_fixture_a_case() -> None:
    files = {p.stem for p in FIXTURES.glob("*.yaml")}
    assert files == set(BAD) | set(KNOWN_BUGS) | {"valid", "yaml-duplicate-key"}
    documented = set(re.findall(r"^    ([a-z]+(?:-[a-z]+)+)  ", registry.__doc__ or "", re.MULTILINE))
    assert len(documented) == 17
    covered = {rule for _tool, rule, _detail in BAD.values()}
    assert documented <= covered


def test_the_base_fixture_is_valid() -> None:
    reg = registry.load(str(FIXTURES / "valid.yaml"))
    assert set(reg.tools) == {"list_items", "create_item", "delete_item"}
    assert reg.policy_version == "test.1"


@pytest.mark.parametrize(("name", "tool", "rule", "detail"), _cases())
def test_bad_fixture_names_file_tool_and_rule(name: str, tool: str, rule: str, detail: str) -> None:
    path = str(FIXTURES / f"{name}.yaml")
    with pytest.raises(RegistryError) as info:
        registry.load(path)
    assert str(info.value) == f"{path}: tool '{tool}': {rule}: {detail}"
    assert (info.value.path, info.value.tool, info.value.rule, info.value.detail) == (path, tool, rule, detail)


@pytest.mark.parametrize("name", sorted(EVIL))
def test_every_schema_closed_fixture_is_a_real_hole_that_no_longer_loads(name: str) -> None:
    """The fixture's schema, given to JSON Schema alone, accepts arguments with an undeclared key; the
    registry refuses to load it, so no tool can be called through that hole."""
    import jsonschema_rs
    import yaml

    path = FIXTURES / f"{name}.yaml"
    with open(path, encoding="utf-8") as fh:
        tool = next(t for t in yaml.safe_load(fh)["tools"] if t["name"] == "create_item")
    evil = {"title": "buy milk", **EVIL[name]}
    assert jsonschema_rs.validator_for(tool["schema"]).is_valid(evil), "the fixture is not a hole"
    with pytest.raises(RegistryError) as info:
        registry.load(str(path))
    assert info.value.rule == "schema-closed"


def test_a_closed_schema_with_every_supported_keyword_loads_and_refuses_an_undeclared_key() -> None:
    doc = _doc()
    doc["tools"][1]["schema"]["properties"].update(
        {
            "meta": {
                "type": ["object", "null"],
                "additionalProperties": False,
                "minProperties": 0,
                "maxProperties": 3,
                "dependentRequired": {"a": ["b"]},
                "properties": {
                    "a": {"type": "string", "format": "email", "pattern": "^.+$"},
                    "b": {"type": "number", "minimum": 0, "exclusiveMaximum": 10, "multipleOf": 0.5},
                },
            },
            "tags": {
                "type": "array",
                "maxItems": 3,
                "uniqueItems": True,
                "minItems": 0,
                "items": {
                    "anyOf": [
                        {"type": "string", "maxLength": 8},
                        {"type": "object", "additionalProperties": False, "properties": {"k": {"const": 1}}},
                    ]
                },
            },
            "mode": {
                "oneOf": [{"enum": ["a", "b"]}, {"const": {"fixed": True}}],
                "title": "Mode",
                "description": "d",
                "default": "a",
                "examples": ["a"],
                "deprecated": False,
                "$comment": "c",
            },
            "both": {
                "allOf": [{"type": "integer"}, {"type": "integer", "minimum": 1}],
                "readOnly": False,
                "writeOnly": False,
            },
            "never": False,
        }
    )
    reg = registry.build(doc, "closed.yaml")
    validator = reg.tools["create_item"].validator
    assert validator.is_valid(
        {"title": "t", "meta": {"a": "x@y.z", "b": 1.5}, "tags": ["x", {"k": 1}], "mode": {"fixed": True}, "both": 2}
    )
    for evil in (
        {"meta": {"evil": 1}},
        {"tags": [{"k": 1, "evil": 1}]},
        {"mode": {"fixed": True, "evil": 1}},
        {"evil": 1},
        {"never": 1},
    ):
        assert not validator.is_valid({"title": "t", **evil}), evil


def test_unreadable_and_non_yaml_files(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(RegistryError) as info:
        registry.load(missing)
    assert info.value.rule == "readable" and info.value.tool == "-"
    bad = tmp_path / "bad.yaml"
    bad.write_text("tools: [\n")
    with pytest.raises(RegistryError) as info:
        registry.load(str(bad))
    assert info.value.rule == "yaml" and "\n" not in str(info.value)
    with pytest.raises(RegistryError, match=r"tool '-': known-keys: the registry must be a mapping"):
        registry.build([1, 2], "list.yaml")
    with pytest.raises(RegistryError, match=r"known-keys: policy_version is required"):
        registry.build({"tools": []}, "x.yaml")


# -- the example registry --------------------------------------------------------------------


@pytest.fixture(scope="module")
def example() -> registry.Registry:
    return registry.load(str(EXAMPLE))


def test_example_registry_loads(example: registry.Registry) -> None:
    assert example.policy_version == "2026-11-29.1"
    assert set(example.tools) == {"list_todos", "create_todo", "set_todo_status", "delete_todo"}
    assert set(example.capabilities) == {
        "todo.list",
        "todo.create",
        "todo.set_status",
        "todo.delete",
        "note.delete",
        "account.delete",
    }
    create = example.tools["create_todo"]
    assert create.is_write and create.risk == "low" and create.confirmation == "default"
    assert dict(create.aliases) == {"taskTitle": "title", "deadline": "dueAt", "importance": "priority"}
    assert create.compensation is not None and create.compensation.tool == "delete_todo"
    assert not example.tools["list_todos"].is_write
    assert example.tools["list_todos"].confirmation == "none"
    assert example.tools["delete_todo"].confirmation == "always"


def _names(csv: str) -> set[str]:
    assert csv.startswith(",") and csv.endswith(",")
    return {n for n in csv.split(",") if n}


def test_role_sets_list_exactly_the_write_tools(example: registry.Registry) -> None:
    # what the claim script checks: every write tool, and per role the write tools it may not run
    assert example.all_writes == ",create_todo,delete_todo,set_todo_status,"
    assert dict(example.denied_by_role) == {"user": ",,", "admin": ",,"}
    assert example.denied_tools("user") == ",,"
    assert example.denied_tools("guest") == example.all_writes  # an unknown role may run no write


def test_role_sets_per_role() -> None:
    doc = _doc()
    doc["tools"][0]["roles"] = ["user", "auditor"]  # list_items, a read tool: never in a write set
    doc["tools"][1]["roles"] = ["user", "admin"]  # create_item
    doc["tools"][2]["roles"] = ["admin"]  # delete_item
    reg = registry.build(doc)
    assert reg.all_writes == ",create_item,delete_item,"
    assert dict(reg.denied_by_role) == {"user": ",delete_item,", "admin": ",,", "auditor": ",create_item,delete_item,"}
    for role in ("user", "admin", "auditor", "nobody"):
        writable = {t.name for t in reg.tools.values() if t.is_write and role in t.roles}
        assert _names(reg.denied_tools(role)) == _names(reg.all_writes) - writable


def test_planned_and_forbidden_capabilities_are_refusals(example: registry.Registry) -> None:
    planned, forbidden = example.capabilities["note.delete"], example.capabilities["account.delete"]
    assert planned.status == "planned" and forbidden.status == "forbidden"
    assert example.refusals["delete_note"] is planned
    assert example.refusals["note.delete"] is planned
    assert example.refusals["delete_account"] is forbidden
    assert example.refusals["account.delete"] is forbidden
    assert set(example.refusals) == {"delete_note", "note.delete", "delete_account", "account.delete"}
    assert "delete_note" not in example.tools and "delete_account" not in example.tools


# -- guidance in the caller's locale ---------------------------------------------------------


def _cap(guidance: dict[str, str]) -> Capability:
    return Capability("x.y", "planned", "do_y", guidance=guidance)


def test_guidance_exact_locale_first(example: registry.Registry) -> None:
    cap = example.capabilities["note.delete"]
    assert cap.guidance_for("zh-CN") == "当前请前往笔记页面手动删除。"
    assert cap.guidance_for("en") == "Delete notes from the notes page for now."


def test_guidance_falls_back_to_a_tag_of_the_same_language(example: registry.Registry) -> None:
    # zh-TW: no exact tag, no bare "zh": the first tag of the same language (zh-CN) wins over en.
    cap = example.capabilities["note.delete"]
    assert cap.guidance_for("zh-TW") == "当前请前往笔记页面手动删除。"
    assert cap.guidance_for("zh") == "当前请前往笔记页面手动删除。"


def test_guidance_prefers_the_bare_language_over_a_sibling_tag() -> None:
    cap = _cap({"zh-CN": "简体", "zh": "中文", "en": "English"})
    assert cap.guidance_for("zh-TW") == "中文"
    assert cap.guidance_for("zh-CN") == "简体"


def test_guidance_falls_back_to_en_then_to_anything() -> None:
    cap = _cap({"zh-CN": "简体", "en": "English"})
    assert cap.guidance_for("fr-FR") == "English"
    assert cap.guidance_for("") == "English"
    assert _cap({"de": "Deutsch"}).guidance_for("fr") == "Deutsch"
    assert _cap({}).guidance_for("en") == ""


# -- an invalid registry stops the start -----------------------------------------------------


@pytest.mark.parametrize(
    "name", ["schema-closed", "schema-closed-pattern-properties", "schema-closed-true", "write-needs-confirmation"]
)
def test_serve_with_a_bad_registry_exits_2_before_listening(name: str) -> None:
    path = str(FIXTURES / f"{name}.yaml")
    tool, rule, detail = BAD[name]
    env = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
    proc = subprocess.run(
        [str(COUNTERSIGN), "serve", "--registry", path, "--listen", "127.0.0.1:0", "--metrics-listen", ""],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"countersign: {path}: tool '{tool}': {rule}: {detail}" in proc.stderr.splitlines()
    assert "listening" not in proc.stdout
    assert proc.stdout == ""


# -- helpers ---------------------------------------------------------------------------------


def _doc() -> dict[str, Any]:
    import yaml

    with open(FIXTURES / "valid.yaml", encoding="utf-8") as fh:
        doc: dict[str, Any] = yaml.safe_load(fh)
    return doc


def test_a_key_given_twice_stops_the_start() -> None:
    path = FIXTURES / "yaml-duplicate-key.yaml"
    with pytest.raises(RegistryError) as info:
        registry.load(str(path))
    assert str(info.value).startswith(f"{path}: tool '-': yaml: ")
    assert "duplicate key 'confirmation'" in str(info.value)


# -- previews in the caller's locale -------------------------------------------------------------


def test_a_localized_preview_is_checked_like_the_default(tmp_path: Path) -> None:
    """A preview under preview.locales names only the tool's properties, like the default one."""
    import yaml

    raw = yaml.safe_load((ROOT / "examples" / "registry.yaml").read_text())
    tool = next(t for t in raw["tools"] if t["name"] == "delete_todo")
    tool["preview"]["locales"]["en"]["impact"] = "deletes {nosuch}"
    with pytest.raises(RegistryError) as info:
        registry.build(raw, "x.yaml")
    assert info.value.tool == "delete_todo" and "nosuch" in str(info.value)
    tool["preview"]["locales"]["en"] = {"title": "t", "colour": "red"}
    with pytest.raises(RegistryError, match=r"unknown key\(s\) colour in preview.locales.en"):
        registry.build(raw, "x.yaml")
    tool["preview"]["locales"] = ["en"]
    with pytest.raises(RegistryError, match=r"preview.locales must map a locale to a preview"):
        registry.build(raw, "x.yaml")


def test_preview_locale_fallback(example: registry.Registry) -> None:
    from countersign.path.prepare import localized

    preview = example.tools["set_todo_status"].preview
    assert localized(preview, "en")["title"] == "Change a to-do's status"
    assert localized(preview, "en-US")["title"] == "Change a to-do's status"
    assert localized(preview, "zh-CN")["title"] == "更新待办状态"
    assert localized(preview, "")["title"] == "更新待办状态"


# -- approval: none | signed (issue 13, item 2) ------------------------------------------------


def _tool(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in doc["tools"] if t["name"] == name)


def _capability(doc: dict[str, Any], cid: str) -> dict[str, Any]:
    return next(c for c in doc["capabilities"] if c["id"] == cid)


def test_approval_defaults_to_signed_for_always_and_high_risk_writes_only_when_an_issuer_is_configured() -> None:
    doc = _doc()  # create_item: low, default; delete_item: medium, always; list_items: a read
    signed = registry.build(doc, "r.yaml", issuers=True)
    assert {n: t.approval for n, t in signed.tools.items()} == {
        "list_items": "none",
        "create_item": "none",
        "delete_item": "signed",
    }
    assert signed.signed_writes == ",delete_item,"
    plain = registry.build(doc, "r.yaml")
    assert {t.approval for t in plain.tools.values()} == {"none"}
    assert plain.signed_writes == ",,"
    for risk in ("high", "irreversible"):
        doc = _doc()
        _capability(doc, "item.create")["risk"] = _tool(doc, "create_item")["risk"] = risk
        assert registry.build(doc, "r.yaml", issuers=True).tools["create_item"].approval == "signed", risk
        assert registry.build(doc, "r.yaml").tools["create_item"].approval == "none", risk


def test_a_declared_approval_wins_over_the_default_and_a_capability_declares_it_for_its_tool() -> None:
    doc = _doc()
    _tool(doc, "delete_item")["approval"] = "none"
    _capability(doc, "item.create")["approval"] = "signed"
    reg = registry.build(doc, "r.yaml", issuers=True)
    assert (reg.tools["delete_item"].approval, reg.tools["create_item"].approval) == ("none", "signed")
    assert reg.signed_writes == ",create_item,"


@pytest.mark.parametrize(
    ("where", "value", "detail"),
    [
        ("tool", "always", "approval must be one of none, signed"),
        ("capability", "yes", "capability 'item.create': approval must be one of none, signed"),
        ("read", "signed", "approval: signed applies to write tools only (a read runs at Invoke)"),
    ],
)
def test_an_approval_that_is_neither_none_nor_signed_or_on_a_read_is_refused(
    where: str, value: str, detail: str
) -> None:
    doc = _doc()
    target = {
        "tool": _tool(doc, "create_item"),
        "capability": _capability(doc, "item.create"),
        "read": _tool(doc, "list_items"),
    }
    target[where]["approval"] = value
    with pytest.raises(RegistryError) as info:
        registry.build(doc, "r.yaml", issuers=True)
    assert (info.value.rule, info.value.detail) == ("known-keys", detail)


def test_the_approval_needs_issuer_fixture_loads_once_an_issuer_is_configured() -> None:
    reg = registry.load(str(FIXTURES / "approval-needs-issuer.yaml"), issuers=True)
    assert reg.tools["delete_item"].approval == "signed"
