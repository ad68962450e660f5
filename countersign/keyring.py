"""Action ids, confirmation tokens, bindings and record MACs: everything keyed by the server key.

* The action id is derived, not random (docs/design.md §7): an HMAC of who, where, which tool and the
  canonical normalised arguments, so the model retrying a call in the same turn lands on the
  same action. It is keyed by the *id key*, never by the active MAC key: two sidecars in the
  middle of a rotation (different active keys) must derive the same id for the same call, or
  one call becomes two actions and runs twice. The id key is the keys file's ``id_key`` when it
  has one, else the key with the smallest key id (so a keys file of the older format keeps
  working, and rotating ``active`` or removing any other key changes no id).
* The token is ``cs1.<kid>.<A>.<mac>`` with ``mac = HMAC(key, "confirm:" + A)``. Nothing of it is
  stored; it is checked in constant time before Redis is touched.
* Owner and subject are stored only as a keyed hash (the binding); every record is MAC'd.
* What leaves the process about arguments, outcomes and replies (logs, audit events, exports) is a
  keyed hash (``digest``), never a bare SHA-256 that a dictionary of likely values reverses.

Canonical JSON is RFC 8785 (JCS) wherever something is hashed (``countersign.canonical``).

Every MAC is HMAC-SHA256 (RFC 2104) computed from the key's two padded states, hashed once per key (``_Pads``):
``hmac.digest`` sets up OpenSSL's MAC machinery anew for every call, ~26k instructions and 10-15 us for a short
message here, of which the message itself is a few hundred; a Confirm makes eight. The bytes are HMAC's
(tests/unit/test_keyring.py holds them equal to ``hmac.digest`` for keys of every length).
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from countersign.canonical import canonical
from countersign.errors import InvalidArgument, SettingsError
from countersign.reasons import Reason

TOKEN_PREFIX = "cs1"
MIN_KEY_BYTES = 32
_KID = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_ACTION_ID = re.compile(r"^[0-9a-f]{32}$")
_TOKEN_MAX = 128


_BLOCK = 64  # SHA-256's block size
_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))


class _Pads:
    """One key's HMAC-SHA256 (RFC 2104): the inner and outer hashes with the padded key absorbed, copied per MAC."""

    __slots__ = ("inner", "outer")

    def __init__(self, key: bytes) -> None:
        if len(key) > _BLOCK:
            key = hashlib.sha256(key).digest()
        block = key.ljust(_BLOCK, b"\0")
        self.inner = hashlib.sha256(block.translate(_IPAD))
        self.outer = hashlib.sha256(block.translate(_OPAD))

    def digest(self, message: bytes) -> bytes:
        inner = self.inner.copy()
        inner.update(message)
        outer = self.outer.copy()
        outer.update(inner.digest())
        return outer.digest()


_quote = json.encoder.encode_basestring_ascii


def _json_strings(parts: list[str]) -> bytes:
    """``json.dumps(parts).encode()`` (its bytes exactly) for a list of strings, without json.dumps's set-up per
    call (~10k instructions, more than the HMAC it feeds). Strings of printable ASCII without a quote or a
    backslash (an owner's ids, as a rule) are written as they are, which is what json writes for them (one check of
    them all: a quote per string cost ~6k more); anything else is quoted by json's own quoting."""
    if type(parts) is list and parts:
        try:
            joined = "".join(parts)
        except TypeError:  # not all strings: json.dumps says what it says about them
            return json.dumps(parts).encode()
        if joined.isascii() and joined.isprintable() and '"' not in joined and "\\" not in joined:
            return ('["' + '", "'.join(parts) + '"]').encode()
        return ("[" + ", ".join(map(_quote, parts)) + "]").encode()
    return json.dumps(parts).encode()


def _bad_token() -> InvalidArgument:
    # made when raised, not before every check (an error object costs ~7k instructions)
    return InvalidArgument(Reason.CONFIRMATION_TOKEN_INVALID, "the confirmation token is malformed or forged")


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def _b64(data: bytes) -> str:
    """``base64.urlsafe_b64encode(data)`` without its padding, in one C call and a translate (base64's two Python
    wrappers cost more than a MAC's encoding: a Confirm encodes seven)."""
    return binascii.b2a_base64(data, newline=False).translate(_URLSAFE).rstrip(b"=").decode("ascii")


def is_action_id(value: str) -> bool:
    return bool(_ACTION_ID.match(value))


def _hex_key(path: str, name: str, secret: Any) -> bytes:
    try:
        raw = bytes.fromhex(secret) if isinstance(secret, str) else b""
    except ValueError:
        raw = b""
    if len(raw) < MIN_KEY_BYTES:
        raise SettingsError(f"keys file {path}: {name} must be hex of at least {MIN_KEY_BYTES} bytes")
    return raw


