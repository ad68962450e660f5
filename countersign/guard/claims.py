"""Claims: what a candidate success claim is, and the phrase rules every grammar shares.

A grammar (``claims_en``, ``claims_zh``) reads one clause part and proposes candidates: where the claim is, which
grammar rule saw it, its verb, and who the agent is (the assistant, nobody named, or someone else). Whether a
candidate stands is for ``exclusions`` to say; ``verdict`` then asks the receipts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from countersign.guard.lexicon import Lexicon
from countersign.guard.needles import NeedleIndex, Needs, needs
from countersign.guard.segment import Part, Sentence

ASSISTANT = "assistant"  # "I've deleted", "已经帮你删除", "Deleted." (a report with the speaker left out)
NOBODY = "none"  # passive or a result state: "has been deleted", "订单已取消", "is now on"
OTHER = "other"  # the user or a third party: "you deleted", "the seller cancelled", "小王已经发了"


@dataclass(slots=True)  # not frozen: built for every candidate, and a frozen dataclass is slow to build
class Candidate:
    rule: str  # the grammar rule that proposed it: perfect, passive, bare_head, 已, ...
    lexicon: Lexicon = field(repr=False)
    sentence: Sentence = field(repr=False)
    part: Part = field(repr=False)
    start: int  # span in sentence.text
    end: int
    verb: str  # the verb's lemma (en) or the verb as written (zh); "" for a phrase rule
    agent: str = NOBODY
    subject: str = ""
    flags: frozenset[str] = field(default_factory=frozenset)  # attributive, label, generic
    verb_span: tuple[int, int] | None = None  # the verb's own span when the claim's span is wider

    @property
    def vstart(self) -> int:
        return self.verb_span[0] if self.verb_span else self.start

    @property
    def vend(self) -> int:
        return self.verb_span[1] if self.verb_span else self.end

    @property
    def text(self) -> str:
        return self.sentence.text[self.start : self.end]

    @property
    def clause(self) -> str:
        return self.part.text.strip()


class Phrases:
    """The lexicon's ``claims`` phrase rules ("all set", "搞定了", "is now on", "✅"). Each regex runs only on a
    sentence that holds one of its needles (needles.py): a regex search costs far more than a substring test."""

    def __init__(self, lex: Lexicon) -> None:
        self.lex = lex
        flags = 0 if lex.lower else re.IGNORECASE
        self.rules = [
            (rule, re.compile(pattern, flags), needs(pattern, True, lex.stop_words))
            for rule, patterns in lex.claim_patterns.items()
            for pattern in patterns
        ]
        # lower-case needles; for a case-insensitive lexicon (zh) found in any case ("oK了" is "OK了")
        self.needles = NeedleIndex(
            (n for _r, _rx, need in self.rules if need for group in need for n in group), caseless=not lex.lower
        )
        # "^" and "$" anchor at a part's start and end: such a rule is searched part by part only
        self._anchored = {
            rx: re.compile(rx.pattern, rx.flags | re.M)
            for _r, rx, _n in self.rules
            if "^" in rx.pattern or "$" in rx.pattern
        }
        self._always = {i for i, (_r, _rx, need) in enumerate(self.rules) if need is None}
        self._runnable: dict[frozenset[str], list[tuple[str, re.Pattern[str], Needs | None]]] = {}
        self._second = [need[1] if need and len(need) > 1 else None for _r, _rx, need in self.rules]
        self._by_first: dict[str, list[int]] = {}
        for i, (_r, _rx, need) in enumerate(self.rules):
            for needle in need[0] if need else ():
                self._by_first.setdefault(needle, []).append(i)

    def runnable(self, text: str, words: Sequence[str] = ()) -> list[tuple[str, re.Pattern[str], Needs | None]]:
        """The rules that can match somewhere in ``text`` (a whole sentence); ``words``: its runs of letters,
        lower-cased, when the caller has them (an ASCII sentence: see NeedleIndex.present)."""
        return self._runnable_in(self.lex.fold(text), words)

    def _runnable_in(self, folded: str, words: Sequence[str] = ()) -> list[tuple[str, re.Pattern[str], Needs | None]]:
        """``runnable`` of a text already folded (Lexicon.fold)."""
        present = frozenset(self.needles.present(folded, words or None))
        known = self._runnable.get(present)  # the same few needle sets recur: a memo of this pure function
        if known is not None:
            return known
        # needles.satisfied(need, present): the rules one of whose first needles is present (an index), then
        # their second needle set; rules with no needle always run
        hit: set[int] = set()
        for needle in present:
            hit.update(self._by_first.get(needle, ()))
        second = self._second
        found = [
            self.rules[i]
            for i in sorted(hit | self._always)
            if (need := second[i]) is None or not need.isdisjoint(present)
        ]
        if len(self._runnable) > 4096:
            self._runnable.clear()
        self._runnable[present] = found
        return found

    def live(self, sentence: Sentence, words: Sequence[str] = ()) -> list[tuple[str, re.Pattern[str], Needs | None]]:
        """The rules to run on the parts of ``sentence``: those that can match (needles), less those that match
        nowhere in the whole sentence: one search instead of one per part. A rule anchored at a part's start
        or end is searched in the parts joined by a line break, a NUL and a line break, with re.M: "^" and "$"
        match at every part's edges, and no whitespace or word lets a lookaround see past the NUL into the
        next part, so this finds every part's match (and perhaps more: then the parts are searched as usual)."""
        folded = self.lex.fold(sentence.text)
        runnable = self._runnable_in(folded, words)
        if not runnable:
            return runnable
        joined = "\n\0\n".join(folded[p.start : p.end] for p in sentence.parts) if self._anchored else ""
        return [
            r
            for r in runnable
            if (self._anchored[r[1]].search(joined) if r[1] in self._anchored else r[1].search(folded))
        ]

    def candidates(
        self,
        sentence: Sentence,
        part: Part,
        agent: str = NOBODY,
        rules: list[tuple[str, re.Pattern[str], Needs | None]] | None = None,
    ) -> list[Candidate]:
        out: list[Candidate] = []
        text = self.lex.fold(part.text)
        for rule, rx, _need in self.rules if rules is None else rules:
            for m in rx.finditer(text):
                if m.end() > m.start():
                    out.append(
                        Candidate(
                            rule, self.lex, sentence, part, part.start + m.start(), part.start + m.end(), "", agent
                        )
                    )
        return out


def verb_class(lex: Lexicon, verb: str, text: str) -> str:
    """The receipt verb (create, delete, ...) a claim needs; ``generic`` when the lexicon's classes do not say."""
    for cls, words in lex.classes:
        if verb and verb in words:
            return cls
    if lex.grammar == "zh":
        for probe in (verb, text):
            for cls, words in lex.classes:
                if probe and any(w in probe for w in words):
                    return cls
    return "generic"
