"""The capability registry (DESIGN §4): one bad fixture per registration rule, the exact message of each.

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

from countersign.sidecar import registry
from countersign.sidecar.errors import RegistryError
from countersign.sidecar.registry import Capability

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "registry"
EXAMPLE = ROOT / "examples" / "registry.yaml"
COUNTERSIGN = ROOT / ".venv" / "bin" / "countersign"

# fixture file -> (tool, rule, detail)
BAD: dict[str, tuple[str, str, str]] = {
    "write-needs-enabled-capability": (
        "create_item", "write-needs-enabled-capability",
        "a write tool must name an enabled capability; 'item.archive' is planned"),
    "write-without-capability": (
        "create_item", "write-needs-enabled-capability",
        "a write tool must name an enabled capability; no capability is named"),
    "risk-matches-capability": (
        "delete_item", "risk-matches-capability",
        "risk 'high' differs from capability 'item.delete' risk 'medium'"),
    "confirmation-matches-capability": (
        "delete_item", "confirmation-matches-capability",
        "confirmation 'default' differs from capability 'item.delete' confirmation 'always'"),
    "write-needs-confirmation": (
        "create_item", "write-needs-confirmation", "a write tool may not set confirmation: none"),
    "schema-closed": (
        "create_item", "schema-closed", "schema.properties.meta must set additionalProperties: false"),
    "schema-closed-top": ("list_items", "schema-closed", "schema must set additionalProperties: false"),
    "alias-no-collision": ("create_item", "alias-no-collision", "alias 'title' is also a declared property"),
    "alias-no-collision-target": (
        "create_item", "alias-no-collision", "alias 'name' maps to 'titel', which is not a property"),
    "compensation-is-write-tool": (
        "create_item", "compensation-is-write-tool",
        "compensation names 'list_items', which is not a registered write tool"),
    "no-tool-for-disabled-capability": (
        "archive_item", "no-tool-for-disabled-capability",
        "capability 'item.archive' is planned; no tool of that name may be registered"),
    "known-keys": ("list_items", "known-keys", "unknown key(s) rolse in tool"),
    "template-fields": (
        "create_item", "template-fields",
        "template '{titel}' names {titel}, which is not an argument, the action or the receipt"),
    "adapter-valid": ("delete_item", "adapter-valid", "adapter kind must be http or grpc, not 'ftp'"),
    "unique-names": ("list_items", "unique-names", "the tool is declared twice"),
    "unique-names-capability": ("list_items", "unique-names", "capability 'item.list' is declared twice"),
    "schema-valid": (
        "list_items", "schema-valid", "\"strng\" is not valid under any of the schemas listed in the 'anyOf' keyword"),
    "capability-exists": ("list_items", "capability-exists", "capability 'item.lists' is not declared"),
    "capability-names-tool": (
        "create_item", "capability-names-tool", "capability 'item.create' names tool 'make_item', not 'create_item'"),
    "schema-closed-type-list": (
        "create_item", "schema-closed", "schema.properties.meta must set additionalProperties: false"),
}


# a defect the rule should catch but does not (see the reason)
KNOWN_BUGS: dict[str, tuple[tuple[str, str, str], str]] = {
}


def _cases() -> list[Any]:
    out = [pytest.param(name, *case, id=name) for name, case in BAD.items()]
    for name, (case, reason) in KNOWN_BUGS.items():
        out.append(pytest.param(name, *case, id=name, marks=pytest.mark.xfail(
            strict=True, raises=pytest.fail.Exception, reason=reason)))
    return out


def test_every_rule_has_a_fixture_and_every_fixture_a_case() -> None:
    files = {p.stem for p in FIXTURES.glob("*.yaml")}
    assert files == set(BAD) | set(KNOWN_BUGS) | {"valid", "yaml-duplicate-key"}
    documented = set(re.findall(r"^    ([a-z]+(?:-[a-z]+)+)  ", registry.__doc__ or "", re.MULTILINE))
    assert len(documented) == 15
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
    assert set(example.capabilities) == {"todo.list", "todo.create", "todo.set_status", "todo.delete",
                                         "note.delete", "account.delete"}
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
    assert example.denied_tools("guest") == example.all_writes        # an unknown role may run no write


def test_role_sets_per_role() -> None:
    doc = _doc()
    doc["tools"][0]["roles"] = ["user", "auditor"]          # list_items, a read tool: never in a write set
    doc["tools"][1]["roles"] = ["user", "admin"]            # create_item
    doc["tools"][2]["roles"] = ["admin"]                    # delete_item
    reg = registry.build(doc)
    assert reg.all_writes == ",create_item,delete_item,"
    assert dict(reg.denied_by_role) == {"user": ",delete_item,", "admin": ",,",
                                        "auditor": ",create_item,delete_item,"}
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


@pytest.mark.parametrize("name", ["schema-closed", "write-needs-confirmation"])
def test_serve_with_a_bad_registry_exits_2_before_listening(name: str) -> None:
    path = str(FIXTURES / f"{name}.yaml")
    tool, rule, detail = BAD[name]
    env = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
    proc = subprocess.run(
        [str(COUNTERSIGN), "serve", "--registry", path, "--listen", "127.0.0.1:0", "--metrics-listen", ""],
        capture_output=True, text=True, timeout=60, env=env, cwd=ROOT, check=False,
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