@dataclass(frozen=True)
class Keyring:
    """The HMAC keys: one active key signs, every listed key verifies (so keys rotate); the id key derives
    action ids and never rotates."""

    active: str
    keys: dict[str, bytes]
    generated: bool = False
    id_key: bytes = b""  # empty: the key with the smallest key id (see id_key_source)
    _pads: dict[bytes, _Pads] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.id_key:
            object.__setattr__(self, "id_key", self.keys[min(self.keys)])

    def _mac(self, key: bytes, message: bytes) -> bytes:
        """HMAC-SHA256 under key, from its pads (made at its first use; keyed by the key's bytes, so a key
        replaced in ``keys`` gets its own)."""
        pads = self._pads.get(key)
        if pads is None:
            pads = self._pads[key] = _Pads(key)
        return pads.digest(message)

    @property
    def id_key_source(self) -> str:
        """Where the id key comes from: "id_key" (pinned in the keys file) or the key id it is derived from."""
        smallest = min(self.keys)
        return smallest if self.id_key == self.keys[smallest] else "id_key"

    def id_fingerprint(self) -> str:
        """Names the id key without revealing it, so sidecars sharing one Redis can tell they agree."""
        return f"{self.id_key_source}:{self._mac(self.id_key, b'id-key-fingerprint')[:12].hex()}"

    @classmethod
    def from_file(cls, path: str) -> Keyring:
        try:
            with open(path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError) as exc:
            raise SettingsError(f"keys file {path}: cannot read: {exc}") from exc
        if not isinstance(doc, dict) or not isinstance(doc.get("keys"), dict) or not doc["keys"]:
            raise SettingsError(f'keys file {path}: expected {{"active": kid, "keys": {{kid: hex}}}}')
        keys: dict[str, bytes] = {}
        for kid, secret in doc["keys"].items():
            if not isinstance(kid, str) or not _KID.match(kid):
                raise SettingsError(f"keys file {path}: key id {kid!r} must match {_KID.pattern}")
            keys[kid] = _hex_key(path, f"key {kid!r}", secret)
        active = doc.get("active")
        if active not in keys:
            raise SettingsError(f"keys file {path}: active key {active!r} is not among the keys")
        id_key = _hex_key(path, "id_key", doc["id_key"]) if "id_key" in doc else b""
        return cls(active=str(active), keys=keys, id_key=id_key)

    @classmethod
    def generate(cls) -> Keyring:
        return cls(active="gen", keys={"gen": os.urandom(MIN_KEY_BYTES)}, generated=True)

    def _hmac(self, kid: str, label: str, data: bytes) -> bytes:
        return self._mac(self.keys[kid], label.encode() + b":" + data)

    # -- action ids and tokens ---------------------------------------------------------------

    def action_id(self, parts: list[Any]) -> str:
        """The derived action id: 128 bits of HMAC over the canonical parts under the id key, in hex."""
        return self._mac(self.id_key, b"action:" + canonical(parts))[:16].hex()

    def derived_id(self, label: str, action_id: str) -> str:
        """An id derived from an action (for example its compensation), under the id key."""
        return self._mac(self.id_key, label.encode() + b":" + action_id.encode())[:16].hex()

    def id_hash(self, label: str, parts: list[str]) -> str:
        """A keyed hash that must not change when keys rotate (where one user turn's facts are kept)."""
        return self._mac(self.id_key, label.encode() + b":" + _json_strings(parts))[:16].hex()

    def token(self, action_id: str, kid: str | None = None, label: str = "confirm") -> str:
        kid = kid or self.active
        return f"{TOKEN_PREFIX}.{kid}.{action_id}.{_b64(self._hmac(kid, label, action_id.encode()))}"

    def parse_token(self, token: str, label: str = "confirm") -> tuple[str, str]:
        """Check a token in constant time; return (kid, action id) or raise CONFIRMATION_TOKEN_INVALID."""
        if not token or len(token) > _TOKEN_MAX:
            raise _bad_token()
        parts = token.split(".")
        if len(parts) != 4 or parts[0] != TOKEN_PREFIX:
            raise _bad_token()
        _, kid, action_id, mac = parts
        if not _ACTION_ID.match(action_id):
            raise _bad_token()
        if kid not in self.keys:
            if not _KID.match(kid):
                raise _bad_token()
            # a key removed while cards it sealed are live (or replicas with different keys files): say which,
            # so the operator can list it again (docs/runbook.md, "Rotating keys"); a key id is no secret
            raise InvalidArgument(
                Reason.CONFIRMATION_TOKEN_INVALID,
                f"the token names key {kid!r}, which this sidecar's keys file does not list (removed while "
                "what it sealed is live, or the replicas' keys files differ); nothing was executed",
                metadata={"kid": kid},
            )
        expected = _b64(self._hmac(kid, label, action_id.encode()))
        if not hmac.compare_digest(expected.encode(), mac.encode("utf-8", "replace")):
            raise _bad_token()
        return kid, action_id

    # -- bindings and record MACs ------------------------------------------------------------

    def binding(self, kid: str, owner: list[str]) -> str:
        """A keyed hash of (tenant, actor, subject, session): stored instead of the ids."""
        # A list of strings: plain JSON is already unambiguous (and much cheaper than RFC 8785 here).
        return self._hmac(kid, "bind", _json_strings(owner))[:16].hex()

    def mac(self, kid: str, kind: str, payload: bytes) -> str:
        return _b64(self._hmac(kid, "record:" + kind, payload))

    def verify(self, kid: str, kind: str, payload: bytes, mac: str) -> bool:
        if kid not in self.keys:
            return False
        return hmac.compare_digest(self.mac(kid, kind, payload).encode(), mac.encode("utf-8", "replace"))

    # -- keyed hashes for logs and audit -----------------------------------------------------

    def digest(self, label: str, data: bytes, kid: str | None = None) -> str:
        """``<kid>.<mac>``: a hash of arguments, an outcome or a reply that may leave the process.

        Only a holder of the key can test a guess against it (docs/runbook.md, "Keyed hashes"):
        base64url(HMAC-SHA256(key, "digest:" + label + ":" + data)[:16]).
        """
        kid = kid or self.active
        return f"{kid}.{_b64(self._hmac(kid, 'digest:' + label, data)[:16])}"

    def digest_matches(self, value: str, label: str, data: bytes) -> bool:
        """Whether ``value`` is the digest of data under the key it names."""
        kid = value.split(".", 1)[0]
        if kid not in self.keys:
            return False
        return hmac.compare_digest(self.digest(label, data, kid).encode(), value.encode("utf-8", "replace"))
