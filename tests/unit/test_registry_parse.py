"""The registry's YAML is parsed by libyaml, with the pure-Python parser's verdict and messages on a refusal
(countersign/registry/load.py ``parse``; issue 17: the pure-Python parser was most of what a start does after its
imports). Both parsers must give the same document: every registry of the repository, generated documents in
every style PyYAML writes, and documents built to be awkward; and a refusal still names what the pure-Python
parser names."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from countersign.errors import RegistryError

registry_load = importlib.import_module("countersign.registry.load")  # the package's ``load`` is its function

ROOT = Path(__file__).resolve().parents[2]
REGISTRIES = sorted(
    p
    for p in [*ROOT.glob("examples/*.yaml"), *ROOT.glob("tests/fixtures/**/*.yaml"), *ROOT.glob("deploy/**/*.yaml")]
    if p.is_file()
)


def verdict(parse: Any, text: str | bytes) -> tuple[str, str]:
    """What a parser made of a text: the document's repr (keys in order; NaN and self-reference included), or the
    refusal's type and message."""
    try:
        return "document", repr(parse(text))
    except (yaml.YAMLError, TypeError, ValueError, RecursionError) as exc:
        return type(exc).__name__, str(exc)


def reference(text: str | bytes) -> Any:
    return yaml.load(text, Loader=registry_load._StrictLoader)


def test_libyaml_is_there_to_be_used() -> None:
    # the image's PyYAML wheel carries libyaml; without it the start would quietly keep the slow parser
    assert registry_load._FastStrictLoader is not None


@pytest.mark.parametrize("path", REGISTRIES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_yaml_file_of_the_repository_parses_to_the_same_document(path: Path) -> None:
    raw = path.read_bytes()
    try:
        expected = list(yaml.load_all(raw, Loader=registry_load._StrictLoader))
    except yaml.YAMLError:
        with pytest.raises(yaml.YAMLError):
            list(yaml.load_all(raw, Loader=registry_load._FastStrictLoader))
        return
    assert list(yaml.load_all(raw, Loader=registry_load._FastStrictLoader)) == expected


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    st.sampled_from(
        [
            "yes",
            "no",
            "on",
            "off",
            "~",
            "null",
            "0x1F",
            "0o17",
            "1e3",
            ".inf",
            "-.nan",
            "2001-12-14",
            "12:30:45",
            "'",
            '"',
            "#",
            "- x",
            "a: b",
            "&a",
            "*a",
            "!tag",
            "%",
            "\t",
            "\u0085",
            "\u2028",
        ]
    ),
)
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10) | st.integers(), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(documents, st.sampled_from([None, True, False]), st.sampled_from([None, "'", '"', "|", ">"]), st.booleans())
def test_generated_documents_parse_to_the_same_document(
    doc: Any, flow: bool | None, style: str | None, wide: bool
) -> None:
    text = yaml.safe_dump(doc, default_flow_style=flow, default_style=style, allow_unicode=wide, width=40)
    expected = verdict(reference, text)
    assert expected[0] == "document"
    assert verdict(registry_load.parse, text) == expected, text


AWKWARD = [
    "a: &x [1, 2]\nb: *x\n",
    "? [complex, key]\n: value\n",
    "a: |\n  literal\n   kept\n\nb: >-\n  folded\n  text\n",
    "%YAML 1.1\n---\na: 1\n...\n",
    "a: 'it''s'\nb: \"tab\\there \\u00e9\"\n",
    "- !!str 123\n- !!int '7'\n- !!binary aGVsbG8=\n",
    "a: 2001-12-14t21:59:43.10-05:00\nb: 1_000\nc: 0b101\nd: 1:20\n",
    "\ufeffa: bom\n",
    "a: [1, 2,]\n",
    "a:\n- x\n-   - y\n    - z\n",
    "a: b\r\nc: d\r\n",
    "a: x\u2028y\n",
    "a: !!set {x, y}\nb: !!omap [{k: v}]\n",
    "a: 1\na: 2\n",
    "<<: {a: 1}\nb: 2\n",
    "a: &a [*a]\n",
]


@pytest.mark.parametrize("text", AWKWARD)
def test_awkward_documents_get_the_same_verdict(text: str) -> None:
    # the same document, or the same refusal with the pure-Python parser's own message
    assert verdict(registry_load.parse, text) == verdict(reference, text)


def test_a_refused_registry_names_what_the_pure_python_parser_names() -> None:
    with pytest.raises(RegistryError) as info:
        registry_load.loads("policy_version: v1\ntools: *missing_tools\n", "reg.yaml")
    assert info.value.rule == "yaml"
    assert "undefined alias 'missing_tools'" in str(info.value) and "line 2, column 8" in str(info.value)
