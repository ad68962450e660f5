"""The reply guard moved to its own package, ``countersign.guard`` (normalise, segment, language, claims,
exclusions, verdict); this name is kept so that older imports still work."""

from countersign.guard import REASONS, REPLACED_REASONS, VERBS, Evidence, ReplyGuard, Verdict, verbs_of

__all__ = ["REASONS", "REPLACED_REASONS", "VERBS", "Evidence", "ReplyGuard", "Verdict", "verbs_of"]
