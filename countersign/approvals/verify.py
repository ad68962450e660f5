"""Verify approvals, grants and context assertions: compact JWS signed by a configured issuer.

Every refusal raises an ApprovalError whose ``check`` names the failing check. Checks run in this order,
so a token that was not signed by a trusted key never gets a more precise answer than ``signature``:

    malformed      not a compact JWS of JSON objects (or a claim of the wrong type, a repeated key)
    header         a jku / x5u / jwk / x5c header (keys are never taken from a token), crit or b64
    algorithm      alg none (before anything else is read), then, once the issuer is known: an
                   algorithm the issuer does not list, or one the named key does not fit
    issuer         iss is not a configured issuer
    key            the kid is not in the issuer's JWKS (the async variants re-fetch a URL's set first)
    signature      the signature does not verify
    audience       aud does not name this sidecar (as this issuer calls it)
    expired / not_yet_valid / lifetime     exp passed; nbf or iat ahead; exp too far after iat or now
    kind           a grant offered as an approval, an approval as a grant, either as a context
    owner / tenant / session               sub, tid, sid differ from the card's owner
    action / digest                        act is another action; dig is not this card's digest
    step_up        the risk needs an acr the approval does not carry
    capability / uses / args               (grants) what a grant covers is malformed

The synchronous methods do no network I/O (a JWKS file is stat'ed); the ``*_async`` ones, on an unknown
kid of a URL issuer, re-fetch that issuer's keys (rate-limited) and try once more.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import rfc8785

from countersign.approvals.checks import (
    _acr,
    _action_entry,
    _amr,
    _audience,
    _b64,
    _bound,
    _Failer,
    _has_action,
    _json_segment,
    _show,
    _string,
    _times,
)
from countersign.approvals.errors import (
    ApprovalError,
    ApprovalInvalid,
    ApprovalRequired,
    ContextInvalid,
)
from countersign.approvals.issuers import RISKS, Issuer, Issuers, load_settings
from countersign.approvals.jwks import Clock

MAX_TOKEN_CHARS = 16 * 1024
MAX_GRANT_USES = 1000
FORBIDDEN_HEADERS = ("jku", "x5u", "jwk", "x5c", "crit", "b64")
ADMIN_MODES = ("READONLY", "MAINTAIN")


@dataclass(frozen=True)
class Expected:
    """What an approval of one card must bind: the card's owner, action, digest and risk; the time now."""

    actor_id: str
    tenant_id: str
    session_id: str
    action_id: str
    # the card's approval digest; None: not compared here (the sidecar's claim script compares the evidence's
    # ``digest`` with the card's, atomically, since the card is read only there)
    digest: str | None
    now: float  # seconds since the epoch
    risk: str = ""  # low | medium | high | irreversible: selects the step-up rule ("": none applies here)


@dataclass(frozen=True)
class ApprovalEvidence:
    """What the receipt and the audit event keep of an approval (never the JWS itself)."""

    issuer: str
    kid: str
    jti: str
    acr: str
    amr: tuple[str, ...]
    iat: float
    exp: float
    form: str  # "approval" (our claims) or "authorization_details" (an IdP's CIBA / RAR access token)
    digest: str = ""  # the dig the approval carries (equal to Expected.digest when that was given)

    def to_dict(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "kid": self.kid,
            "jti": self.jti,
            "acr": self.acr,
            "amr": list(self.amr),
            "iat": self.iat,
            "exp": self.exp,
            "form": self.form,
        }


@dataclass(frozen=True)
class GrantExpected:
    """Whose grant is being created: the caller's actor and tenant; the time now."""

    actor_id: str
    tenant_id: str
    now: float


@dataclass(frozen=True)
class GrantClaims:
    """A verified standing grant: ``uses`` writes of ``capability`` by its owner until ``exp``."""

    grant_id: str
    issuer: str
    kid: str
    jti: str
    actor_id: str
    tenant_id: str
    capability: str
    uses: int
    args: Mapping[str, Any] | None  # argument values a covered call must carry exactly
    iat: float
    exp: float
    acr: str
    amr: tuple[str, ...]


