"""The checks a token's segments and claims pass, each refusal naming its ``check`` (verify.py runs them)."""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from countersign.approvals.errors import ApprovalError

MAX_CLAIM_CHARS = 256
ACTION_TYPE = "countersign_action"  # the RFC 9396 authorization_details type an IdP's approval carries
_B64URL = re.compile(r"^[A-Za-z0-9_-]*$")


class _Failer:
    def __init__(self, error: type[ApprovalError], issuer: str | None) -> None:
        self.error, self.issuer = error, issuer

    def __call__(self, check: str, message: str) -> ApprovalError:
        return self.error(check, message, issuer=self.issuer)


def _show(value: Any) -> str:
    """A claim from an unverified token, cut short for a message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _b64(part: str, name: str, fail: _Failer) -> bytes:
    """Strict base64url without padding: the alphabet only, and the one canonical spelling of the bytes."""
    if not _B64URL.match(part) or len(part) % 4 == 1:
        raise fail("malformed", f"the {name} is not base64url")
    raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    if base64.urlsafe_b64encode(raw).rstrip(b"=") != part.encode("ascii"):
        raise fail("malformed", f"the {name} is not canonical base64url")
    return raw


def _json_segment(part: str, name: str, fail: _Failer) -> dict[str, Any]:
    raw = _b64(part, name, fail)
    try:
        value = json.loads(raw, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise fail("malformed", f"the {name} is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise fail("malformed", f"the {name} is not a JSON object")
    return value


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:  # two readers of one token could pick different values
            raise ValueError(f"duplicate key {key[:40]!r}")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _string(claims: Mapping[str, Any], name: str, fail: _Failer, *, check: str = "malformed") -> str:
    value = claims.get(name)
    if not isinstance(value, str) or not value or len(value) > MAX_CLAIM_CHARS:
        raise fail(check, f"{name} must be a non-empty string of at most {MAX_CLAIM_CHARS} characters")
    return value


def _number(claims: Mapping[str, Any], name: str, fail: _Failer) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise fail("malformed", f"{name} must be a number (seconds since the epoch)")
    return float(value)


def _times(
    claims: Mapping[str, Any], now: float, leeway: int, max_ttl: int | None, fail: _Failer, *, need_iat: bool
) -> tuple[float, float]:
    exp, iat, nbf = _number(claims, "exp", fail), _number(claims, "iat", fail), _number(claims, "nbf", fail)
    if exp is None or (need_iat and iat is None):
        raise fail("malformed", "exp" + (" and iat are" if need_iat else " is") + " required")
    if now >= exp + leeway:
        raise fail("expired", f"expired {now - exp:.0f} s ago")
    if (nbf is not None and nbf > now + leeway) or (iat is not None and iat > now + leeway):
        raise fail("not_yet_valid", "nbf or iat lies in the future")
    if max_ttl is not None and iat is not None and (exp - iat > max_ttl + leeway or exp - now > max_ttl + leeway):
        raise fail("lifetime", f"exp may be at most {max_ttl} s after iat and now")
    return (iat if iat is not None else 0.0), exp


def _audience(claims: Mapping[str, Any], audience: str, fail: _Failer) -> None:
    aud = claims.get("aud")
    names = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    if audience not in names or not all(isinstance(n, str) for n in names):
        raise fail("audience", f"aud must name {audience!r}")


def _acr(claims: Mapping[str, Any], fail: _Failer) -> str:
    acr = claims.get("acr", "")
    if not isinstance(acr, str):
        raise fail("malformed", "acr must be a string")
    return acr


def _amr(claims: Mapping[str, Any], fail: _Failer) -> tuple[str, ...]:
    amr = claims.get("amr", [])
    if not isinstance(amr, list) or not all(isinstance(m, str) for m in amr):
        raise fail("malformed", "amr must be a list of strings")
    return tuple(amr)


def _bound(
    claims: Mapping[str, Any], entry: Mapping[str, Any], name: str, expected: str, check: str, fail: _Failer
) -> None:
    """tid / sid: wherever the token states it (top level, its authorization_details entry), it must match."""
    values = [source[name] for source in (claims, entry) if name in source]
    if not values and expected:
        raise fail(check, f"{name} is missing")
    if any(not isinstance(v, str) or v != expected for v in values):
        raise fail(check, f"{name} is not the card's")


def _has_action(claims: Mapping[str, Any]) -> bool:
    details = claims.get("authorization_details")
    return isinstance(details, list) and any(isinstance(e, dict) and e.get("type") == ACTION_TYPE for e in details)


def _action_entry(details: Any, action_id: str, fail: _Failer) -> Mapping[str, Any]:
    """The authorization_details entry (RFC 9396) of type countersign_action for this action."""
    if not isinstance(details, list) or not all(isinstance(e, dict) for e in details):
        raise fail("malformed", "authorization_details must be a list of objects")
    entries = [e for e in details if e.get("type") == ACTION_TYPE]
    if not entries:
        raise fail("action", f"authorization_details hold no {ACTION_TYPE} entry")
    mine = [e for e in entries if e.get("act") == action_id]
    if not mine:
        raise fail("action", "the approval is for another action")
    if len(mine) > 1:
        raise fail("malformed", f"two {ACTION_TYPE} entries for one action")
    entry: Mapping[str, Any] = mine[0]
    return entry
