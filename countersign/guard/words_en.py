"""English words as the grammar of claims reads them: tokens with a tag and a lemma.

A token is (word, start, end, tag, lemma). Tags: P the assistant (I, we), U you, T a third person, H have,
B be, N been, G get/got, M a modal, X a negation, d did, D a determiner, A an adverb, # a number, V a past
form or participle of a write verb, R one of a verb the lexicon says never writes (find, check ...), L a
participle in Title Case inside a sentence (a label: "Tap Blocked Numbers"), O other.
Contractions are opened ("I've" -> I + have, "isn't" -> is + not). Past forms: verbs_en.py.
"""

from __future__ import annotations

import re

from countersign.guard.lexicon import Lexicon
from countersign.guard.segment import Part, Sentence
from countersign.guard.verbs_en import VerbForms

_TOKEN = re.compile(r"[A-Za-z]+(?:['-][A-Za-z]+)*|\d+(?:[.,:]\d+)*(?:%|(?i:am|pm|st|nd|rd|th)\b)?|[$#@]")
_NOT = {
    "isn't": "is",
    "aren't": "are",
    "wasn't": "was",
    "weren't": "were",
    "hasn't": "has",
    "haven't": "have",
    "hadn't": "had",
    "didn't": "did",
    "don't": "do",
    "doesn't": "does",
    "couldn't": "could",
    "wouldn't": "would",
    "shouldn't": "should",
    "won't": "will",
    "can't": "can",
    "mustn't": "must",
    "needn't": "need",
    "ain't": "is",
}
_SUFFIX = {"'ve": "have", "'re": "are", "'m": "am", "'ll": "will", "'d": "'d"}
_D_AFTER = frozenset(
    {
        "i",
        "you",
        "he",
        "she",
        "we",
        "they",
        "it",
        "that",
        "who",
        "there",
        "what",
        "where",
        "how",
        "this",
        "here",
        "which",
        "someone",
        "everyone",
        "nobody",
    }
)  # "'d" = had/would after these
_IS_AFTER = frozenset(
    {
        "it",
        "that",
        "what",
        "there",
        "here",
        "he",
        "she",
        "who",
        "everything",
        "all",
        "this",
        "nothing",
        "something",
        "one",
        "which",
        "where",
        "today",
    }
)
_TAGS = {
    "have": "H",
    "has": "H",
    "had": "H",
    "is": "B",
    "are": "B",
    "was": "B",
    "were": "B",
    "am": "B",
    "be": "B",
    "being": "B",
    "been": "N",
    "get": "G",
    "got": "G",
    "gets": "G",
    "gotten": "G",
    "did": "d",
    "not": "X",
    "never": "X",
    "no": "X",
}
OBJECT_PRONOUNS = frozenset(
    {
        "it",
        "them",
        "him",
        "her",
        "me",
        "us",
        "you",
        "everything",
        "that",
        "this",
        "those",
        "these",
        "all",
        "both",
        "one",
    }
)
_CLOCK = frozenset({"am", "pm"})
_LY_NOUNS = frozenset({"family", "assembly", "anomaly", "monopoly", "butterfly", "homily", "jelly", "belly", "bully"})
_LETTER = re.compile(r"[A-Za-z0-9]")
_WORD_BEFORE = re.compile(r"([A-Za-z]+)\W*$")
_WORD_AFTER = re.compile(r"\W*([A-Za-z]+)")


def _titled_neighbour(text: str, m: re.Match[str], openers: frozenset[str]) -> bool:
    """Whether the word next to a Title Case participle is Title Case too ("Blocked Numbers", "Recently Deleted"),
    not an opener ("Done — Deleted the draft") nor "I"."""
    after = _WORD_AFTER.match(text, m.end())
    if after is not None and after.group(1).istitle() and after.group(1) != "I":
        return True
    before = _WORD_BEFORE.search(text, 0, m.start())
    return (
        before is not None
        and before.group(1).istitle()
        and before.group(1) != "I"
        and before.group(1).lower() not in openers
    )


Token = tuple[str, int, int, str, str]  # word, start, end (in sentence.text), tag, lemma


