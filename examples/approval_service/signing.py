"""What the app backend signs, and the digest it recomputes from the card it shows (docs/design.md §12).

Written as an app team would write it with PyJWT and ``rfc8785``, not with countersign's own code: the
digest here is a second, independent implementation of docs/approvals.md (a test checks the two agree).
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jwt
import rfc8785
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class CardError(ValueError):
    """The card sent to the page cannot be shown or signed; ``reason`` is the answer's reason code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Card:
    """The confirmation card as the user sees it: exactly the fields the approval digest covers."""

    action_id: str
    tool: str
    arguments: dict[str, Any]
    preview: dict[str, Any]
    policy_version: str
    expires_at_ms: int

    @classmethod
    def from_json(cls, body: Any) -> Card:
        """From a ConfirmationCard in proto JSON (field names as in the proto) plus its ``policy_version``."""
        if not isinstance(body, dict):
            raise CardError("CARD_INVALID", "the card must be a JSON object")
        action_id, tool = body.get("action_id"), body.get("tool_name")
        if not isinstance(action_id, str) or not action_id or not isinstance(tool, str) or not tool:
            raise CardError("CARD_INVALID", "action_id and tool_name are required")
        raw_args = body.get("prepared_arguments_json", "{}")
        try:
            arguments = json.loads(raw_args) if isinstance(raw_args, str) else None
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            raise CardError("CARD_INVALID", "prepared_arguments_json must hold a JSON object")
        preview = body.get("preview", {})
        if not isinstance(preview, dict):
            raise CardError("CARD_INVALID", "preview must be an object")
        policy_version = body.get("policy_version")
        if not isinstance(policy_version, str):
            raise CardError("CARD_INVALID", "policy_version is required")
        return cls(action_id, tool, arguments, _preview(preview), policy_version, _expiry_ms(body))

    def digest(self) -> str:
        """sha256: + base64url(SHA-256(RFC 8785 of the documented object)), over what this page shows."""
        seconds, millis = divmod(self.expires_at_ms, 1000)
        document: dict[str, Any] = {
            "v": 1,
            "tool": self.tool,
            "arguments": self.arguments,
            "preview": self.preview,
            "policy_version": self.policy_version,
            "expires_at": f"{datetime.fromtimestamp(seconds, UTC):%Y-%m-%dT%H:%M:%S}.{millis:03d}Z",
        }
        raw = hashlib.sha256(rfc8785.dumps(document)).digest()
        return "sha256:" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _preview(raw: dict[str, Any]) -> dict[str, Any]:
    if set(raw) - {"title", "target", "impact", "details"}:
        raise CardError("CARD_INVALID", "preview has fields this page does not show")
    details = raw.get("details", [])
    if not isinstance(details, list) or not all(
        isinstance(d, dict) and not set(d) - {"label", "value"} for d in details
    ):
        raise CardError("CARD_INVALID", "preview.details must be a list of {label, value}")
    out: dict[str, Any] = {k: raw.get(k, "") for k in ("title", "target", "impact")}
    out["details"] = [{"label": d.get("label", ""), "value": d.get("value", "")} for d in details]
    if not all(isinstance(v, str) for v in (*list(out.values())[:3], *(x for d in out["details"] for x in d.values()))):
        raise CardError("CARD_INVALID", "preview fields must be strings")
    return out


def _expiry_ms(body: dict[str, Any]) -> int:
    """``expires_at`` as proto JSON renders a Timestamp (RFC 3339), or ``expires_at_ms``."""
    if isinstance(body.get("expires_at_ms"), int):
        return int(body["expires_at_ms"])
    text = body.get("expires_at")
    try:
        moment = datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise CardError("CARD_INVALID", "expires_at must be an RFC 3339 time with a zone")
    span = moment - _EPOCH
    if span % timedelta(milliseconds=1):
        raise CardError("CARD_INVALID", "expires_at has more than millisecond precision")
    return span // timedelta(milliseconds=1)


@dataclass(frozen=True)
class User:
    """The signed-in user (in this example: stated by the demo in a header or cookie, ``tenant/actor/session``)."""

    tenant_id: str
    actor_id: str
    session_id: str
    role: str = "user"


class Signer:
    """The app's own Ed25519 key: it signs approvals, grants and session assertions; publishes the JWKS."""

    def __init__(self, key: Ed25519PrivateKey, *, issuer: str, audience: str, ttl: int = 120) -> None:
        self.key, self.issuer, self.audience, self.ttl = key, issuer, audience, ttl
        self.public_jwk: dict[str, Any] = jwt.algorithms.OKPAlgorithm.to_jwk(key.public_key(), as_dict=True)
        self.kid = _thumbprint(self.public_jwk)
        self.public_jwk.update({"kid": self.kid, "use": "sig", "alg": "EdDSA"})

    @staticmethod
    def load_or_create(path: Path | None) -> Ed25519PrivateKey:
        """The key in ``path`` (PEM, PKCS#8); created there (mode 0600) when absent; in memory without a path."""
        if path is None:
            return Ed25519PrivateKey.generate()
        if path.exists():
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
            if not isinstance(key, Ed25519PrivateKey):
                raise ValueError(f"{path} does not hold an Ed25519 private key")
            return key
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        path.touch(mode=0o600)
        path.write_bytes(pem)
        return key

    def jwks(self) -> dict[str, Any]:
        return {"keys": [self.public_jwk]}

    def _sign(self, claims: dict[str, Any], ttl: int) -> str:
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "aud": self.audience,
            "iat": now,
            "exp": now + ttl,
            "jti": uuid.uuid4().hex,
            **claims,
        }
        return jwt.encode(claims, self.key, algorithm="EdDSA", headers={"kid": self.kid, "typ": "JWT"})

    def approval(self, card: Card, user: User, *, acr: str, amr: list[str]) -> str:
        return self._sign(
            {
                "sub": user.actor_id,
                "tid": user.tenant_id,
                "sid": user.session_id,
                "act": card.action_id,
                "dig": card.digest(),
                "acr": acr,
                "amr": amr,
            },
            self.ttl,
        )

    def grant(self, user: User, *, capability: str, uses: int, ttl: int, args: dict[str, Any] | None) -> str:
        claims: dict[str, Any] = {"kind": "grant", "sub": user.actor_id, "tid": user.tenant_id, "cap": capability}
        claims["uses"] = uses
        if args is not None:
            claims["args"] = args
        return self._sign(claims, ttl)

    def context(self, user: User, *, admin: dict[str, str] | None, ttl: int = 900) -> str:
        claims: dict[str, Any] = {"sub": user.actor_id, "tid": user.tenant_id, "sid": user.session_id}
        claims["role"] = user.role
        if admin is not None:
            claims["adm"] = admin
        return self._sign(claims, ttl)


def _thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638 JWK thumbprint: a kid that changes exactly when the key does."""
    required = {k: jwk[k] for k in ("crv", "kty", "x")}
    raw = json.dumps(required, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(hashlib.sha256(raw).digest()).rstrip(b"=").decode()
