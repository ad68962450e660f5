"""What one user turn did, kept for the reply side: the facts its reads returned and the actions it proposed.

Invoke writes them (a bounded list under the turn's key, store/keys.py ``turn_list_key``); a continuation's
snapshot reads the facts back, and the reply guard (CheckReply) reads the turn's actions as evidence.
"""

from __future__ import annotations

import json

from countersign.canonical import as_text, canonical, compact
from countersign.keyring import Keyring
from countersign.path.cards import owner
from countersign.registry import Tool
from countersign.registry.templates import render
from countersign.v1 import common_pb2


def turn_key(keyring: Keyring, context: common_pb2.CallContext) -> str:
    """The turn's key: a keyed hash of owner and request_id (no raw ids). Keyed by the id key: two sidecars
    mid-rotation must keep one turn's facts in one place."""
    return keyring.id_hash("request", [*owner(context), context.request_id])


def read_summary(tool: Tool, body: object, message: str = "") -> str:
    """A short line about what a read returned, for the continuation's facts (never the whole answer)."""
    if isinstance(body, dict):
        if tool.receipt.summary:
            return as_text(
                render(tool.receipt.summary, {k: v for k, v in body.items() if not isinstance(v, (dict, list))})
            )
        if isinstance(body.get("count"), int):
            return f"{body['count']} result(s)"
    if body is None:
        return message[:200]
    text = json.dumps(body, ensure_ascii=False)
    return as_text(text if len(text) <= 200 else text[:197] + "...")


def fact_entry(tool: str, status: str, summary: str) -> bytes:
    """A read's fact, as the turn's list keeps it: RFC 8785 bytes. Its values are strings and its keys ASCII, so the
    standard encoder writes canonical()'s bytes (canonical.py) without canonical()'s look at every value first; a lone
    surrogate takes canonical()'s path (and its ValueError), as before."""
    entry = {"k": "fact", "tool": tool, "status": status, "summary": summary[:300]}
    if type(tool) is str and type(status) is str and type(summary) is str:
        try:
            return compact(entry).encode("utf-8")
        except UnicodeEncodeError:
            pass
    return canonical(entry)


def action_entry(action_id: str) -> bytes:
    """An action the turn proposed, as the turn's list keeps it."""
    return canonical({"k": "action", "id": action_id})
