"""Decoding ``arguments_json`` (docs/design.md §5, step 4): a decimal is kept as sent, a number JSON cannot carry
is refused where it was written, and the 64 KiB limit is exact, in characters and in bytes (issue 11, "Test
strength": each of these was a surviving mutant)."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest

from countersign import registry
from countersign.errors import InvalidArgument
from countersign.path import policy
from countersign.path.policy import Allowed, Phase
from countersign.testing.calls import ctx

LIMIT = policy.MAX_ARGUMENTS_BYTES
SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "amount": {"type": "number"},
        "memo": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "meta": {
            "type": "object",
            "additionalProperties": False,
            "required": ["ref"],
            "properties": {"ref": {"type": "string"}},
        },
    },
}


def ledger(schema: dict[str, Any], url: str = "http://127.0.0.1:9/entries") -> registry.Registry:
    """A registry of one write tool, write_entry, whose arguments ``schema`` describes, sent to ``url``."""
    return registry.build(
        {
            "policy_version": "args.1",
            "capabilities": [{"id": "ledger.write", "status": "enabled", "tool": "write_entry", "risk": "low"}],
            "tools": [
                {
                    "name": "write_entry",
                    "capability": "ledger.write",
                    "is_write": True,
                    "roles": ["user"],
                    "schema": schema,
                    "adapter": {"kind": "http", "execute": {"url": url}},
                }
            ],
        },
        "ledger",
    )


LEDGER = ledger(SCHEMA)


def entry(text: str) -> Allowed:
    out = policy.authorize(LEDGER, ctx(), "write_entry", text, Phase.INVOKE)
    assert isinstance(out, Allowed)
    return out


def refused(text: str) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as info:
        policy.authorize(LEDGER, ctx(), "write_entry", text, Phase.INVOKE)
    assert (info.value.code, info.value.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ARGS_INVALID")
    return info.value


@pytest.mark.parametrize("number", ["1.5", "-0.25", "2.5e-3", "1E+2", "0.1"])
def test_a_decimal_is_kept_as_sent(number: str) -> None:
    out = entry(f'{{"amount": {number}, "memo": "x"}}')
    assert out.arguments == {"amount": float(number), "memo": "x"}
    assert json.loads(out.canonical_args) == {"amount": float(number), "memo": "x"}


def test_the_prepared_bytes_of_a_decimal_are_its_canonical_form() -> None:
    assert entry('{"amount": 1.50}').canonical_args == b'{"amount":1.5}'


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1.7976931348623159e308"])
def test_a_number_beyond_a_double_is_refused_as_arguments_json(number: str) -> None:
    """It decodes to infinity: refused at decoding, naming the field arguments_json and the number."""
    err = refused(f'{{"amount": {number}}}')
    assert [v.field for v in err.violations] == ["arguments_json"]
    assert number in err.message and "out of range" in err.message


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_a_constant_json_does_not_have_is_refused(constant: str) -> None:
    err = refused(f'{{"amount": {constant}}}')
    assert [v.field for v in err.violations] == ["arguments_json"]
    assert "is not JSON" in err.message


def _memo_of(size: int, fill: str = "a") -> str:
    """Arguments of exactly ``size`` bytes (UTF-8), the memo padded with ``fill`` (one byte at the end if
    ``fill``'s width does not divide the room)."""
    frame = len('{"memo": ""}')
    width = len(fill.encode())
    count, rest = divmod(size - frame, width)
    text = '{"memo": "' + fill * count + "a" * rest + '"}'
    assert len(text.encode()) == size
    return text


@pytest.mark.parametrize("fill", ["a", "€"], ids=["ascii", "three-byte"])
def test_exactly_64_kib_is_accepted_and_one_byte_more_is_refused(fill: str) -> None:
    assert entry(_memo_of(LIMIT, fill)).arguments["memo"].startswith(fill)
    err = refused(_memo_of(LIMIT + 1, fill))
    assert [v.field for v in err.violations] == ["arguments_json"]
    assert f"larger than {LIMIT} bytes" in err.message


def test_the_limit_is_in_bytes_whatever_the_characters() -> None:
    text = _memo_of(LIMIT + 2, "€")
    assert len(text) < LIMIT < len(text.encode())
    refused(text)


# -- a schema violation names the argument by its JSON path, and says what is wrong in a bounded sentence ----------


def fields(err: InvalidArgument) -> list[tuple[str, str]]:
    return [(v.field, v.description) for v in err.violations]


def test_a_nested_violation_is_named_by_its_path() -> None:
    assert [f for f, _ in fields(refused('{"meta": {"ref": 5}}'))] == ["meta.ref"]
    assert fields(refused('{"meta": {}}')) == [("meta.ref", '"ref" is a required property')]
    name = "x" * 70
    assert fields(refused(f'{{"meta": {{"ref": "r", "{name}": 1}}}}')) == [
        (f"meta.{name}", f"additional properties are not allowed ({name[:64]!r} was unexpected)")
    ]


def test_every_violation_is_told_an_unexpected_property_as_well_as_the_others() -> None:
    err = refused('{"amount": "two", "evil": 1, "worse": 2}')
    assert sorted(f for f, _ in fields(err)) == ["amount", "evil", "worse"]
    err = refused('{"evil": 1, "meta": {"ref": "r", "worse": 2}}')  # two objects, each with one too many
    assert sorted(f for f, _ in fields(err)) == ["evil", "meta.worse"]


def test_what_the_validator_says_is_cut_to_300_characters() -> None:
    long = "a" * 400
    (field, description), *_ = fields(refused(f'{{"amount": "{long}"}}'))
    assert field == "amount" and len(description) == 300 and description.startswith('"aaa')
    required = "r" * 400
    tool = ledger(
        {
            "type": "object",
            "additionalProperties": False,
            "required": [required],
            "properties": {required: {"type": "string"}},
        }
    )
    with pytest.raises(InvalidArgument) as info:
        policy.authorize(tool, ctx(), "write_entry", "{}", Phase.INVOKE)
    ((field, description),) = fields(info.value)
    assert field == required and len(description) == 300 and description.startswith('"rrr')


def test_empty_arrays_and_objects_are_arguments_like_any_other() -> None:
    assert entry('{"tags": [], "memo": ""}').arguments == {"tags": [], "memo": ""}
    assert entry('{"tags": ["a", "b"]}').arguments == {"tags": ["a", "b"]}


def test_a_duplicate_key_is_refused_naming_it() -> None:
    err = refused('{"memo": "a", "memo": "b"}')
    assert "duplicate key 'memo'" in err.message and [v.field for v in err.violations] == ["arguments_json"]


BY_ID = ledger(
    {"type": "object", "additionalProperties": False, "properties": {"memo": {"type": "string"}}},
    url="http://127.0.0.1:9/entries/{memo}/lines",
)


@pytest.mark.parametrize("value", ["", ".", "..", "a/b", "a\\b", "%2e%2e", "%252e%252e"])
def test_a_value_bound_to_a_path_segment_that_would_change_the_paths_shape_is_refused_at_invoke(value: str) -> None:
    """``/entries/{memo}/lines`` with memo ".." would be sent as ``/entries/lines`` (issue 11, item 3)."""
    with pytest.raises(InvalidArgument) as info:
        policy.authorize(BY_ID, ctx(), "write_entry", json.dumps({"memo": value}), Phase.INVOKE)
    assert (info.value.code, info.value.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ARGS_INVALID")
    assert [v.field for v in info.value.violations] == ["memo"]
    assert "URL path" in info.value.violations[0].description


def test_any_other_value_fills_a_path_segment() -> None:
    out = policy.authorize(BY_ID, ctx(), "write_entry", '{"memo": "第 1 行 ?#&"}', Phase.INVOKE)
    assert isinstance(out, Allowed) and out.arguments == {"memo": "第 1 行 ?#&"}


def test_arguments_that_are_not_an_object_are_told_so() -> None:
    for text in ("[]", '"x"', "1", "null"):
        err = refused(text)
        assert err.message == "arguments_json must be a JSON object"
        assert fields(err) == [("arguments_json", "arguments_json must be a JSON object")]


def test_an_integer_from_2_to_the_53_on_is_refused_as_not_canonical() -> None:
    """RFC 8785 (what every hash and the card use) has no form for 2**53: refused, never rounded."""
    err = refused(f'{{"amount": {2**53}}}')
    assert err.message.startswith("arguments are not canonical JSON: ") and str(2**53) in err.message
    assert [(v.field, v.description) for v in err.violations] == [("", err.message.split(": ", 1)[1])]
    assert entry(f'{{"amount": {2**53 - 1}}}').arguments == {"amount": 2**53 - 1}


def test_a_violation_of_the_whole_object_is_named_root() -> None:
    tool = ledger({**SCHEMA, "minProperties": 1})
    with pytest.raises(InvalidArgument) as info:
        policy.authorize(tool, ctx(), "write_entry", "{}", Phase.INVOKE)
    assert info.value.message.startswith("arguments of 'write_entry' do not match its schema: (root): ")
    assert [v.field for v in info.value.violations] == [""]


def test_many_violations_are_told_the_first_5_in_the_message_and_20_in_detail() -> None:
    extra = {f"extra{i:02}": i for i in range(25)}
    err = refused(json.dumps(extra))
    assert len(err.violations) == 20
    assert err.message.count("additional properties are not allowed") == 5


def test_a_lone_surrogate_is_refused_saying_so() -> None:
    err = refused('{"memo": "\\ud800"}')
    assert fields(err) == [("arguments_json", "arguments_json holds a lone UTF-16 surrogate")]
