"""canonical() writes rfc8785's bytes, whichever of its two paths a value takes (countersign/canonical.py).

Action ids, card and grant MACs, audit digests are hashes of these bytes: a sidecar that wrote other bytes than the
previous version for the same value would derive another action id for the same call, and run it twice.
"""

from __future__ import annotations

import enum
import json
import re
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from countersign.canonical import _plain, canonical, loads


class Colour(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 2


def reference(value: Any) -> bytes | type[Exception]:
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError):
        return ValueError


def ours(value: Any) -> bytes | type[Exception]:
    try:
        return canonical(value)
    except ValueError:
        return ValueError


# every kind of character that matters: ASCII, the escaped controls, BMP (CJK, the private use area above the
# surrogates, U+FFFF), astral (sorted by UTF-16 code units in RFC 8785), and lone surrogates (refused)
CHARS = st.sampled_from(
    ["a", "Z", "0", " ", '"', "\\", "/", "\b", "\f", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "\u2028", "é", "待",
     "\ue000", "\uffff", "\U0001f600", "\U00010000", "\ud800", "\udfff"]
)  # fmt: skip
TEXT = st.text(CHARS, max_size=6) | st.text(max_size=6)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) - 2, max_value=2**53 + 2)
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | TEXT
    | st.just(Colour.RED)
    | st.just(Level.HIGH)
)
KEYS = TEXT | st.integers(min_value=0, max_value=3) | st.just(Colour.RED)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.lists(inner, max_size=3).map(tuple) | st.dictionaries(KEYS, inner, max_size=5)
    ),
    max_leaves=20,
)
PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1) | st.text(CHARS, max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(CHARS, max_size=6), inner, max_size=5),
    max_leaves=20,
)


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VALUES)
@example(2**53)  # the edges the fast path must leave to rfc8785, every run (not only when hypothesis draws them)
@example(-(2**53))
@example({"\ue000": 1, "\U0001f600": 2})
@example({"a": [1.0, Colour.RED]})
def test_every_value_has_rfc8785s_bytes_or_is_refused_as_it_refuses_it(value: Any) -> None:
    assert ours(value) == reference(value)


@settings(max_examples=400, deadline=None)
@given(PLAIN)
def test_the_values_the_path_hashes_have_rfc8785s_bytes(value: Any) -> None:
    assert ours(value) == reference(value)


@pytest.mark.parametrize(
    "value",
    [
        {"title": "bench", "dueAt": None, "priority": 2},
        {"status": "201", "body": {"id": "t_1", "title": "买牛奶", "version": 1, "owner": "u1", "done": False}},
        ["tenant", "actor", "subject", "session", "", "request", "r1", "create_todo", {"title": "x"}],
        {"\U0001f600": 1, "\ue000": 2, "a": 3},  # astral key: rfc8785's path (UTF-16 order: the emoji first)
        {"n": 2**53 - 1, "m": -(2**53) + 1},
    ],
)
def test_known_values(value: Any) -> None:
    assert canonical(value) == rfc8785.dumps(value)


def test_what_the_fast_path_leaves_to_rfc8785() -> None:
    assert _plain({"a": [1, "x", None, True, {"b": ""}]})
    for value in (1.5, 2**53, -(2**53), Colour.RED, Level.HIGH, {1: "x"}, {"\U0001f600": 1}, b"x", {"a": {1.0}}):
        assert not _plain(value)


def test_a_lone_surrogate_is_refused_with_rfc8785s_message() -> None:
    with pytest.raises(ValueError, match="non-UTF-8"):
        canonical({"title": "\ud800"})


def _walk(value: Any, depth: int = 0) -> bool:
    """_plain as it was (main at 1498405: a call per value), the reference the inlined one must equal."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-(2**53 - 1) <= value <= 2**53 - 1)
    if depth > 64:
        return False
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or (not key.isascii() and re.search("[\U00010000-\U0010ffff]", key)):
                return False
            if not _walk(item, depth + 1):
                return False
        return True
    if kind is list or kind is tuple:
        return all(_walk(item, depth + 1) for item in value)
    return False


def _nested(depth: int, leaf: Any, *, dicts: bool) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"k": value} if dicts else [value]
    return value


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VALUES | PLAIN)
@example(_nested(64, "x", dicts=True))  # the depth limit, both sides of it, with a leaf and a container last
@example(_nested(65, "x", dicts=True))
@example(_nested(65, [], dicts=True))
@example(_nested(66, 1, dicts=False))
@example(_nested(65, {}, dicts=False))
@example({"a": [2**53 - 1, -(2**53 - 1), True, None]})
@example({"a": [2**53]})
def test_the_fast_paths_check_says_what_the_walk_of_a_call_per_value_said(value: Any) -> None:
    assert _plain(value) is _walk(value)


def _loaded(loads: Any, raw: bytes | bytearray) -> tuple[str, str]:
    """What a loads said: the value (as repr: NaN is not equal to itself) or the error's type and words."""
    try:
        return "value", repr(loads(raw))
    except Exception as exc:  # the same error, whichever it is
        return type(exc).__name__, str(exc)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"]


@st.composite
def json_bytes(draw: st.DrawFn) -> bytes | bytearray:
    if draw(st.booleans()):
        raw = draw(st.binary(max_size=24))
    else:
        text = json.dumps(draw(JSON_VALUES), ensure_ascii=draw(st.booleans()))
        text = draw(st.sampled_from(["", " ", "\n", "\ufeff"])) + text + draw(st.sampled_from(["", " ", "x", "}"]))
        raw = text.encode(draw(st.sampled_from(ENCODINGS)), "surrogatepass")
    return bytearray(raw) if draw(st.booleans()) else raw


@settings(max_examples=800, deadline=None)
@given(json_bytes())
@example(b"")
@example(b"{")
@example(b"{}")
@example(b"1")
@example(b"12")
@example(b"[\x00")
@example(b'"\xed\xa0\x80"')
@example(b"\xef\xbb\xbf{}")
@example(b"\xff\xfe{\x00}\x00")
@example(bytearray(b'{"id":"t_1","version":1}'))
def test_loads_of_bytes_says_what_json_loads_says(raw: bytes | bytearray) -> None:
    """The answers and stored cards read with canonical.loads are the values (or the errors) json.loads gives, with
    NaN and Infinity refused (RFC 8259 has no such number)."""

    def refused(name: str) -> None:
        raise ValueError(f"{name} is not JSON (RFC 8259)")

    assert _loaded(loads, raw) == _loaded(lambda r: json.loads(r, parse_constant=refused), raw)


@pytest.mark.parametrize("raw", [b"NaN", b"[Infinity]", b'{"v": -Infinity}', "[NaN]".encode("utf-16")])
def test_loads_refuses_nan_and_infinity(raw: bytes) -> None:
    with pytest.raises(ValueError, match="not JSON"):
        loads(raw)
