"""Receipts as the guard sees them: which verbs a tool's succeeded receipt backs.

``Evidence`` is one settled receipt the sidecar trusts (the caller builds it from a stored Action);
``verbs_of`` reads a tool's verbs from its name when the registry does not list them; ``BACKED_BY`` says which
receipt verbs back a claim of a verb (a claim whose verb has no class, ``generic``, is backed by any succeeded
receipt: "Done!", "订单已取消" with a cancel tool the classes do not name).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

VERBS = frozenset({"create", "delete", "add", "save", "update", "complete", "send"})
GENERIC = "generic"

BACKED_BY: Mapping[str, frozenset[str]] = {
    "create": frozenset({"create", "add"}),
    "add": frozenset({"add", "create"}),
    "delete": frozenset({"delete"}),
    "save": frozenset({"save", "create", "update"}),
    "update": frozenset({"update", "save"}),
    "complete": frozenset({"complete", "update"}),
    "send": frozenset({"send"}),
}


@dataclass(frozen=True)
class Evidence:
    """One receipt the sidecar trusts (built by the caller from a stored, settled Action)."""

    action_id: str
    tool_name: str
    succeeded: bool  # receipt status SUCCEEDED
    verbs: frozenset[str]  # what the tool does: subset of VERBS


def backs(evidence: Evidence, verb_class: str) -> bool:
    """Whether a succeeded receipt backs a claim of ``verb_class``."""
    if not evidence.succeeded:
        return False
    if verb_class == GENERIC:
        return True
    return bool(evidence.verbs & BACKED_BY.get(verb_class, frozenset({verb_class})))


def well_formed(evidence: object) -> list[Evidence]:
    """The well-formed evidence items (anything else is ignored)."""
    if not isinstance(evidence, Iterable) or isinstance(evidence, str | bytes):
        return []
    out: list[Evidence] = []
    for e in evidence:
        if isinstance(e, Evidence):
            verbs = e.verbs if isinstance(e.verbs, frozenset) else frozenset(e.verbs or ())
            out.append(Evidence(str(e.action_id), str(e.tool_name), e.succeeded is True, verbs))
    return out


_TOKEN_VERBS: Mapping[str, frozenset[str]] = {
    "create": frozenset({"create"}),
    "new": frozenset({"create"}),
    "add": frozenset({"create", "add"}),
    "insert": frozenset({"create", "add"}),
    "upsert": frozenset({"create", "update"}),
    "delete": frozenset({"delete"}),
    "remove": frozenset({"delete"}),
    "del": frozenset({"delete"}),
    "destroy": frozenset({"delete"}),
    "erase": frozenset({"delete"}),
    "purge": frozenset({"delete"}),
    "trash": frozenset({"delete"}),
    "set": frozenset({"update"}),
    "update": frozenset({"update"}),
    "edit": frozenset({"update"}),
    "rename": frozenset({"update"}),
    "modify": frozenset({"update"}),
    "change": frozenset({"update"}),
    "patch": frozenset({"update"}),
    "move": frozenset({"update"}),
    "reschedule": frozenset({"update"}),
    "mark": frozenset({"update"}),
    "complete": frozenset({"complete"}),
    "finish": frozenset({"complete"}),
    "done": frozenset({"complete"}),
    "close": frozenset({"complete"}),
    "save": frozenset({"save"}),
    "store": frozenset({"save"}),
    "send": frozenset({"send"}),
    "email": frozenset({"send"}),
    "mail": frozenset({"send"}),
    "notify": frozenset({"send"}),
    "message": frozenset({"send"}),
    "forward": frozenset({"send"}),
}
_ANYWHERE_TOKENS = ("done", "complete", "finish")
# a name's last word counts only when it is unmistakably a verb ("todo_create", not "get_email")
_LAST_TOKENS = frozenset(
    {
        "create",
        "add",
        "insert",
        "upsert",
        "delete",
        "remove",
        "destroy",
        "erase",
        "purge",
        "update",
        "edit",
        "rename",
        "modify",
        "reschedule",
        "complete",
        "finish",
        "save",
        "send",
        "notify",
    }
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def verbs_of(tool_name: str) -> frozenset[str]:
    """What a tool does, from its name: ``create_todo`` → {create}, ``add_item`` → {create, add},
    ``delete_note``/``remove_x`` → {delete}, ``set_``/``update_``/``edit_``/``rename_`` → {update},
    ``complete_``/``finish_``/``mark_done`` → {complete}, ``save_`` → {save}, ``send_``/``email_``/``notify_`` →
    {send}. The verb is the name's first word (after any ``ns.``/``ns/`` prefix), else its last word
    (``todo_create``); "done"/"complete"/"finish" count anywhere. Unknown: the empty set."""
    if not isinstance(tool_name, str) or not tool_name:
        return frozenset()
    last = re.split(r"[./:]", tool_name)[-1]
    tokens = [t for t in _NON_ALNUM.split(_CAMEL.sub("_", last).lower()) if t]
    if not tokens:
        return frozenset()
    verbs = set(_TOKEN_VERBS.get(tokens[0], ()))
    if not verbs and tokens[-1] in _LAST_TOKENS:
        verbs.update(_TOKEN_VERBS[tokens[-1]])
    for token in tokens:
        if token in _ANYWHERE_TOKENS:
            verbs.update(_TOKEN_VERBS[token])
    return frozenset(verbs)
