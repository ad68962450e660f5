"""Canonical JSON (RFC 8785), derived action ids, confirmation tokens, the keys file and record MACs."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from countersign.canonical import canonical
from countersign.errors import InvalidArgument, SettingsError
from countersign.keyring import MIN_KEY_BYTES, Keyring, _json_strings, is_action_id

K1 = bytes(range(32))
K2 = bytes(range(100, 132))
A = "0123456789abcdef0123456789abcdef"


def ring(active: str = "k1", **keys: bytes) -> Keyring:
    return Keyring(active=active, keys=keys or {"k1": K1})


# -- canonical JSON: RFC 8785 -------------------------------------------------------------------


def test_rfc8785_sorting_by_utf16_code_units() -> None:
    # RFC 8785 §3.2.3: the emoji (U+1F600, UTF-16 D83D DE00) sorts before U+FB33, unlike by code point
    value = json.loads(
        r'{"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh", '
        r'"1": "One", "\ud83d\ude00": "Emoji: Grinning Face", "\u0080": "Control", '
        r'"\u00f6": "Latin Small Letter O With Diaeresis"}'
    )
    expected = (
        '{"\\r":"Carriage Return","1":"One","\u0080":"Control",'
        '"\u00f6":"Latin Small Letter O With Diaeresis","\u20ac":"Euro Sign",'
        '"\U0001f600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}'
    )
    assert canonical(value) == expected.encode("utf-8")


def test_rfc8785_small_sorting_vector() -> None:
    assert canonical({"\u20ac": 1, "\r": 2, "1": 3}) == '{"\\r":2,"1":3,"\u20ac":1}'.encode()
    assert canonical({"b": 1, "a": {"d": 1, "c": 2}}) == b'{"a":{"c":2,"d":1},"b":1}'


def test_rfc8785_main_example() -> None:
    # RFC 8785 §3.2.2
    value = json.loads(
        r'{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001], '
        r'"string": "\u20ac$\u000F\u000aA' + "'" + r'\u0042\u0022\u005c\\\"\/", "literals": [null, true, false]}'
    )
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonical(value) == expected.encode("utf-8")


# RFC 8785 Appendix B: IEEE 754 bits -> JSON text
APPENDIX_B = [
    ("0000000000000000", "0"),
    ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"),
    ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"),
    ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"),
    ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"),
    ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
    ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"),
    ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"),
    ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize(("bits", "text"), APPENDIX_B)
def test_rfc8785_number_formatting(bits: str, text: str) -> None:
    (number,) = struct.unpack(">d", bytes.fromhex(bits))
    assert canonical(number) == text.encode()


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (0.000001, "0.000001"),
        (1e-7, "1e-7"),
        (-0.0, "0"),
        (100.0, "100"),
        (4.50, "4.5"),
        (2**53 - 1, "9007199254740991"),
        (-(2**53) + 1, "-9007199254740991"),
        (True, "true"),
        (None, "null"),
        ("a\u2028b", '"a\u2028b"'),
        ("\x1f", '"\\u001f"'),
        ("/", '"/"'),
    ],
)
def test_canonical_scalars(value: Any, text: str) -> None:
    assert canonical(value) == text.encode("utf-8")


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        float("inf"),
        float("-inf"),
        2**53 + 1,
        -(2**53) - 1,
        2**70,
        {1: "int key"},
        {"a": object()},
        b"bytes",
        "\ud800",
        {"\udc00": 1},
    ],
)
def test_canonical_refuses_what_is_not_i_json(value: Any) -> None:
    with pytest.raises(ValueError):
        canonical(value)


# -- derived action ids -----------------------------------------------------------------------

PARTS: list[Any] = ["tenant", "actor", "subject", "session", "turn-1", "create_todo", {"title": "x"}]


def test_action_id_is_stable_and_hex() -> None:
    first = ring().action_id(list(PARTS))
    assert first == ring().action_id(list(PARTS))
    assert is_action_id(first) and len(first) == 32
    # key order of an argument object does not matter: the parts are canonical
    reordered = [*PARTS[:-1], {"title": "x"}]
    assert ring().action_id(reordered) == first


@pytest.mark.parametrize("index", range(len(PARTS)))
def test_action_id_changes_when_any_part_changes(index: int) -> None:
    changed = list(PARTS)
    changed[index] = {"title": "y"} if isinstance(PARTS[index], dict) else PARTS[index] + "'"
    assert ring().action_id(changed) != ring().action_id(PARTS)


def test_action_id_is_framed_and_keyed() -> None:
    r = ring()
    assert r.action_id(["ab", "c"]) != r.action_id(["a", "bc"])
    assert r.action_id(["a"]) != r.action_id(["a", ""])
    assert ring("k2", k2=K2).action_id(PARTS) != r.action_id(PARTS)


# -- the id key: action ids survive key rotation (docs/design.md §7) -----------------------------------------


def test_sidecars_whose_keys_differ_only_in_active_derive_the_same_ids() -> None:
    before, after = Keyring("k1", {"k1": K1, "k2": K2}), Keyring("k2", {"k1": K1, "k2": K2})
    assert before.action_id(PARTS) == after.action_id(PARTS)
    assert before.derived_id("compensate", A) == after.derived_id("compensate", A)


def test_removing_the_active_key_later_keeps_the_ids() -> None:
    """Without an explicit id key, ids come from the key with the smallest key id, whichever is active."""
    k0 = bytes(range(200, 232))
    first = Keyring("k1", {"k0": k0, "k1": K1})
    later = Keyring("k2", {"k0": k0, "k2": K2})  # k1 rotated out, k2 active
    assert first.action_id(PARTS) == later.action_id(PARTS)
    assert first.derived_id("compensate", A) == later.derived_id("compensate", A)


def test_a_one_key_file_of_todays_format_derives_the_ids_it_always_did() -> None:
    import hmac

    expected = hmac.digest(K1, b"action:" + canonical(list(PARTS)), "sha256")[:16].hex()
    assert ring().action_id(list(PARTS)) == expected


def test_an_explicit_id_key_is_used_and_outlives_every_listed_key(tmp_path: Path) -> None:
    id_key = bytes(range(50, 82))
    old = Keyring.from_file(_keys_file(tmp_path, {"active": "k1", "id_key": id_key.hex(), "keys": {"k1": K1.hex()}}))
    new = Keyring.from_file(_keys_file(tmp_path, {"active": "k2", "id_key": id_key.hex(), "keys": {"k2": K2.hex()}}))
    assert old.action_id(PARTS) == new.action_id(PARTS) != ring().action_id(PARTS)
    assert old.id_key == id_key


@pytest.mark.parametrize("bad", ["", "zz" * 32, "ab" * 8, 7])
def test_keys_file_refuses_a_bad_id_key(tmp_path: Path, bad: Any) -> None:
    path = _keys_file(tmp_path, {"active": "k1", "id_key": bad, "keys": {"k1": K1.hex()}})
    with pytest.raises(SettingsError, match="id_key"):
        Keyring.from_file(path)


def test_the_id_key_fingerprint_names_where_the_key_came_from() -> None:
    derived = Keyring("k1", {"k0": K2, "k1": K1})
    assert derived.id_key_source == "k0" and derived.id_fingerprint().startswith("k0:")
    assert Keyring("k1", {"k0": K2, "k1": K1}, id_key=K1).id_fingerprint().startswith("id_key:")
    assert derived.id_fingerprint() == Keyring("k0", {"k0": K2}).id_fingerprint()
    assert derived.id_fingerprint() != ring().id_fingerprint()
    assert K2.hex() not in derived.id_fingerprint()


def test_derived_ids_differ_by_label() -> None:
    r = ring()
    assert r.derived_id("compensation", A) != r.derived_id("continuation", A)
    assert r.derived_id("compensation", A) == r.derived_id("compensation", A)
    assert is_action_id(r.derived_id("compensation", A))


def test_is_action_id() -> None:
    assert is_action_id(A)
    for bad in ("", A[:-1], A + "0", A.upper(), "g" * 32, A[:-1] + "\n"):
        assert not is_action_id(bad)


# -- confirmation tokens ----------------------------------------------------------------------


def test_token_round_trip() -> None:
    r = ring()
    token = r.token(A)
    assert token.startswith(f"cs1.k1.{A}.")
    assert len(token) <= 128
    assert r.parse_token(token) == ("k1", A)


def test_token_signed_by_a_listed_non_active_key_verifies() -> None:
    old = ring("k1", k1=K1)
    token = old.token(A)
    rotated = Keyring(active="k2", keys={"k1": K1, "k2": K2})
    assert rotated.parse_token(token) == ("k1", A)
    assert rotated.parse_token(rotated.token(A)) == ("k2", A)
    assert rotated.token(A, kid="k1") == token


def test_token_labels_do_not_mix() -> None:
    r = ring()
    with pytest.raises(InvalidArgument):
        r.parse_token(r.token(A, label="continue"))
    assert r.parse_token(r.token(A, label="continue"), label="continue") == ("k1", A)


def _forged_mac(token: str) -> str:
    last = token[-1]
    return token[:-1] + ("A" if last != "A" else "B")


BAD_TOKENS: dict[str, Callable[[str], str]] = {
    "forged-mac": lambda t: _forged_mac(t),
    "mac-of-another-action": lambda t: t.replace(A, "f" * 32),
    "truncated": lambda t: t[:-1],
    "truncated-to-three-parts": lambda t: t.rsplit(".", 1)[0],
    "extra-part": lambda t: t + ".x",
    "wrong-prefix": lambda t: "cs2" + t[3:],
    "no-prefix": lambda t: t.split(".", 1)[1],
    "unknown-kid": lambda t: t.replace(".k1.", ".k9.", 1),
    "non-hex-action-id": lambda t: t.replace(A, "g" * 32),
    "upper-case-action-id": lambda t: t.replace(A, A.upper()),
    "short-action-id": lambda t: t.replace(A, A[:-2]),
    "too-long": lambda t: t + "A" * (129 - len(t)),
    "empty": lambda t: "",
    "non-ascii-mac": lambda t: t[:-1] + "é",
    "whitespace": lambda t: t + " ",
}


@pytest.mark.parametrize("name", list(BAD_TOKENS))
def test_bad_tokens_are_confirmation_token_invalid(name: str) -> None:
    r = ring()
    token = BAD_TOKENS[name](r.token(A))
    assert token != r.token(A)
    with pytest.raises(InvalidArgument) as info:
        r.parse_token(token)
    assert info.value.reason == "CONFIRMATION_TOKEN_INVALID"
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_a_token_of_another_key_is_invalid() -> None:
    stranger = Keyring("k1", {"k1": K2})
    with pytest.raises(InvalidArgument) as info:
        ring().parse_token(stranger.token(A))
    assert info.value.reason == "CONFIRMATION_TOKEN_INVALID"


def test_a_token_whose_key_was_removed_is_refused_naming_the_key() -> None:
    """A key removed while a card it sealed is live: the refusal says which key this sidecar no longer lists
    (what an operator needs, docs/runbook.md "Rotating keys"), not that the token was forged."""
    sealed_by_k1 = Keyring("k1", {"k1": K1, "k2": K2}).token(A)
    with pytest.raises(InvalidArgument) as info:
        Keyring("k2", {"k2": K2}).parse_token(sealed_by_k1)
    assert (info.value.code, info.value.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "CONFIRMATION_TOKEN_INVALID")
    assert info.value.message == (
        "the token names key 'k1', which this sidecar's keys file does not list (removed while what it sealed is "
        "live, or the replicas' keys files differ); nothing was executed"
    )
    assert info.value.metadata == {"kid": "k1"}


# -- the keys file ----------------------------------------------------------------------------


def _keys_file(tmp_path: Path, doc: Any) -> str:
    path = tmp_path / "keys.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def test_keys_file_loads(tmp_path: Path) -> None:
    path = _keys_file(tmp_path, {"active": "k2", "keys": {"k1": K1.hex(), "k2": K2.hex()}})
    r = Keyring.from_file(path)
    assert r.active == "k2" and r.keys == {"k1": K1, "k2": K2} and not r.generated
    assert r.parse_token(ring().token(A)) == ("k1", A)


def test_keys_file_refuses_a_short_key(tmp_path: Path) -> None:
    path = _keys_file(tmp_path, {"active": "k1", "keys": {"k1": (b"x" * (MIN_KEY_BYTES - 1)).hex()}})
    with pytest.raises(SettingsError) as info:
        Keyring.from_file(path)
    assert str(info.value) == f"keys file {path}: key 'k1' must be hex of at least 32 bytes"


@pytest.mark.parametrize("secret", ["not hex at all" * 10, 12345, None, ""])
def test_keys_file_refuses_a_key_that_is_not_hex(tmp_path: Path, secret: Any) -> None:
    path = _keys_file(tmp_path, {"active": "k1", "keys": {"k1": secret}})
    with pytest.raises(SettingsError, match="key 'k1' must be hex of at least 32 bytes"):
        Keyring.from_file(path)


@pytest.mark.parametrize("active", ["k9", None])
def test_keys_file_refuses_a_missing_active_key(tmp_path: Path, active: str | None) -> None:
    doc: dict[str, Any] = {"keys": {"k1": K1.hex()}}
    if active is not None:
        doc["active"] = active
    path = _keys_file(tmp_path, doc)
    with pytest.raises(SettingsError) as info:
        Keyring.from_file(path)
    assert str(info.value) == f"keys file {path}: active key {active!r} is not among the keys"


def test_keys_file_refuses_bad_json(tmp_path: Path) -> None:
    path = _keys_file(tmp_path, '{"active": "k1", "keys": {')
    with pytest.raises(SettingsError) as info:
        Keyring.from_file(path)
    assert str(info.value).startswith(f"keys file {path}: cannot read: ")


def test_keys_file_refuses_a_missing_file(tmp_path: Path) -> None:
    path = str(tmp_path / "absent.json")
    with pytest.raises(SettingsError, match="cannot read"):
        Keyring.from_file(path)


@pytest.mark.parametrize("doc", [[], {"active": "k1"}, {"active": "k1", "keys": {}}, {"active": "k1", "keys": []}])
def test_keys_file_refuses_the_wrong_shape(tmp_path: Path, doc: Any) -> None:
    path = _keys_file(tmp_path, doc)
    with pytest.raises(SettingsError) as info:
        Keyring.from_file(path)
    assert str(info.value) == f'keys file {path}: expected {{"active": kid, "keys": {{kid: hex}}}}'


@pytest.mark.parametrize("kid", ["", "has.dot", "x" * 33, "spa ce"])
def test_keys_file_refuses_a_bad_key_id(tmp_path: Path, kid: str) -> None:
    path = _keys_file(tmp_path, {"active": kid, "keys": {kid: K1.hex()}})
    with pytest.raises(SettingsError, match="must match"):
        Keyring.from_file(path)


def test_generated_keyring() -> None:
    r = Keyring.generate()
    assert r.generated and len(r.keys[r.active]) == MIN_KEY_BYTES
    assert r.parse_token(r.token(A)) == (r.active, A)


# -- bindings and record MACs -----------------------------------------------------------------


def test_binding_is_keyed_and_ordered() -> None:
    owner = ["t1", "u1", "u1", "s1"]
    r = ring()
    assert r.binding("k1", owner) == r.binding("k1", list(owner))
    assert r.binding("k1", owner) != r.binding("k1", ["t1", "u1", "u2", "s1"])
    assert r.binding("k1", ["t1", "u1", "u2", "s1"]) != r.binding("k1", ["t1", "u2", "u1", "s1"])
    assert Keyring("k1", {"k1": K1, "k2": K2}).binding("k2", owner) != r.binding("k1", owner)


def test_record_mac_verifies_and_fails_when_a_byte_changes() -> None:
    r = Keyring("k1", {"k1": K1, "k2": K2})
    payload = canonical({"state": "READY", "tool": "create_todo", "args": {"title": "x"}})
    mac = r.mac("k1", "action", payload)
    assert r.verify("k1", "action", payload, mac)
    for i in range(len(payload)):
        changed = payload[:i] + bytes([payload[i] ^ 0x01]) + payload[i + 1 :]
        assert not r.verify("k1", "action", changed, mac)
    assert not r.verify("k1", "action", payload + b" ", mac)
    assert not r.verify("k1", "receipt", payload, mac)  # another kind of record
    assert not r.verify("k2", "action", payload, mac)  # another key
    assert not r.verify("k9", "action", payload, mac)  # an unknown key
    assert not r.verify("k1", "action", payload, mac[:-1])
    assert not r.verify("k1", "action", payload, mac[:-1] + "é")
    assert not r.verify("k1", "action", payload, "")


# -- today's formats, computed independently: a sidecar must verify what the last release wrote -----------------
# (tokens in users' hands, bindings and MACs in Redis, the id key's fingerprint pinned in Redis, digests in audit
# exports; docs/runbook.md "Keyed hashes")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _hmac(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


IDS = [hashlib.sha256(str(i).encode()).hexdigest()[:32] for i in range(20)]


def test_a_token_is_the_documented_hmac_in_unpadded_base64url() -> None:
    r = ring()
    tokens = {a: r.token(a) for a in IDS}
    for a, token in tokens.items():
        assert token == f"cs1.k1.{a}.{_b64(_hmac(K1, b'confirm:' + a.encode()))}"
        assert r.parse_token(token) == ("k1", a)
    assert not any("=" in t for t in tokens.values())


def test_a_binding_a_record_mac_and_a_digest_are_the_documented_hmacs() -> None:
    r = ring()
    owner = ["t1", "alice", "alice", "s1", ""]
    assert r.binding("k1", owner) == _hmac(K1, b"bind:" + json.dumps(owner).encode())[:16].hex()
    assert r.mac("k1", "card", b"{}") == _b64(_hmac(K1, b"record:card:{}"))
    assert r.digest("args", b'{"title":"x"}') == "k1." + _b64(_hmac(K1, b'digest:args:{"title":"x"}')[:16])


@pytest.mark.parametrize("size", [1, 31, 32, 33, 55, 63, 64, 65, 100, 128, 200])
def test_every_mac_is_hmac_sha256_for_keys_of_every_length(size: int) -> None:
    # the keyring hashes each key's padded blocks once (a key longer than SHA-256's 64-byte block is hashed first,
    # as RFC 2104 says); messages across the block edges
    key = bytes((7 * i + size) % 256 for i in range(size))
    r = Keyring("k", {"k": key}, id_key=key[::-1])
    for length in (0, 1, 54, 55, 56, 63, 64, 65, 119, 120, 1000):
        data = bytes((i * 13) % 256 for i in range(length))
        assert r.mac("k", "outcome:" + A, data) == _b64(_hmac(key, b"record:outcome:" + A.encode() + b":" + data))
        assert r.derived_id("x", data.hex()) == _hmac(key[::-1], b"x:" + data.hex().encode())[:16].hex()
    assert r.mac("k", "card", b"{}") == r.mac("k", "card", b"{}")  # the pads are not consumed by a MAC


@pytest.mark.parametrize(
    "owner",
    [["t1", "alice", "alice", "s1", ""], ["", '"q"', "\\", "\n\x00", "é待\U0001f600", "\ud800", "\u2028"], []],
)
def test_a_binding_and_a_turn_hash_are_over_json_dumps_of_their_strings(owner: list[str]) -> None:
    r = ring()
    assert r.binding("k1", owner) == _hmac(K1, b"bind:" + json.dumps(owner).encode())[:16].hex()
    assert r.id_hash("turn", owner) == _hmac(K1, b"turn:" + json.dumps(owner).encode())[:16].hex()


def test_a_key_replaced_in_the_keys_mapping_is_the_one_used() -> None:
    r = ring()
    before = r.mac("k1", "card", b"{}")
    r.keys["k1"] = K2
    assert r.mac("k1", "card", b"{}") == _b64(_hmac(K2, b"record:card:{}")) != before


def test_a_digest_names_its_key_and_matches_only_its_data_under_that_key() -> None:
    r = Keyring("k2", {"k1": K1, "k2": K2})
    old = ring().digest("outcome", b"done")  # made by a sidecar whose active key was k1
    assert old.startswith("k1.") and r.digest("outcome", b"done").startswith("k2.")
    assert r.digest("outcome", b"done", kid="k1") == old
    assert r.digest_matches(old, "outcome", b"done")
    assert r.digest_matches(r.digest("outcome", b"done"), "outcome", b"done")
    assert not r.digest_matches(old, "outcome", b"done!")
    assert not r.digest_matches(old, "reply", b"done")  # another label
    assert not r.digest_matches("k9." + old.split(".", 1)[1], "outcome", b"done")  # a key not listed
    assert not r.digest_matches("k2." + old.split(".", 1)[1], "outcome", b"done")  # another listed key
    assert not r.digest_matches(old[:-1], "outcome", b"done")
    assert not r.digest_matches(old + "\udc80", "outcome", b"done")


def test_ids_and_turn_hashes_are_the_documented_hmacs_under_the_id_key() -> None:
    r = Keyring("k1", {"k1": K1, "k0": K2})  # the id key: k0's, the smallest key id
    assert r.derived_id("compensate", A) == _hmac(K2, b"compensate:" + A.encode())[:16].hex()
    assert r.id_hash("turn", ["t1", "r1"]) == _hmac(K2, b'turn:["t1", "r1"]')[:16].hex()
    assert r.id_hash("turn", ["t1", "r1"]) == Keyring("k0", {"k0": K2}).id_hash("turn", ["t1", "r1"])
    assert r.id_hash("turn", ["t1", "r1"]) != r.id_hash("turn", ["t1", "r2"]) != r.id_hash("other", ["t1", "r2"])


def test_the_id_key_fingerprint_a_redis_pinned_is_still_recognised() -> None:
    derived = Keyring("k1", {"k0": K2, "k1": K1})
    assert derived.id_fingerprint() == "k0:" + _hmac(K2, b"id-key-fingerprint")[:12].hex()
    pinned = Keyring("k1", {"k1": K1}, id_key=K2)
    assert pinned.id_fingerprint() == "id_key:" + _hmac(K2, b"id-key-fingerprint")[:12].hex()


def test_a_keys_file_without_an_id_key_derives_ids_with_its_smallest_key(tmp_path: Path) -> None:
    loaded = Keyring.from_file(_keys_file(tmp_path, {"active": "k1", "keys": {"k1": K1.hex(), "k0": K2.hex()}}))
    assert loaded.id_key == K2 and loaded.id_key_source == "k0"
    assert loaded.action_id(PARTS) == Keyring("k1", {"k1": K1, "k0": K2}).action_id(PARTS)


def test_a_bad_id_key_is_named_with_the_file(tmp_path: Path) -> None:
    path = _keys_file(tmp_path, {"active": "k1", "id_key": "ab", "keys": {"k1": K1.hex()}})
    with pytest.raises(SettingsError) as info:
        Keyring.from_file(path)
    assert str(info.value) == f"keys file {path}: id_key must be hex of at least {MIN_KEY_BYTES} bytes"


def test_a_malformed_token_is_told_so() -> None:
    with pytest.raises(InvalidArgument) as info:
        ring().parse_token(_forged_mac(ring().token(A)))
    assert info.value.message == "the confirmation token is malformed or forged"


def test_nothing_of_a_token_longer_than_128_characters_is_read() -> None:
    """A token is at most 128 characters: a longer one is malformed, whatever key it names; one of exactly 128
    that names a key this sidecar does not list is told so."""
    kid = "k" * 32
    longest = f"cs1.{kid}.{A}." + "A" * (128 - len(f"cs1.{kid}.{A}."))
    assert len(longest) == 128
    with pytest.raises(InvalidArgument) as info:
        ring().parse_token(longest)
    assert repr(kid) in info.value.message
    with pytest.raises(InvalidArgument) as info:
        ring().parse_token(longest + "A")
    assert info.value.message == "the confirmation token is malformed or forged"


@pytest.mark.parametrize("mac", ["\udc80", "é\ud800"])
def test_a_mac_that_is_not_unicode_text_is_refused_never_raised(mac: str) -> None:
    r = ring()
    with pytest.raises(InvalidArgument) as info:
        r.parse_token(r.token(A).rsplit(".", 1)[0] + "." + mac)
    assert info.value.reason == "CONFIRMATION_TOKEN_INVALID"
    assert not r.verify("k1", "card", b"{}", mac)
    assert not r.digest_matches("k1." + mac, "outcome", b"x")


@pytest.mark.parametrize("size", [0, 1, 2, 3, 16, 31, 32, 33, 64])
def test_macs_tokens_and_digests_are_base64url_without_padding_of_the_hmac(size: int) -> None:
    """The encoding of every MAC, token and digest is base64url (RFC 4648 §5, '-' and '_') with the '=' padding
    cut, byte for byte what base64.urlsafe_b64encode writes; every byte value of every position included."""
    from countersign.keyring import _b64

    for start in range(0, 256, 7):
        data = bytes((start + i * 37) % 256 for i in range(size))
        assert _b64(data) == base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")
    keys = ring()
    raw = hmac.digest(K1, b"record:card:" + b"body", "sha256")
    assert keys.mac("k1", "card", b"body") == base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class _Str(str):
    pass


@settings(max_examples=800, deadline=None)
@given(
    st.lists(
        st.text(max_size=6) | st.sampled_from(["bench", "u_1", 'a"b', "a\\b", "\x7f", "é", "\ud800", ""]), max_size=6
    )
)
@example([])
@example([""])
@example(["", ""])
@example([_Str("t"), "u"])
@example(["t", 1])
@example(["t", None])
def test_a_bindings_strings_are_the_bytes_json_dumps_wrote(parts: list[Any]) -> None:
    """A binding (and an id hash) is the HMAC of json.dumps(parts): the stored bindings of cards and grants issued
    before still match the same owner."""
    try:
        expected: bytes | type[Exception] = json.dumps(parts).encode()
    except TypeError:
        expected = TypeError
    try:
        got: bytes | type[Exception] = _json_strings(parts)
    except TypeError:
        got = TypeError
    assert got == expected
