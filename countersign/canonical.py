"""RFC 8785 (JCS) canonical JSON: the one encoding of a JSON value wherever it is hashed or MAC'd.

The bytes are rfc8785's, always: an action id is a hash of them, so two sidecars of different versions must
derive the same bytes for the same value (or one call becomes two actions). rfc8785 is pure Python, ~150k
instructions for a todo's answer (4 % of a Confirm); for the values the path hashes (strings, integers, booleans,
null, lists and objects) the standard library's C encoder writes exactly the same bytes, and it is used for those:

- RFC 8785 escapes only ``"``, ``\\`` and the control characters (``\\b \\f \\n \\r \\t``, else ``\\u00xx`` in
  lower-case hex), and writes every other character as UTF-8: json with ``ensure_ascii=False`` does the same;
- it sorts an object's keys by their UTF-16 code units: the same order as Python's (code points) unless a key holds
  a character beyond U+FFFF, whose surrogates sort below U+E000..U+FFFF;
- integers are written as they are, within +-(2**53 - 1).

Anything else takes rfc8785's own path: a float (ECMAScript's number format is not Python's), an integer out of
that range or a key beyond U+FFFF, a subclass of str or int (an enum), a key that is not a string, any other type
(rfc8785 raises), and a lone surrogate (rfc8785 raises). tests/unit/test_canonical.py holds the two paths equal.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

import rfc8785

_INT_MAX = 2**53 - 1
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_LEAVES = frozenset({str, bool, type(None)})  # written alike by both, at any depth


def _compact_encoder() -> Callable[[Any], str]:
    """``json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))``, without the set-up that
    call makes every time (an encoder object, its C encoder and two closures: ~10k instructions, more than a small
    event's encoding): the C encoder json itself uses, made once. Where json has none, or it does not write what
    json.JSONEncoder writes (checked here, once), json.JSONEncoder.encode."""
    encoder = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), check_circular=False)
    make = getattr(json.encoder, "c_make_encoder", None)
    probe = {"b": [1, True, None, 'é\n\x01"\\'], "a": {"c": "", "B": -2}, "": []}
    try:
        once = make(None, encoder.default, json.encoder.encode_basestring, None, ":", ",", True, False, True)  # type: ignore[misc]
        if "".join(once(probe, 0)) != encoder.encode(probe):
            return encoder.encode
    except Exception:  # no C encoder (another Python), or another signature
        return encoder.encode

    def encode(value: Any) -> str:
        return "".join(once(value, 0))

    return encode


compact = _compact_encoder()


def canonical(value: Any) -> bytes:
    """RFC 8785 canonical JSON bytes of a JSON value (raises ValueError on non-I-JSON values)."""
    if _plain(value):
        try:
            return compact(value).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: rfc8785 says so, in its words
            pass
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError) as exc:
        raise ValueError(str(exc)) from exc


def _plain(value: Any, depth: int = 0) -> bool:
    """True when the standard encoder writes ``value`` exactly as RFC 8785 does (see the module docstring)."""
    kind = type(value)
    if kind in _LEAVES:
        return True
    if kind is int:
        return bool(-_INT_MAX <= value <= _INT_MAX)
    if depth > 64:  # deeper: rfc8785's path (and its RecursionError, should it come to that)
        return False
    if kind is dict:
        for key in value:
            if type(key) is not str or (not key.isascii() and _ASTRAL.search(key)):
                return False
        return _all_plain(value.values(), depth + 1)
    if kind is list or kind is tuple:
        return _all_plain(value, depth + 1)
    return False


def _all_plain(items: Iterable[Any], depth: int) -> bool:
    """``all(_plain(item, depth) for item in items)``, with strings, booleans, nulls and integers checked where
    they are met, not by a call each (a todo's answer: 16.5k instructions walked a call per value, 9.9k so)."""
    for item in items:
        kind = type(item)
        if kind in _LEAVES:
            continue
        if kind is int:
            if -_INT_MAX <= item <= _INT_MAX:
                continue
            return False
        if not _plain(item, depth):
            return False
    return True


def as_text(value: str) -> str:
    """``value`` as Unicode text: a lone surrogate (what json decodes from an escape such as ``\\ud800``: JSON admits
    one) as U+FFFD. A downstream's words (a refusal's message, a read's summary) reach protobuf strings, which are
    UTF-8 text: a lone surrogate there raised, an INTERNAL after the write, whose outcome was never recorded."""
    return value if value.isascii() else _SURROGATE.sub("\ufffd", value)


def not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (RFC 8259)")


# the decoder json.loads uses when given no options (it builds none per call), but NaN, Infinity and -Infinity, which
# Python's json reads and RFC 8259 does not admit, are errors: a 201 {"id": NaN} was a receipt for the resource "NaN"
_DECODER = json.JSONDecoder(parse_constant=not_json)
_NOT_UTF8_FIRST = b"\x00\xef\xfe\xff"  # a first byte after which json.detect_encoding may not answer utf-8


def loads(raw: bytes | bytearray) -> Any:
    """``json.loads(raw)`` with NaN and Infinity refused, its value or its error exactly, for the bytes of a body (a
    downstream's answer, a stored card): json.loads first guesses the bytes' encoding (a BOM, or the zero bytes of
    UTF-16/32 in the first four); two bytes, the first neither zero nor a BOM's first, the second not zero, are
    UTF-8 by that guess, and are decoded as it decodes them, then parsed by the decoder it would use (~8k
    instructions less for a todo's answer). tests/unit/test_canonical.py holds the two equal."""
    if len(raw) >= 2 and raw[0] not in _NOT_UTF8_FIRST and raw[1]:
        return _DECODER.decode(raw.decode("utf-8", "surrogatepass"))
    return json.loads(raw, parse_constant=not_json)
