"""The reply guard (DESIGN §2 I5, §9): a success claim that no succeeded receipt backs never reaches the user.

Stages, one module each: normalise -> segment -> language -> claims (claims_en with placement_en, words_en and
verbs_en; claims_zh with subject_zh) -> exclusions ->
verdict (receipts). Lexicons are data (``*.yaml`` here, or a folder given by ``--guard-lexicon``).
"""

from countersign.guard.lexicon import LexiconError
from countersign.guard.receipts import VERBS, Evidence, verbs_of
from countersign.guard.verdict import REASONS, REPLACED_REASONS, UNSUPPORTED_MODES, Claim, ReplyGuard, Verdict

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
