"""Shared set-up of the approvals tests: a test issuer with real keys in a real JWKS file, and a Verifier."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from countersign.approvals import Expected, Verifier
from countersign.testing.approvals import SigningKey, approval_claims, sign, write_jwks, write_settings

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
