"""The reply guard (DESIGN §2 I5, §9): a success claim that no succeeded receipt backs never reaches the user.

Stages, one module each: normalise -> segment -> language -> claims (claims_en with placement_en, words_en and
verbs_en; claims_zh with subject_zh) -> exclusions ->
verdict (receipts). Lexicons are data (``*.yaml`` here, or a folder given by ``--guard-lexicon``).

The names below are imported when first used (PEP 562): the guard's modules and their tables are about 12 MB
and a third of a second to import, which a sidecar whose callers never ask for a reply check need not pay
(countersign/reply/guard_loader.py builds the guard on first need).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from countersign.guard.lexicon import LexiconError
    from countersign.guard.receipts import VERBS, Evidence, verbs_of
    from countersign.guard.verdict import REASONS, REPLACED_REASONS, UNSUPPORTED_MODES, Claim, ReplyGuard, Verdict

_WHERE = {
    "LexiconError": "lexicon",
    "VERBS": "receipts",
    "Evidence": "receipts",
    "verbs_of": "receipts",
    "REASONS": "verdict",
    "REPLACED_REASONS": "verdict",
    "UNSUPPORTED_MODES": "verdict",
    "Claim": "verdict",
    "ReplyGuard": "verdict",
    "Verdict": "verdict",
}

__all__ = [
    "REASONS",
    "REPLACED_REASONS",
    "UNSUPPORTED_MODES",
    "VERBS",
    "Claim",
    "Evidence",
    "LexiconError",
    "ReplyGuard",
    "Verdict",
    "verbs_of",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"countersign.guard.{module}"), name)
    globals()[name] = value
    return value
