"""The approval digest: the hash an approval's ``dig`` claim must carry, over exactly what the user saw.

Construction (docs/approvals.md has a worked example that tests/test_approvals_digest.py pins)::

    digest = "sha256:" + base64url_nopad(SHA-256(RFC8785(document)))
    document = {
      "v": 1,
      "tool": <tool name>,
      "arguments": <the prepared, canonical arguments: a JSON object>,
      "preview": {"title": str, "target": str, "impact": str,
                  "details": [{"label": str, "value": str}, ...]},   # every key present, "" when empty
      "policy_version": <the registry's policy_version bound into the card>,
      "expires_at": <the card's expiry, RFC 3339 UTC, millisecond precision, "Z": 2026-12-01T09:30:00.000Z>
    }

Nothing else goes in: not the action id (the approval's ``act`` claim binds that), not the owner
(``sub``/``tid``/``sid`` bind that), not the resource version or anything the user was not shown.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import rfc8785

from countersign.v1 import common_pb2

DIGEST_VERSION = 1
DIGEST_PREFIX = "sha256:"
_PREVIEW_TEXT = ("title", "target", "impact")
_PREVIEW_KEYS = frozenset((*_PREVIEW_TEXT, "details"))


def approval_digest(
    tool: str,
    prepared_arguments: Mapping[str, Any],
    preview: Mapping[str, Any] | common_pb2.Preview,
    policy_version: str,
    expires_at_ms: int,
) -> str:
    """The ``dig`` an approval of this card must carry. Raises ValueError on input that is not I-JSON."""
    document = digest_document(tool, prepared_arguments, preview, policy_version, expires_at_ms)
    try:
        canonical = rfc8785.dumps(document)
    except (rfc8785.CanonicalizationError, TypeError) as exc:
        raise ValueError(f"the card cannot be canonicalised: {exc}") from exc
    return DIGEST_PREFIX + base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()).rstrip(b"=").decode("ascii")


def digest_document(
    tool: str,
    prepared_arguments: Mapping[str, Any],
    preview: Mapping[str, Any] | common_pb2.Preview,
    policy_version: str,
    expires_at_ms: int,
) -> dict[str, Any]:
    """The JSON document the digest hashes (before RFC 8785), for docs, debugging and other languages' tests."""
    if not isinstance(tool, str) or not tool:
        raise ValueError("tool must be a non-empty string")
    if not isinstance(prepared_arguments, Mapping):
        raise ValueError("prepared arguments must be a JSON object")
    if not isinstance(policy_version, str):
        raise ValueError("policy_version must be a string")
    return {
        "v": DIGEST_VERSION,
        "tool": tool,
        "arguments": dict(prepared_arguments),
        "preview": preview_document(preview),
        "policy_version": policy_version,
        "expires_at": rfc3339_ms(expires_at_ms),
    }


def preview_document(preview: Mapping[str, Any] | common_pb2.Preview) -> dict[str, Any]:
    """The preview with every field present: a proto Preview, or its dict (proto field names, empty ones omitted)."""
    if isinstance(preview, common_pb2.Preview):
        return {
            "title": preview.title,
            "target": preview.target,
            "impact": preview.impact,
            "details": [{"label": d.label, "value": d.value} for d in preview.details],
        }
    if not isinstance(preview, Mapping):
        raise ValueError("preview must be a mapping or a Preview message")
    unknown = sorted(str(k) for k in preview if k not in _PREVIEW_KEYS)
    if unknown:  # never drop silently something the user may have been shown
        raise ValueError(f"preview has unknown field(s): {', '.join(unknown)}")
    out: dict[str, Any] = {}
    for key in _PREVIEW_TEXT:
        value = preview.get(key, "")
        if not isinstance(value, str):
            raise ValueError(f"preview.{key} must be a string")
        out[key] = value
    details = preview.get("details", [])
    if not isinstance(details, list):
        raise ValueError("preview.details must be a list")
    out["details"] = []
    for i, detail in enumerate(details):
        if not isinstance(detail, Mapping) or set(detail) - {"label", "value"}:
            raise ValueError(f"preview.details[{i}] must be {{label, value}}")
        label, value = detail.get("label", ""), detail.get("value", "")
        if not isinstance(label, str) or not isinstance(value, str):
            raise ValueError(f"preview.details[{i}]: label and value must be strings")
        out["details"].append({"label": label, "value": value})
    return out


def rfc3339_ms(epoch_ms: int) -> str:
    """Milliseconds since the epoch as RFC 3339 UTC with exactly three fraction digits and a ``Z``."""
    if isinstance(epoch_ms, bool) or not isinstance(epoch_ms, int) or epoch_ms < 0:
        raise ValueError("expires_at_ms must be a non-negative integer")
    seconds, millis = divmod(epoch_ms, 1000)
    try:
        moment = datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise ValueError(f"expires_at_ms is out of range: {epoch_ms}") from exc
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{millis:03d}Z"
