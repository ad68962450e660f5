"""Every script's reply shapes by name, as its header lists them (``-- returns {"won", kid, tool, body, mac}``).

A reply is ``{kind, field, field, ...}``; ``decode`` names its fields from this table, so a caller reads
``fields["body"]``, never ``reply[3]``. tests/store checks the table against each script's header, and every
shape against a real redis-server. A reply that fits no shape is refused (the store is not trusted to have run
the script this sidecar shipped): StoreUnavailable, fail closed.
"""

from __future__ import annotations

from typing import Any

from countersign.errors import StoreUnavailable
from countersign.store.records import CardRecord, RunRecord, run_state

RUN = ("state", "kid", "out", "omac", "reason", "binding", "tool", "card", "cmac")

REPLIES: dict[str, dict[str, tuple[str, ...]]] = {
    "issue": {"issued": (), "conflict": ("seq", "head"), "card": ("kid", "body", "mac"), "run": RUN},
    "claim": {
        "won": ("kid", "tool", "body", "mac", "seq", "head"),
        "run": RUN,
        "expired": (),
        "forbidden": (),
        "role": ("tool",),
        "approval_required": ("why",),
        "approval_invalid": ("check",),
    },
    "release": {"ready": (), "expired": (), "lost": ("state",)},
    "settle": {"ok": (), "lost": ("state",), "gone": (), "conflict": ("seq", "head")},
    "reject": {"rejected": (), "run": RUN, "expired": (), "forbidden": (), "conflict": ("seq", "head")},
    "peek": {"run": RUN, "card": ("kid", "body", "mac", "binding", "tool"), "none": ()},
    "cont_open": {"cont": ("state", "kid", "snapshot", "turn", "mac"), "none": (), "forbidden": ()},
    "cont_claim": {
        "won": (
            "kid",
            "snapshot",
            "turn",
            "mac",
            "run_kid",
            "out",
            "omac",
            "run_binding",
            "run_tool",
            "run_card",
            "run_cmac",
        ),
        "settled": ("kid", "snapshot", "turn", "mac", "reply", "rmac", "verdict"),
        "running": (),
        "not_ready": ("run_state", "reason"),
        "none": (),
        "forbidden": (),
    },
    "cont_settle": {
        "ok": (),
        "settled": ("reply", "rmac", "verdict"),
        "lost": ("state",),
        "not_running": ("state",),
        "none": (),
        "forbidden": (),
    },
    "cont_release": {"ok": (), "state": ("state",), "lost": (), "none": (), "forbidden": ()},
    "reconcile_claim": {
        "won": ("kid", "tool", "card", "cmac", "attempts", "unknown_since_ms", "now_ms"),
        "run": RUN,
        "busy": ("state",),
        "none": (),
    },
    "reconcile_defer": {"ok": (), "lost": ("state",)},
    "audit": {"ok": ("seq",), "conflict": ("seq", "head")},
    "resolve": {"ok": (), "state": ("state",)},
    "quota": {"ok": ("count",), "full": ("count", "first_gone")},
    "turn_remember": {"ok": ()},
    "grant_create": {"created": (), "exists": ("sealed", "taken", "st"), "full": ("live",)},
    "grant_use": {
        "took": ("left",),
        "again": ("left",),
        "spent": (),
        "revoked": (),
        "expired": (),
        "none": (),
        "tampered": (),
    },
    "grant_revoke": {"revoked": ("sealed", "taken"), "already": ("sealed", "taken"), "none": ()},
    "grant_run": {"won": ("kid", "tool", "body", "mac"), "run": RUN, "card": ("kid", "body", "mac")},
}
SCRIPTS = tuple(REPLIES)


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def raw(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def decode(script: str, reply: Any) -> tuple[str, dict[str, Any]]:
    """(kind, fields by name) of one script's reply."""
    shapes = REPLIES[script]
    kind = text(reply[0]) if isinstance(reply, list) and reply else ""
    names = shapes.get(kind)
    if names is None or len(reply) != len(names) + 1:
        fields = len(reply) - 1 if isinstance(reply, list) else 0
        raise StoreUnavailable(
            f"the {script} script answered a reply it does not have "
            f"({kind or type(reply).__name__!r} with {fields} field(s))"
        )
    return kind, dict(zip(names, reply[1:], strict=True))


def run_record(f: dict[str, Any]) -> RunRecord:
    """A ``run`` reply's fields as the record."""
    return RunRecord(
        run_state(text(f["state"])),
        text(f["kid"]),
        raw(f["out"]),
        text(f["omac"]),
        text(f["reason"]),
        text(f["binding"]),
        text(f["tool"]),
        raw(f["card"]),
        text(f["cmac"]),
    )


def card_record(f: dict[str, Any], *, tool: str = "", binding: str = "") -> CardRecord:
    """A card from a reply's kid, body and mac (and its tool and binding, from the reply or the caller)."""
    return CardRecord(
        text(f["kid"]), text(f.get("tool", tool)), raw(f["body"]), text(f["mac"]), text(f.get("binding", binding))
    )
