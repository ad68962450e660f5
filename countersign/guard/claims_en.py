"""The English grammar of completion: perfect, past and passive forms of any write verb.

Every past form and past participle of every verb in the lexicon's verb table (generated from a lexical
resource, thousands of verbs) is a write verb unless ``verbs.not_writes`` lists its lemma (find, check, fail,
expire ...); a word the table lacks is read by regular morphology (words_en.py tags the tokens). Each such
form is then placed by what stands before it:

    been/is/was/got + V        passive        "has been cancelled", "is now enabled", "got reversed"
    have + V                   perfect        "I've refunded", "you have deleted" (agent: the subject)
    I/we/you/he + V            past           "I booked", "you cancelled"
    (nothing) + V              bare_head      "Deleted.", "Marked 'Pay rent' as done", "- cancelled the booking"
    noun + V + (end|prep|as)   headline       "Message sent to Priya", "Invoice exported as PDF" (a verb of
                                              ``verbs.changes`` is a thing's own change: "Gas prices fell")
    noun + V + object          past, OTHER    "The seller cancelled it"
    the/your/all + V           (attributive: not a claim) "the deleted report", "all uploaded files"
    got/had + object + V       causative      "got you booked", "got it fixed", "had the package redirected",
                                              and with a base form: "had the florist add a card", "got the bank
                                              to waive the fee"
    now + V-s                  result_state   "your address now points to the office"
    did + V                    past           "the email did go out"
A part that has no subject of its own takes the previous part's ("I found it and sent it": "sent it" is mine).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from countersign.guard.claims import ASSISTANT, NOBODY, OTHER, Candidate, Phrases
from countersign.guard.lexicon import Lexicon
from countersign.guard.placement_en import Placement
from countersign.guard.segment import Part, Sentence
from countersign.guard.words_en import Token

_WORDS = re.compile(r"[a-z]+")
_ED = re.compile(r"ed\b(?<=[a-z]ed)")  # = [a-z]ed\b, written literal-first so that re skips fast
_PIECES = re.compile(r"[,;:—–()]|\s-\s|\b(?=and\b|but\b|so\b|though\b|then\b)")
_NOW = frozenset({"now"})  # a change, not a standing state: "Your alarm now repeats on weekdays"
_NOW_WORD = re.compile(r"(?<!\bright\s)(?<!\bfor\s)\bnow\b", re.IGNORECASE)  # not "right now", "for now"


_REMEDY = frozenset({"so", "therefore", "instead", "thus"})
_MAKE = frozenset({"got", "had", "get"})
_INTO = frozenset({"in", "into", "on", "onto", "to"})
_ACTS = frozenset({"past", "perfect"})
_RECORD = frozenset({"record"})
_MINE = re.compile(r"\b(?:my|me|us|our)\b", re.IGNORECASE)
_NEXT_STEP = re.compile(r"^\W*(?:so|therefore|thus|then|and\s+so)\b|\bnow\b", re.IGNORECASE)  # the next step, a change
_NEGATED = re.compile(r"n't\b|\b(?:not|never|no)\b", re.IGNORECASE)  # causatives with a base form after their object


class EnglishGrammar(Placement):
    def __init__(self, lex: Lexicon) -> None:
        super().__init__(lex)
        self.phrases = Phrases(lex)
        self._placing = lex.word("placing_verbs")
        self._targets = lex.word("write_targets")

    def may_claim(self, text: str, words: Sequence[str] = ()) -> bool:
        """A cheap test: could ``text`` hold a claim at all (a past form, an -ed word, a phrase rule)?
        ``words``: the sentence's lower-cased words when the caller has them already."""
        low = text.lower()
        if not words:
            words = _WORDS.findall(low)
        if (
            not self._forms.isdisjoint(words)
            or ("now" in words or "did" in words)
            or ("ed" in low and _ED.search(low))
            or "'d " in low
        ):
            return True
        rules = self.phrases.runnable(low, words)
        if not rules:
            return False
        if any(rx.search(low) for _r, rx, _n in rules if "^" not in rx.pattern and "$" not in rx.pattern):
            return True
        # a rule anchored at a part's start or end ("is in place."): try each rough piece
        anchored = [rx for _r, rx, _n in rules if "^" in rx.pattern or "$" in rx.pattern]
        return bool(anchored) and any(rx.search(piece) for piece in _PIECES.split(low) for rx in anchored)

    def candidates(self, sentence: Sentence, words: Sequence[str] = ()) -> list[Candidate]:
        out: list[Candidate] = []
        inherited = ASSISTANT
        rules = self.phrases.live(sentence, words)
        make = not words or not _MAKE.isdisjoint(words)  # a causative with a base form needs got/had/get
        for part in sentence.parts:
            tokens = self.tokens(sentence, part)
            # "so"/"instead" opens the speaker's own next step: "The payment failed, so retried it with your Visa"
            agent = ASSISTANT if tokens and tokens[0][0] in _REMEDY else inherited
            found, subject_agent = self._part(sentence, part, tokens, agent, make)
            out.extend(found)
            for c in self.phrases.candidates(sentence, part, rules=rules) if rules else ():
                if c.rule == "result_state" and _NOW_WORD.search(c.text):
                    c.flags = _NOW  # "is now view-only": a change, as the passive's "now" (guard8en)
                out.append(c)
            if subject_agent:
                inherited = subject_agent
        if len(out) > 1 and any(self._someones_act(c) for c in out):
            for c in out:  # a present state beside the user's or a third party's act is its record (guard8en)
                if c.rule == "passive" and "present" in c.flags and not _NEXT_STEP.search(c.part.text):
                    c.flags = c.flags | _RECORD  # "You paid it on the 3rd; the receipt is attached to the record"
        return out

    def _someones_act(self, c: Candidate) -> bool:
        """An act the user or a person did on their own, as the part says it (no negation): "You already paid it
        on the 3rd", "The landlord has renewed the lease" (not "you haven't approved it yet"; not a party's answer
        to the assistant's request: "The airline confirmed my request and the refund is issued" reports)."""
        if c.agent != OTHER or c.rule not in _ACTS or _NEGATED.search(c.part.text):
            return False
        if c.verb in self.lex.word("permission_verbs"):
            return False  # "You approved the transfer, and it is sent": a go-ahead, then the assistant's act
        words = c.subject.split()
        if words[:1] == ["you"]:
            return True
        return bool(words) and words[-1] in self.persons and _MINE.search(c.part.text) is None

    # -- one part ----------------------------------------------------------------------------------

    def _part(
        self, sentence: Sentence, part: Part, tokens: list[Token], inherited: str, make: bool = True
    ) -> tuple[list[Candidate], str]:
        out: list[Candidate] = []
        first = 0
        while first < len(tokens) and (tokens[first][0] in self.openers or tokens[first][3] == "A"):
            first += 1
        subject_agent = (
            self._agent(tokens[first : first + 1]) if tokens[first : first + 1] and tokens[first][3] in "PUT" else ""
        )
        for i, (word, _s, _e, tag, lemma) in enumerate(tokens):
            if (
                tag == "R"
                and (particles := self.lex.particle_writes.get(lemma))
                and (
                    any(t[0] in particles for t in tokens[i + 1 : i + 3])
                    or ("into" in particles and any(t[0] == "into" for t in tokens[i + 3 : i + 5]))
                )
            ):
                tag = "V"  # "checked in", "sorted you out", "left the group", "sorted the receipts into folders"
            elif tag == "R" and lemma in self._placing and self._placed(tokens, i):
                tag = "V"  # a read verb with a place it puts things: "Noted the date in your garden log" (guard8en)
            if tag == "d":  # emphatic past: "I did rebook the hotel", "the email did go out"
                nxt = next((j for j in range(i + 1, len(tokens)) if tokens[j][3] != "A"), None)
                if nxt is None:
                    continue
                verb = tokens[nxt][0]
                goes = verb == "go" and nxt + 1 < len(tokens) and tokens[nxt + 1][0] in ("out", "through")
                base = self._base(verb)
                if goes or (base and verb != "go" and not self._not_write(base)):
                    agent = self._agent(tokens[first:i]) or inherited
                    if agent == OTHER and goes:
                        agent = NOBODY  # "the email did go out": a result, whoever the subject
                    out.append(
                        Candidate(
                            "past",
                            self.lex,
                            sentence,
                            part,
                            tokens[i][1],
                            tokens[nxt][2],
                            verb,
                            agent,
                            self._words(tokens[first:i]),
                        )
                    )
                continue
            if word == "now" and i + 1 < len(tokens) and first < i:
                # (a bare plural subject states a rule: "Prices now include tax" is read only for write verbs)
                determined = tokens[first][3] in "DUPT"
                lemma_now = self._now_verb(tokens[i + 1][0], tokens[i - 1][0] if determined else "")
                if lemma_now:
                    out.append(
                        Candidate(
                            "result_state",
                            self.lex,
                            sentence,
                            part,
                            tokens[i][1],
                            tokens[i + 1][2],
                            lemma_now,
                            NOBODY,
                            self._words(tokens[first:i]),
                            _NOW,
                        )
                    )
                continue
            if tag == "L":  # a label named after a state: "Tap Blocked Numbers", "Recently Deleted keeps ..."
                out.append(
                    Candidate(
                        "bare_head",
                        self.lex,
                        sentence,
                        part,
                        tokens[i][1],
                        tokens[i][2],
                        lemma,
                        inherited,
                        "",
                        frozenset({"label"}),
                    )
                )
                continue
            if tag != "V":
                continue
            cand = self._place(sentence, part, tokens, first, i, inherited)
            if cand is not None:
                out.append(cand)
                if cand.subject and cand.rule in ("past", "perfect", "passive") and not subject_agent:
                    # "The invoice was issued ... and paid a week later": the next part's verb is passive too
                    subject_agent = NOBODY if cand.rule == "passive" else cand.agent
        made = (
            self._made_to_act(sentence, part, tokens, first, inherited)
            if make and any(t[0] in _MAKE for t in tokens)
            else None
        )
        if made is not None:
            out.append(made)
        if not subject_agent:
            acts = self._noun_acts(tokens, first)
            if acts == "active":
                subject_agent = OTHER  # "The courier called and then left a note": the next part's verb is his
            elif acts == "passive":
                subject_agent = NOBODY  # "The plan was started in 2021 and renewed twice": the plan, not me
        return out, subject_agent

    def _placed(self, tokens: list[Token], i: int) -> bool:
        """Whether a place that holds what is written follows the verb at ``i`` in its part: a preposition of
        ``_INTO`` and, within four words, a noun of ``words.write_targets`` ("noted the date in your garden log",
        "listed the armour on the auction house", "pulled the clauses into a note"; not "noted a fee in your
        statement", "listed the items in the email": a source, read)."""
        for n in range(i + 1, len(tokens) - 1):  # (right after the verb in a passive: "is listed on eBay")
            if tokens[n][0] in _INTO:
                return any(t[0] in self._targets for t in tokens[n + 1 : n + 5])
        return False

    def _made_to_act(
        self, sentence: Sentence, part: Part, tokens: list[Token], first: int, inherited: str
    ) -> Candidate | None:
        """A causative with a base form: got/had + someone + (to) + a write verb ("I had the pharmacy transfer your
        prescription", "I got the bank to waive the fee"): the subject made it happen."""
        stops = self.lex.word("causative_stops")
        for j in range(first, len(tokens) - 2):
            if tokens[j][0] not in _MAKE:
                continue
            for k in range(j + 2, min(j + 6, len(tokens))):  # the object: a determiner and nouns, then the verb
                obj = tokens[j + 1 : k]
                if any(t[3] not in "DOT" or t[0] in self.preps for t in obj):
                    break
                if obj[-1][3] == "D":
                    continue
                v = k + (tokens[k][0] == "to" and tokens[j][0] != "had")
                if v >= len(tokens) or obj[-1][0] in stops or tokens[v][0] in self._forms:
                    continue  # a past form is the participle causative ("had the package redirected")
                lemma = self._base(tokens[v][0])
                if not lemma or self._not_write(lemma):
                    continue
                agent = self._agent(tokens[first:j]) or inherited
                return Candidate(
                    "causative",
                    self.lex,
                    sentence,
                    part,
                    tokens[j][1],
                    tokens[v][2],
                    lemma,
                    agent,
                    self._words(tokens[first:j]),
                    verb_span=(tokens[v][1], tokens[v][2]),
                )
        return None

    def _now_verb(self, word: str, before: str) -> str:
        """The lemma of a present verb after "now" that reports a change: a write verb ("now points to"), its
        plural form after a plural subject ("your controls now block apps"), or one of ``words.now_verbs``
        ("the sheet now includes last night's dinner": what a thing holds changed)."""
        lemma = self._present(word)
        if lemma:
            return lemma
        now_verbs = self.lex.word("now_verbs")
        if not before:
            return ""
        if word in now_verbs or (word.endswith("s") and word[:-1] in now_verbs):
            return word.removesuffix("s") if word not in now_verbs else word
        if before.endswith("s") and word in self.lex.verb_lemmas and word not in self.lex.not_writes:
            return word
        return ""

    @staticmethod
    def _noun_acts(tokens: list[Token], first: int) -> str:
        """Whether the part opens with a noun subject and its past verb ("The courier called", "Your neighbour
        came by": "active") or a passive of any verb ("The plan was started": "passive"), which a following part
        without a subject of its own shares; "" if neither."""
        i = first + (first < len(tokens) and tokens[first][3] == "D")
        j = i
        while j < len(tokens) and j - i < 3 and tokens[j][3] == "O":
            j += 1
        if not i < j < len(tokens):
            return ""
        if tokens[j][3] in "VR":
            return "active"
        k = j
        while k < len(tokens) and tokens[k][3] in "BA":
            k += 1
        return "passive" if k > j and tokens[j][3] == "B" and k < len(tokens) and tokens[k][3] in "VR" else ""
