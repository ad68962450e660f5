"""The check every named guard rule's case runs (test_guard_exclusions and the rounds' files): the sentence is set
aside by that rule, and read as a claim with the rule disabled (else the case proves nothing)."""

from __future__ import annotations

from countersign.guard import ReplyGuard


def assert_rule_sets_aside(guard: ReplyGuard, rule: str, sentence: str) -> None:
    claims, dropped, _lang = guard.read(sentence)
    assert not claims, f"{sentence!r} is read as a claim: {[c.text for c in claims]}"
    assert rule in {why.rule for _c, why in dropped}, [(c.text, why) for c, why in dropped]
    without, _dropped, _lang = guard.read(sentence, disabled_rules=frozenset({rule}))
    assert without, f"without {rule}, {sentence!r} should be a claim: the test proves nothing"
