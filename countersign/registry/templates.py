"""Templates of the registry: ``{name}`` placeholders filled from the prepared arguments, the action and its
receipt (previews, receipt summaries, compensation arguments, URLs), and the rules a value must keep to fill a URL
path. Adapters, the path and the reply side all fill templates here; nothing else is interpolated."""

from __future__ import annotations

import functools
import json
import re
import urllib.parse
from collections.abc import Mapping
from typing import Any

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)\}")
ACTION_FIELDS = frozenset({"action_id", "idempotency_key"})
RECEIPT_FIELDS = frozenset({"receipt.resource_id", "receipt.resource_version"})
MAX_PATH_VALUE_BYTES = 1024  # the longest argument a URL path segment takes, once percent-encoded


def text_of(value: Any) -> str:
    """A template value as text: a string as is, anything else as JSON ("" when absent)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def render(template: str, values: Mapping[str, Any]) -> str:
    """Fill ``{name}`` placeholders from values only (previews and summaries; URLs use render_url)."""
    return PLACEHOLDER.sub(lambda m: text_of(values.get(m.group(1))), template)


def path_span(template: str) -> tuple[int, int]:
    """Where a URL template's path lies: after scheme and authority, before the query or fragment."""
    start = template.find("/", template.find("://") + 3) if "://" in template else 0
    if start < 0:
        start = len(template)
    ends = [i for i in (template.find("?", start), template.find("#", start)) if i >= 0]
    return start, min(ends, default=len(template))


@functools.lru_cache(maxsize=1024)
def path_fields(template: str) -> frozenset[str]:
    """The placeholders a URL template binds into its path (where a value could change the path's shape)."""
    start, end = path_span(template)
    return frozenset(m.group(1) for m in PLACEHOLDER.finditer(template) if start <= m.start() < end)


def path_problem(text: str) -> str:
    """Why a value may not fill a path segment ("" when it may). It is percent-encoded there; what it must
    not be, also once a server decodes it (repeatedly), is a dot segment, a separator or nothing at all."""
    if len(urllib.parse.quote(text, safe="")) > MAX_PATH_VALUE_BYTES:
        return f"a value in a URL path may be at most {MAX_PATH_VALUE_BYTES} bytes once percent-encoded"
    decoded = [text]
    while "%" in decoded[-1] and len(decoded) < 4:
        once = urllib.parse.unquote(decoded[-1])
        if once == decoded[-1]:
            break
        decoded.append(once)
    for form in decoded:
        if form in ("", ".", ".."):
            return f"a value in a URL path may not be {form!r}: it would change the path's shape"
        if "/" in form or "\\" in form:
            return "a value in a URL path may not contain '/' or '\\' (also percent-encoded)"
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in form):
            return "a value in a URL path may not contain control characters"
    return ""


def safe_url(template: str) -> str:
    """A registry URL template as it may be shown in spans, logs and messages: scheme, host, port and the
    path template ({placeholders} unfilled, so no argument value), without userinfo, query or fragment."""
    parts = urllib.parse.urlsplit(template)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port else host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))