class EnglishWords(VerbForms):
    """The lexicon's word classes and verb table, and the tokeniser that tags a clause part with them."""

    def __init__(self, lex: Lexicon) -> None:
        super().__init__(lex)
        self.subjects = lex.word("assistant_subjects")
        self.third = lex.word("third_person")
        self.modals = lex.word("modals")
        self.determiners = lex.word("determiners")
        self.adverbs = lex.word("adverbs")
        self.openers = lex.word("openers")
        self.preps = lex.word("prepositions")
        self.relations = lex.word("relation_verbs")
        self.relation_preps = lex.word("relation_prepositions")
        self.persons = lex.word("persons")
        self.natural = lex.word("natural_subjects")
        self._cache: dict[str, tuple[str, str]] = {}

    def tokens(self, sentence: Sentence, part: Part) -> list[Token]:
        out: list[Token] = []
        base, cache, revisit = part.start, self._cache, False
        for m in _TOKEN.finditer(part.text):
            raw = m.group(0)
            word, s, e = raw.lower(), base + m.start(), base + m.end()
            if "'" in word:
                revisit |= self._contraction(word, s, e, out)
                continue
            cached = cache.get(word) or self._remember(word)
            if word in _CLOCK and out and out[-1][3] == "#":
                out.append((word, s, e, "#", ""))  # "8 am", "7 pm": the clock time's half, no "be" (guard8en)
                continue
            if cached[0] == "V" and raw[0].isupper() and raw.istitle():
                if word not in self._forms:
                    # a capitalised word the verb table lacks ("Ahmed", "Mildred") is a name, unless it opens
                    # the sentence and no verb follows it ("Texted Sam the address")
                    out.append((word, s, e, "?", ""))
                    revisit = True
                    continue
                if _LETTER.search(sentence.text, 0, s) and _titled_neighbour(part.text, m, self.openers):
                    out.append((word, s, e, "L", cached[1]))  # in a Title Case name: a label ("Tap Blocked Numbers")
                    continue
            out.append((word, s, e, cached[0], cached[1]))
        if revisit:
            # "the door's shut": is; "Sam's booked the table": has (an object follows); "Sam's car": possessive
            out = [
                t
                if t[3] != "S"
                else ("has", t[1], t[2], "H", "")
                if self._object_at(out, i + 2)
                else ("is", t[1], t[2], "B", "")
                for i, t in enumerate(out)
                if t[3] != "S" or (i + 1 < len(out) and out[i + 1][3] in "VR")
            ]
            for i, t in enumerate(out):
                if t[0] == "'d":  # "had" before a participle ("I'd already deleted it"), else "would"
                    nxt = next((u for u in out[i + 1 :] if u[3] != "A"), None)
                    out[i] = (t[0], t[1], t[2], "H" if nxt is not None and nxt[3] in "VR" else "M", "")
                elif t[3] == "?":
                    named = t[1] > 0 or (i + 1 < len(out) and out[i + 1][3] in "VR")
                    out[i] = (t[0], t[1], t[2], "O", "") if named else self._tag(t[0], t[1], t[2])
        return out

    def _object_at(self, out: list[Token], i: int) -> bool:
        """Whether ``out[i]`` opens an object (a noun phrase, not a preposition): "Sam's booked the table"."""
        return i < len(out) and out[i][3] in "DOUTP#" and out[i][0] not in self.preps

    def _contraction(self, word: str, s: int, e: int, out: list[Token]) -> bool:
        """Open a word with an apostrophe into tokens; True when a "'d" needs the next word to be read."""
        if word in _NOT:
            out.append(self._tag(_NOT[word], s, e))
            out.append((word, s, e, "X", ""))
            return False
        head, _, tail = word.partition("'")
        tail = "'" + tail
        if tail == "'d" and head not in _D_AFTER:
            out.append((word, s, e, "V", head))  # a noun made a verb: "RSVP'd", "Venmo'd", "cc'd"
            return False
        if tail in _SUFFIX:
            out.append(self._tag(head, s, e))
            out.append(self._tag(_SUFFIX[tail], s, e))
            return tail == "'d"
        out.append(self._tag(head if tail == "'s" else word, s, e))
        if tail == "'s" and head in _IS_AFTER:
            out.append(self._tag("is", s, e))
        elif tail == "'s":
            out.append(("'s", s, e, "S", ""))  # before a participle "is" or "has", else a possessive
            return True
        return False

    def _remember(self, word: str) -> tuple[str, str]:
        if len(self._cache) > 20000:
            self._cache.clear()
        found = self._cache[word] = self._classify(word)
        return found

    def _tag(self, word: str, s: int, e: int) -> Token:
        cached = self._cache.get(word) or self._remember(word)
        return word, s, e, cached[0], cached[1]

    def _classify(self, word: str) -> tuple[str, str]:
        if word in self.subjects:
            return "P", ""
        if word == "you":
            return "U", ""
        if word in self.third:
            return "T", ""
        if word in _TAGS:
            return _TAGS[word], ""
        if word in self.modals:
            return "M", ""
        if word in self.determiners:
            return "D", ""
        if word in self.adverbs:
            return "A", ""
        if word[0].isdigit():
            return "#", ""
        lemma = self.past_lemma(word)
        if lemma:
            return ("R" if self._not_write(lemma) else "V"), lemma
        if len(word) > 5 and word.endswith("ly") and word not in self.lex.verb_lemmas and word not in _LY_NOUNS:
            return "A", ""  # an adverb the list lacks: "is currently set", "was temporarily paused" (guard8en)
        return "O", ""
