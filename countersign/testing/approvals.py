"""A test issuer: real keys, JWKS files and signed tokens, valid or hostile, for tests, the demo and benches.

    key = SigningKey.generate("EdDSA", kid="k1")
    write_jwks(path, key)                                  # atomically (write, then rename)
    token = sign(approval_claims(...), key)                # a valid approval
    sign(claims, key, alg="none")                          # unsigned
    sign(claims, key, alg="HS256", secret=key.public_pem()) # HMAC with the public key as the secret
    sign(claims, key, headers={"jku": "https://evil/jwks"})

Tokens are assembled here by hand (base64url JSON header and claims) and signed with PyJWT's algorithm
objects, so any header, claim or algorithm can be produced, including ones no verifier should accept.
"""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
_ALGORITHMS = jwt.algorithms.get_default_algorithms()


@dataclass(frozen=True)
class SigningKey:
    """A private key of a test issuer, with the kid and algorithm its tokens name."""

    kid: str
    alg: str
    private: PrivateKey | bytes  # bytes: an HMAC secret

    @classmethod
    def generate(cls, alg: str = "EdDSA", kid: str | None = None) -> SigningKey:
        private: PrivateKey | bytes
        if alg == "EdDSA":
            private = ed25519.Ed25519PrivateKey.generate()
        elif alg == "ES256":
            private = ec.generate_private_key(ec.SECP256R1())
        elif alg == "ES384":
            private = ec.generate_private_key(ec.SECP384R1())
        elif alg.startswith(("RS", "PS")):
            private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        elif alg.startswith("HS"):
            private = os.urandom(64)
        else:
            raise ValueError(f"no test key for {alg}")
        return cls(kid or f"{alg.lower()}-{uuid.uuid4().hex[:8]}", alg, private)

    @classmethod
    def from_pem(cls, pem: bytes, alg: str, kid: str) -> SigningKey:
        private = serialization.load_pem_private_key(pem, password=None)
        if not isinstance(private, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise ValueError("an Ed25519, EC or RSA private key is needed")
        return cls(kid, alg, private)

    def private_pem(self) -> bytes:
        if isinstance(self.private, bytes):
            raise ValueError("an HMAC secret has no PEM form")
        return self.private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def public_pem(self) -> bytes:
        if isinstance(self.private, bytes):
            raise ValueError("an HMAC secret has no public key")
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def public_jwk(self) -> dict[str, Any]:
        """The JWK a JWKS lists for this key (for HMAC: the secret itself, kty oct)."""
        algorithm = _ALGORITHMS[self.alg]
        key = self.private if isinstance(self.private, bytes) else self.private.public_key()
        jwk: dict[str, Any] = algorithm.to_jwk(key, as_dict=True)
        jwk.update({"kid": self.kid, "use": "sig", "alg": self.alg})
        return jwk


def jwks(*keys: SigningKey) -> dict[str, Any]:
    return {"keys": [key.public_jwk() for key in keys]}


def write_jwks(path: str | Path, *keys: SigningKey) -> Path:
    """Write the JWKS of ``keys`` to ``path`` atomically (a new inode, so a reader sees the change)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    tmp.write_text(json.dumps(jwks(*keys)), encoding="utf-8")
    os.replace(tmp, path)
    return path


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def sign(
    claims: Mapping[str, Any],
    key: SigningKey | None,
    *,
    alg: str | None = None,
    kid: str | None = "",
    headers: Mapping[str, Any] | None = None,
    secret: bytes | None = None,
) -> str:
    """A compact JWS of ``claims``. ``alg`` overrides the key's (``none`` leaves the signature empty);
    ``secret`` signs HMAC with those bytes; ``kid=None`` omits the kid, "" uses the key's."""
    alg = alg or (key.alg if key else "none")
    header: dict[str, Any] = {"alg": alg, "typ": "JWT"}
    if kid is not None and (kid or key):
        header["kid"] = kid or (key.kid if key else "")
    header.update(headers or {})
    signing_input = f"{b64url(_json(header))}.{b64url(_json(claims))}"
    if alg.lower() == "none":
        return signing_input + "."
    signer: Any = secret if secret is not None else key.private if key else None
    if signer is None:
        raise ValueError("a key or a secret is needed to sign")
    signature = _ALGORITHMS[alg].sign(signing_input.encode("ascii"), signer)
    return f"{signing_input}.{b64url(signature)}"


def _json(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def approval_claims(
    *,
    issuer: str,
    actor_id: str,
    tenant_id: str,
    session_id: str,
    action_id: str,
    digest: str,
    audience: str = "countersign",
    now: float | None = None,
    ttl: float = 120,
    acr: str | None = None,
    amr: list[str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The claims of a valid approval of one card (``extra`` adds or overrides claims)."""
    now = time.time() if now is None else now
    claims: dict[str, Any] = {
        "iss": issuer,
        "aud": audience,
        "sub": actor_id,
        "tid": tenant_id,
        "sid": session_id,
        "act": action_id,
        "dig": digest,
        "iat": int(now),
        "exp": int(now + ttl),
        "jti": uuid.uuid4().hex,
    }
    if acr is not None:
        claims["acr"] = acr
    if amr is not None:
        claims["amr"] = amr
    claims.update(extra)
    return claims


def ciba_claims(
    *,
    issuer: str,
    actor_id: str,
    tenant_id: str,
    session_id: str,
    action_id: str,
    digest: str,
    audience: str = "countersign",
    now: float | None = None,
    ttl: float = 120,
    tenant_in_entry: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    """An OpenID CIBA access token with RFC 9396 authorization_details, as an IdP issues it once the user
    approved on their device (RFC 9068 JWT access-token claims; tid/sid inside the entry or top-level)."""
    now = time.time() if now is None else now
    entry: dict[str, Any] = {"type": "countersign_action", "act": action_id, "dig": digest}
    claims: dict[str, Any] = {
        "iss": issuer,
        "aud": [audience, f"{issuer.rstrip('/')}/userinfo"],
        "sub": actor_id,
        "client_id": "agent-client",
        "scope": "openid",
        "iat": int(now),
        "exp": int(now + ttl),
        "jti": uuid.uuid4().hex,
        "authorization_details": [entry],
    }
    if tenant_in_entry:
        entry.update({"tid": tenant_id, "sid": session_id})
    else:
        claims.update({"tid": tenant_id, "sid": session_id})
    claims.update(extra)
    return claims


def grant_claims(
    *,
    issuer: str,
    actor_id: str,
    tenant_id: str,
    capability: str,
    uses: int,
    audience: str = "countersign",
    now: float | None = None,
    ttl: float = 3600,
    args: Mapping[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The claims of a standing grant: ``uses`` writes of ``capability`` until iat + ttl."""
    now = time.time() if now is None else now
    claims: dict[str, Any] = {
        "iss": issuer,
        "aud": audience,
        "kind": "grant",
        "sub": actor_id,
        "tid": tenant_id,
        "cap": capability,
        "uses": uses,
        "iat": int(now),
        "exp": int(now + ttl),
        "jti": uuid.uuid4().hex,
    }
    if args is not None:
        claims["args"] = dict(args)
    claims.update(extra)
    return claims


def context_claims(
    *,
    issuer: str,
    actor_id: str,
    tenant_id: str,
    session_id: str,
    role: str = "user",
    admin: Mapping[str, str] | None = None,
    audience: str = "countersign",
    now: float | None = None,
    ttl: float = 900,
    **extra: Any,
) -> dict[str, Any]:
    """The claims of a context assertion (the signed-in user's session, as the app's backend states it)."""
    now = time.time() if now is None else now
    claims: dict[str, Any] = {
        "iss": issuer,
        "aud": audience,
        "sub": actor_id,
        "tid": tenant_id,
        "sid": session_id,
        "role": role,
        "iat": int(now),
        "exp": int(now + ttl),
    }
    if admin is not None:
        claims["adm"] = dict(admin)
    claims.update(extra)
    return claims


def write_settings(
    path: str | Path,
    issuers: list[dict[str, Any]],
    *,
    step_up: Mapping[str, list[str]] | None = None,
    leeway: int | None = None,
) -> Path:
    """An approvals settings file (JSON) for ``issuers``: dicts as the file lists them."""
    data: dict[str, Any] = {"issuers": issuers}
    if step_up is not None:
        data["step_up"] = dict(step_up)
    if leeway is not None:
        data["leeway"] = leeway
    path = Path(path)
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path
