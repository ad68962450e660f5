"""Shared set-up of the approvals tests: a test issuer with real keys in a real JWKS file, and a Verifier (unit
tests); ``start_issuer`` / ``CardIssuer`` for a sidecar under test (--approvals), signing approvals of its cards."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from countersign.approvals import Expected, Verifier
from countersign.testing.approvals import (
    SigningKey,
    approval_claims,
    context_claims,
    sign,
    write_jwks,
    write_settings,
)

ISS = "https://app.example"
AUD = "countersign"
NOW = 1_800_000_000.0
ACTION = "0123456789abcdef0123456789abcdef"
DIGEST = "sha256:uCawrYwtET_0dSQ9IJQkJhN-vrwB7taxdB5s9_TSiV4"
MFA = "urn:example:acr:mfa"

# generated once per test session: RSA key generation is the slow part
KEYS = {alg: SigningKey.generate(alg, kid=f"{alg.lower()}-1") for alg in ("EdDSA", "ES256", "RS256")}


def expected(**overrides: Any) -> Expected:
    base: dict[str, Any] = dict(
        actor_id="alice", tenant_id="t1", session_id="s1", action_id=ACTION, digest=DIGEST, now=NOW, risk="low"
    )
    base.update(overrides)
    return Expected(**base)


def claims(**overrides: Any) -> dict[str, Any]:
    """A valid approval of the card ``expected()`` describes."""
    return approval_claims(
        issuer=ISS,
        actor_id="alice",
        tenant_id="t1",
        session_id="s1",
        action_id=ACTION,
        digest=DIGEST,
        now=NOW,
        **overrides,
    )


@dataclass
class AppIssuer:
    work: Path
    jwks: Path
    settings: Path
    verifier: Verifier

    def token(self, alg: str = "EdDSA", **overrides: Any) -> str:
        return sign(claims(**overrides), KEYS[alg])


async def make_issuer(
    work: Path,
    *keys: SigningKey,
    algorithms: list[str] | None = None,
    step_up: dict[str, list[str]] | None = None,
    **issuer: Any,
) -> AppIssuer:
    jwks = write_jwks(work / "app.jwks.json", *(keys or tuple(KEYS.values())))
    entry: dict[str, Any] = {"issuer": ISS, "audience": AUD, "jwks": jwks.name, **issuer}
    if algorithms is not None:
        entry["algorithms"] = algorithms
    settings = write_settings(work / "approvals.json", [entry], step_up=step_up)
    return AppIssuer(work, jwks, settings, await Verifier.load(settings))


@dataclass
class CardIssuer:
    """A trusted issuer of a sidecar under test (the app backend that shows a card to its user): the settings file
    the sidecar's --approvals names, the JWKS file it reads, and the key that signs now."""

    settings: Path
    jwks: Path
    key: SigningKey
    issuer: str = ISS

    def approve(self, card: Any, context: Any = None, key: SigningKey | None = None, **claims: Any) -> str:
        """The user's approval of ``card`` (a ConfirmationCard) as the caller ``context`` (a CallContext; default
        alice/t1/s1); ``claims`` add or replace claims (iss, aud, sub, exp, acr, ...)."""
        return sign(
            approval_claims(
                issuer=self.issuer,
                actor_id=context.actor_id if context is not None else "alice",
                tenant_id=context.tenant_id if context is not None else "t1",
                session_id=context.session_id if context is not None else "s1",
                action_id=card.action_id,
                digest=card.approval_digest,
                **claims,
            ),
            key or self.key,
        )

    def context(self, key: SigningKey | None = None, **claims: Any) -> str:
        """A context assertion (the signed-in user's session): alice in t1, session s1, role user by default."""
        base: dict[str, Any] = {"actor_id": "alice", "tenant_id": "t1", "session_id": "s1"}
        names = {"actor_id", "tenant_id", "session_id", "role", "admin"}
        base.update({k: v for k, v in claims.items() if k in names})
        extra = {k: v for k, v in claims.items() if k not in names}
        return sign(context_claims(issuer=self.issuer, **base, **extra), key or self.key)


def start_issuer(work: Path, *, step_up: dict[str, list[str]] | None = None, alg: str = "EdDSA") -> CardIssuer:
    """An issuer with a fresh key of ``alg`` in a JWKS file, and the approvals settings naming it."""
    key = SigningKey.generate(alg, kid=f"app-{uuid.uuid4().hex[:6]}")
    jwks = write_jwks(work / f"app-{uuid.uuid4().hex[:6]}.jwks.json", key)
    entry: dict[str, Any] = {"issuer": ISS, "audience": AUD, "jwks": jwks.name}
    settings = write_settings(work / f"approvals-{uuid.uuid4().hex[:6]}.json", [entry], step_up=step_up)
    return CardIssuer(settings, jwks, key)