@dataclass(frozen=True)
class AdminClaim:
    """An admin context a verified assertion grants: ``id`` is ``<tenant_id>:<name>``; mode READONLY|MAINTAIN."""

    id: str
    mode: str


@dataclass(frozen=True)
class VerifiedContext:
    """Who the caller is, as a trusted issuer asserts it."""

    issuer: str
    kid: str
    actor_id: str  # sub
    tenant_id: str  # tid
    session_id: str  # sid
    role: str
    admin: AdminClaim | None
    exp: float


@dataclass(frozen=True)
class _Authentic:
    issuer: Issuer
    kid: str
    claims: dict[str, Any]


class Verifier:
    """Verifies tokens against the configured issuers; build it with ``Verifier.load(path)``."""

    def __init__(self, issuers: Issuers) -> None:
        self.issuers = issuers
        self.settings = issuers.settings

    @classmethod
    async def load(cls, path: str | Path, *, clock: Clock | None = None) -> Verifier:
        """Read the settings file and every issuer's keys; ApprovalSettingsError stops the start."""
        settings = load_settings(path)
        issuers = await (Issuers.start(settings, clock=clock) if clock else Issuers.start(settings))
        return cls(issuers)

    async def close(self) -> None:
        await self.issuers.close()

    def satisfied_risks(self, acr: str) -> tuple[str, ...]:
        """The risks an approval carrying this ``acr`` may approve: every risk without a step-up rule, and those
        whose rule lists it (the claim script compares the card's risk with this, atomically)."""
        return tuple(risk for risk in RISKS if acr in self.settings.step_up.get(risk, frozenset({acr})))

    # approvals ------------------------------------------------------------------------------------------------

    def verify_approval(self, token: str, *, expect: Expected) -> ApprovalEvidence:
        """The approval's evidence, or ApprovalRequired (none given) / ApprovalInvalid (check named)."""
        return self._approval(self._authenticate(token, ApprovalInvalid, ApprovalRequired), expect)

    async def verify_approval_async(self, token: str, *, expect: Expected) -> ApprovalEvidence:
        return self._approval(await self._authenticate_async(token, ApprovalInvalid, ApprovalRequired), expect)

    def _approval(self, auth: _Authentic, expect: Expected) -> ApprovalEvidence:
        claims, issuer = auth.claims, auth.issuer.settings
        fail = _Failer(ApprovalInvalid, issuer.issuer)
        kind = claims.get("kind", "approval")
        if kind != "approval":
            raise fail("kind", f"a token of kind {_show(kind)} is not an approval")
        _audience(claims, issuer.audience, fail)
        iat, exp = _times(claims, expect.now, self.settings.leeway, issuer.max_ttl, fail, need_iat=True)
        jti = _string(claims, "jti", fail)
        acr, amr = _acr(claims, fail), _amr(claims, fail)
        if _string(claims, "sub", fail) != expect.actor_id:
            raise fail("owner", "the approval is another user's (sub is not the card's actor)")
        if "authorization_details" in claims:
            if "act" in claims or "dig" in claims:
                raise fail("malformed", "act/dig both as claims and in authorization_details")
            entry, form = (
                _action_entry(claims["authorization_details"], expect.action_id, fail),
                "authorization_details",
            )
        else:
            entry, form = claims, "approval"
        _bound(claims, entry, "tid", expect.tenant_id, "tenant", fail)
        _bound(claims, entry, "sid", expect.session_id, "session", fail)
        if _string(entry, "act", fail, check="action") != expect.action_id:
            raise fail("action", "the approval is for another action")
        dig = _string(entry, "dig", fail, check="digest")
        if expect.digest is not None and not hmac.compare_digest(dig.encode(), expect.digest.encode()):
            raise fail("digest", "the approval is for other arguments, preview, policy or expiry than this card's")
        acceptable = self.settings.step_up.get(expect.risk)
        if acceptable and acr not in acceptable:
            raise fail("step_up", f"a {expect.risk}-risk action needs acr {' or '.join(sorted(acceptable))}")
        return ApprovalEvidence(issuer.issuer, auth.kid, jti, acr, amr, iat, exp, form, dig)

    # grants ---------------------------------------------------------------------------------------------------

    def verify_grant(self, token: str, *, expect: GrantExpected) -> GrantClaims:
        """The grant's claims, or ApprovalRequired / ApprovalInvalid (check named)."""
        return self._grant(self._authenticate(token, ApprovalInvalid, ApprovalRequired), expect)

    async def verify_grant_async(self, token: str, *, expect: GrantExpected) -> GrantClaims:
        return self._grant(await self._authenticate_async(token, ApprovalInvalid, ApprovalRequired), expect)

    def _grant(self, auth: _Authentic, expect: GrantExpected) -> GrantClaims:
        claims, issuer = auth.claims, auth.issuer.settings
        fail = _Failer(ApprovalInvalid, issuer.issuer)
        if claims.get("kind") != "grant":
            raise fail("kind", 'a grant must carry kind "grant"')
        _audience(claims, issuer.audience, fail)
        iat, exp = _times(claims, expect.now, self.settings.leeway, issuer.max_grant_ttl, fail, need_iat=True)
        jti = _string(claims, "jti", fail)
        acr, amr = _acr(claims, fail), _amr(claims, fail)
        sub = _string(claims, "sub", fail)
        if sub != expect.actor_id:
            raise fail("owner", "the grant is another user's (sub is not the caller's actor)")
        _bound(claims, claims, "tid", expect.tenant_id, "tenant", fail)
        capability = _string(claims, "cap", fail, check="capability")
        uses = claims.get("uses")
        if isinstance(uses, bool) or not isinstance(uses, int) or not 1 <= uses <= MAX_GRANT_USES:
            raise fail("uses", f"uses must be a whole number from 1 to {MAX_GRANT_USES}")
        args = claims.get("args")
        if args is not None:
            if not isinstance(args, dict):
                raise fail("args", "args must be an object of argument values")
            try:
                rfc8785.dumps(args)
            except (rfc8785.CanonicalizationError, TypeError) as exc:
                raise fail("args", f"args are not canonical JSON: {exc}") from exc
        return GrantClaims(
            grant_id=grant_id(issuer.issuer, jti),
            issuer=issuer.issuer,
            kid=auth.kid,
            jti=jti,
            actor_id=sub,
            tenant_id=expect.tenant_id,
            capability=capability,
            uses=uses,
            args=args,
            iat=iat,
            exp=exp,
            acr=acr,
            amr=amr,
        )

    # context assertions ---------------------------------------------------------------------------------------

    def verify_context(self, token: str, *, now: float) -> VerifiedContext:
        """The caller's verified identity, or ContextInvalid (check named; ``missing`` when there is no token)."""
        return self._context(self._authenticate(token, ContextInvalid, ContextInvalid), now)

    async def verify_context_async(self, token: str, *, now: float) -> VerifiedContext:
        return self._context(await self._authenticate_async(token, ContextInvalid, ContextInvalid), now)

    def _context(self, auth: _Authentic, now: float) -> VerifiedContext:
        claims, issuer = auth.claims, auth.issuer.settings
        fail = _Failer(ContextInvalid, issuer.issuer)
        if claims.get("kind") is not None or any(k in claims for k in ("act", "dig", "cap")) or _has_action(claims):
            raise fail("kind", "an approval or a grant is not a context assertion")
        _audience(claims, issuer.context_aud, fail)
        _iat, exp = _times(claims, now, self.settings.leeway, None, fail, need_iat=False)
        admin = None
        adm = claims.get("adm")
        tid = _string(claims, "tid", fail)
        if adm is not None:
            if not isinstance(adm, dict) or set(adm) - {"id", "mode"}:
                raise fail("admin", "adm must be {id, mode}")
            if adm.get("mode") not in ADMIN_MODES:
                raise fail("admin", f"adm.mode must be {' or '.join(ADMIN_MODES)}")
            admin = AdminClaim(_string(adm, "id", fail, check="admin"), adm["mode"])
        return VerifiedContext(
            issuer=issuer.issuer,
            kid=auth.kid,
            actor_id=_string(claims, "sub", fail),
            tenant_id=tid,
            session_id=_string(claims, "sid", fail),
            role=_string(claims, "role", fail),
            admin=admin,
            exp=exp,
        )

    # the common part: parse, pick the issuer and key, check the signature ------------------------------------

    def _authenticate(self, token: str, error: type[ApprovalError], missing: type[ApprovalError]) -> _Authentic:
        if not token:
            raise missing("missing", "no token was given")
        fail = _Failer(error, None)
        if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
            raise fail("malformed", f"a token must be a string of at most {MAX_TOKEN_CHARS} characters")
        parts = token.split(".")
        if len(parts) != 3:
            raise fail("malformed", "not a compact JWS (three dot-separated parts); an encrypted JWT is not accepted")
        header, claims = _json_segment(parts[0], "header", fail), _json_segment(parts[1], "claims", fail)
        signature = _b64(parts[2], "signature", fail)
        named = [h for h in FORBIDDEN_HEADERS if h in header]
        if named:
            raise fail("header", f"header parameter(s) {', '.join(named)} are refused: keys come from the JWKS only")
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or (kid is not None and not isinstance(kid, str)):
            raise fail("malformed", "alg must be a string, kid a string when present")
        if alg.lower() == "none":
            raise fail("algorithm", "alg none: the token is not signed")
        iss = claims.get("iss")
        issuer = self.issuers.get(iss) if isinstance(iss, str) else None
        if issuer is None:
            raise fail("issuer", f"iss {_show(iss)} is not a configured issuer")
        fail = _Failer(error, issuer.settings.issuer)
        if alg not in issuer.settings.algorithms:
            raise fail("algorithm", f"alg {_show(alg)} is not one this issuer may use")
        key = issuer.keys.current().find(kid, alg)
        if key == "unknown":
            raise fail("key", f"kid {_show(kid)} is not in the issuer's JWKS")
        if key == "algorithm":
            raise fail("algorithm", f"alg {_show(alg)} does not fit the key {_show(kid)}")
        # PyJWT's algorithm object checks the signature (the crypto is the library's); the compact form was
        # parsed above, strictly: PyJWS would parse it a second time, at a third of a verification's cost.
        signing_input = token[: len(parts[0]) + 1 + len(parts[1])].encode("ascii")
        try:
            valid = key.Algorithm.verify(signing_input, key.key, signature)
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            raise fail("signature", f"the signature cannot be checked: {exc}") from exc
        if not valid:
            raise fail("signature", "the signature does not verify")
        return _Authentic(issuer, kid or "", claims)

    async def _authenticate_async(
        self, token: str, error: type[ApprovalError], missing: type[ApprovalError]
    ) -> _Authentic:
        try:
            return self._authenticate(token, error, missing)
        except ApprovalError as exc:
            issuer = self.issuers.get(exc.issuer) if exc.check == "key" and exc.issuer else None
            if issuer is None or not await issuer.keys.refresh_for_unknown_kid():
                raise
        return self._authenticate(token, error, missing)


def grant_id(issuer: str, jti: str) -> str:
    """A grant's id, derived from iss and jti: the same grant offered twice is one grant (32 lower hex)."""
    return hashlib.sha256(rfc8785.dumps({"iss": issuer, "jti": jti})).hexdigest()[:32]


def grant_covers(grant: GrantClaims, capability: str, arguments: Mapping[str, Any]) -> bool:
    """True when the grant is for this capability and every argument it pins has exactly that value."""
    if grant.capability != capability:
        return False
    try:
        return all(
            name in arguments and rfc8785.dumps(arguments[name]) == rfc8785.dumps(value)
            for name, value in (grant.args or {}).items()
        )
    except (rfc8785.CanonicalizationError, TypeError):
        return False  # an argument that is not I-JSON matches nothing
