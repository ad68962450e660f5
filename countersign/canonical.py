"""RFC 8785 (JCS) canonical JSON: the one encoding of a JSON value wherever it is hashed or MAC'd."""

from __future__ import annotations

from typing import Any

import rfc8785


def canonical(value: Any) -> bytes:
    """RFC 8785 canonical JSON bytes of a JSON value (raises ValueError on non-I-JSON values)."""
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError) as exc:
        raise ValueError(str(exc)) from exc
