"""Where an English past form stands decides what it is (the table in claims_en.py): passive, perfect, past,
bare head, headline, causative, or an attributive use that claims nothing ("the deleted report").
"""

from __future__ import annotations

from countersign.guard.claims import ASSISTANT, NOBODY, OTHER, Candidate
from countersign.guard.segment import Part, Sentence
from countersign.guard.words_en import OBJECT_PRONOUNS, EnglishWords, Token

_REPORTING = frozenset({"whether", "if", "how", "what", "when", "where", "which", "who", "why"})
_RELATIVE = frozenset({"that", "which", "who", "whom", "whose"})
_FLOATING = frozenset({"all", "both", "each"})
_CAUSATIVES = frozenset({"get", "got", "gets", "gotten", "have", "has", "had"})
_WH = frozenset({"what", "whatever", "which", "whichever", "who", "whoever"})
_POSSESSIVE = frozenset({"'", "’"})
_ORDINALS = frozenset({"st", "nd", "rd", "th"})
_COUNTS = frozenset({"two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "twelve", "both"})
_TIME_PREPS = frozenset({"after", "before", "by", "until", "till", "at", "from", "since", "past"})
_DAYS = frozenset(
    {"today", "tomorrow", "tonight", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
)


def _one_occasion(after: list[Token]) -> bool:
    """A "for" + one day or "for all N …" after a passive: an occasion ("booked for Sunday"), not a habit."""
    for n, t in enumerate(after[:-1]):
        if t[0] == "for":
            nxt = after[n + 1]
            return nxt[0] in _DAYS or (
                nxt[0] in ("all", "the", "these", "those") and n + 2 < len(after) and after[n + 2][3] == "#"
            )
    return False  # after a plural noun: its owner ("the kids' tablet"), no subject


def _on_a_day(after: list[Token]) -> bool:
    """ "on the 9th" among a past passive's next words (guard8en): a day of the month dates a record."""
    return any(
        t[0] == "on" and after[n + 1][0] == "the" and after[n + 2][0][-2:] in _ORDINALS and after[n + 2][3] == "#"
        for n, t in enumerate(after[:-2])
    )


class Placement(EnglishWords):
    def _place(
        self, sentence: Sentence, part: Part, tokens: list[Token], first: int, i: int, inherited: str
    ) -> Candidate | None:
        lemma, end, span = tokens[i][4], tokens[i][2], (tokens[i][1], tokens[i][2])
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        after = tokens[i + 2] if i + 2 < len(tokens) else None
        if (
            nxt is not None
            and (nxt[0] in _REPORTING or (nxt[0] == "that" and after is not None and after[3] in "PUTDN#"))
            and lemma not in self.lex.word("message_verbs")  # "been notified that you'll be late": a send
        ):
            return None  # reporting, not acting: "I confirmed that the payment arrived", "checked whether"
        j = i - 1
        while j >= first and (
            tokens[j][3] in "AX" or (tokens[j][0] in _FLOATING and j > first and tokens[j - 1][3] in "BNHG")
        ):
            j -= 1  # "are all booked": a quantifier after an auxiliary floats, it determines nothing
        prev = tokens[j][3] if j >= first else ""
        if prev == "D" or (prev == "#" and nxt is not None and nxt[3] == "O" and nxt[0] not in self.preps):
            return None  # attributive: "the deleted report", "14 archived emails"
        if tokens[j][0] in OBJECT_PRONOUNS and j - 1 >= first and tokens[j - 1][3] in "VR" and j == i - 1:
            return None  # an object complement: "marked it shipped" is the claim (or not) of "marked"
        if prev == "O" and tokens[j][0] in self.preps:
            return Candidate(
                "headline",
                self.lex,
                sentence,
                part,
                tokens[j][1],
                end,
                lemma,
                NOBODY,
                "",
                frozenset({"attributive"}),
                span,
            )  # a state named after a preposition: "under Closed"
        if prev == "O" and tokens[j][0] in _WH:
            return Candidate(
                "past",
                self.lex,
                sentence,
                part,
                tokens[j][1],
                end,
                lemma,
                NOBODY,
                tokens[j][0],
                frozenset({"attributive"}),
                span,
            )  # "what changed", "whatever was deleted"
        k = j
        while k - 1 >= first and tokens[k - 1][3] in "OD#" and tokens[k - 1][0] not in self.preps:
            k -= 1  # the object of a causative: "had the package redirected", "got your car booked in"
        if k < j and k - 1 >= first and tokens[k - 1][0] in _CAUSATIVES and tokens[k][3] == "D":
            j = k
        if (
            prev in ("U", "T", "O")
            and j - 1 >= first
            and tokens[j - 1][0] in _CAUSATIVES
            and (prev != "O" or tokens[j][0] in OBJECT_PRONOUNS or tokens[j][3] == "D")
        ):
            k = j - 1  # causative: "got you booked", "got it fixed"
            agent = self._agent(tokens[first:k]) or inherited
            return Candidate(
                "causative",
                self.lex,
                sentence,
                part,
                tokens[k][1],
                end,
                lemma,
                agent,
                self._words(tokens[first:k]),
                verb_span=span,
            )
        if prev in ("N", "B", "G"):
            k = j
            while k - 1 >= first and tokens[k - 1][3] in "HBNMAX":
                k -= 1
            subject = tokens[first:k]
            if any(t[3] == "P" for t in subject[:1]) and prev != "N":
                return None  # "I was asked", "I'm excited": the speaker as the patient is no report
            flags = frozenset({"generic"}) if self._generic(subject, tokens[k:i], tokens[i + 1 :]) else frozenset()
            if lemma in self.lex.states:
                flags = flags | {"state"}  # "is located on 5th Avenue", "was delayed by an hour"
            elif self._relation(lemma, tokens[k:i], nxt, after):
                flags = flags | {"relation"}  # "is connected to the office Wi-Fi": a standing relation, read
            if len(subject) > 1 and subject[-1][0] in _RELATIVE:
                flags = flags | {"attributive"}  # "2 todos that have been completed": a description
            if subject and subject[0][3] == "U" and any(t[0] in ("was", "were") for t in tokens[k:i]):
                flags = flags | {"fact"}  # "You were charged twice": an event of the user's, read from data
            elif any(t[0] in ("was", "were") for t in tokens[k:i]) and _on_a_day(tokens[i + 1 :]):
                flags = flags | {"dated"}  # "The fee was refunded on the 9th": a record (not "is booked for the 9th")
            aux = [t[0] for t in tokens[k:i] if t[3] != "X"]
            if any(t[0] == "now" for t in tokens[k:i]):
                flags = flags | {"now"}  # "is now shared with the team": a change, not a standing state
            if aux and all(
                w in ("is", "are", "am") or (w not in ("now", "already", "just", "all") and t3 == "A")
                for w, t3 in ((t[0], t[3]) for t in tokens[k:i] if t[3] != "X")
            ):
                flags = flags | {"present"}  # "is tagged 'home'": a state; a past date in the sentence reads it
            return Candidate(
                "passive", self.lex, sentence, part, tokens[k][1], end, lemma, NOBODY, self._words(subject), flags, span
            )
        if prev == "H":
            k = j
            while k - 1 >= first and tokens[k - 1][3] in "HMAX":
                k -= 1
            subject = tokens[first:k]
            agent = self._agent(subject) or (inherited if not subject else OTHER)
            flags = frozenset({"attributive"}) if len(subject) > 1 and subject[-1][0] in _RELATIVE else frozenset()
            return Candidate(
                "perfect", self.lex, sentence, part, tokens[k][1], end, lemma, agent, self._words(subject), flags, span
            )
        if prev in ("P", "U", "T"):
            agent = ASSISTANT if prev == "P" else OTHER
            return Candidate(
                "past", self.lex, sentence, part, tokens[j][1], end, lemma, agent, tokens[j][0], verb_span=span
            )
        if j < first:
            return Candidate(
                "bare_head",
                self.lex,
                sentence,
                part,
                tokens[i][1],
                end,
                lemma,
                inherited,
                "",
                self._head_flags(part, tokens, i),
                span,
            )
        if prev == "M":
            return None  # "I will deleted" is no English; "could have" is H
        subject = tokens[first:i]
        event = frozenset({"event"}) if lemma in self.lex.changes else frozenset()  # "Gas prices fell"
        who = self._actor(subject, nxt)
        if who == "natural":
            event = frozenset({"event"})  # "The storm knocked out power": weather acts, no one did
        elif who == "person":  # "Your sister shared 12 photos", "Dad already paid for it": an active past
            return Candidate(
                "past", self.lex, sentence, part, tokens[first][1], end, lemma, OTHER, self._words(subject), event, span
            )
        if nxt is None or nxt[0] in self.preps or nxt[3] in ("A", "#") or nxt[0] in ("as", "successfully"):
            if any(t[3] in "BHNGMdVRL" for t in subject):
                return None  # a headline's subject holds no verb: "is heated by a wood stove" is none
            if (
                any(t[3] in "BM" for t in tokens[i + 1 :]) or self._later_present(subject, tokens[i + 1 :])
            ) and not any(t[0] in _RELATIVE for t in tokens[i + 1 :]):
                event = event | {"attributive"}  # "Files uploaded to the drive are scanned": the verb comes later
            return Candidate(
                "headline",
                self.lex,
                sentence,
                part,
                tokens[first][1],
                end,
                lemma,
                NOBODY,
                self._words(subject),
                event,
                span,
            )
        return Candidate(
            "past", self.lex, sentence, part, tokens[first][1], end, lemma, OTHER, self._words(subject), event, span
        )

    def _later_present(self, subject: list[Token], rest: list[Token]) -> bool:
        """A present verb of the sentence after the headline's participle, agreeing with its subject: the participle
        is a reduced relative ("Receipts filed under Travel get reimbursed faster", "Orders placed after 3pm ship
        the next day", "A parcel left at the door gets photographed")."""
        nouns = [t for t in subject if t[3] not in "AD"]
        if not nouns:
            return False
        plural = nouns[-1][0].endswith("s") and not nouns[-1][0].endswith("ss")
        lemmas, forms = self.lex.verb_lemmas, self.lex.verb_forms
        for k in range(1, len(rest) - 1):  # a verb with something after it, after a noun that is no preposition
            prev, w = rest[k - 1], rest[k][0]
            if prev[3] not in "O#" or prev[0] in self.preps or rest[k][3] not in "OGRV":
                continue
            if w.endswith("s") and prev[0].replace(",", "").isdigit() and (k < 2 or rest[k - 2][0] not in _TIME_PREPS):
                continue  # a plural after a bare count is a noun: "for the 40 crates" (no "ticket crates")
            if rest[k][3] in "RV" and w not in lemmas:
                continue  # a past form that is no base form ("… and sent") goes on with the headline
            if plural and (w == "get" or w in lemmas):  # (cost, put, set: a base form that is also a past)
                return True
            if not plural and (w == "gets" or (w.endswith("s") and w[:-1] in lemmas and w not in forms)):
                return True
        return False

    def _relation(self, lemma: str, aux: list[Token], nxt: Token | None, obj: Token | None) -> bool:
        """A present passive of a verb of ``words.relation_verbs`` before a preposition of where or with what a
        thing stands ("is connected to", "are paired with", "is stored in", "is still linked to"): a standing
        relation read from data. "is now connected to" reports a change (the flag "now" is read first). The
        preposition needs its object: "Your booking's locked in." is a particle, and a report."""
        if lemma not in self.relations or nxt is None or nxt[0] not in self.relation_preps:
            return False
        if obj is None or obj[0] in self.preps:
            return False
        words = [t[0] for t in aux if t[3] != "X"]
        return any(w in ("is", "are", "am") for w in words) and all(
            w in ("is", "are", "am") or (t3 == "A" and w not in ("now", "just", "successfully", "finally"))
            for w, t3 in ((t[0], t[3]) for t in aux if t[3] != "X")
        )

    def _actor(self, subject: list[Token], nxt: Token | None) -> str:
        """Who a headline's subject is: "person" when its head noun is one of ``words.persons`` and the verb acts
        (an object follows, an adverb stands between, or a determiner opens it: "Your sister shared 12 photos",
        "Dad already paid for it", "The courier parked outside"; "Landlord notified." is a headline of the
        assistant's act); "natural" for weather and the like."""
        nouns = [t for t in subject if t[3] not in "A"]
        if not nouns:
            return ""
        head = nouns[-1][0]
        if head in self.natural:
            return "natural"
        if head not in self.persons:
            return ""
        acts = (
            any(t[3] == "A" for t in subject)
            or subject[0][3] in ("D", "U")  # "Your neighbour parked in your spot": a headline drops determiners
            or (nxt is not None and nxt[0] not in self.preps and nxt[3] in ("D", "#", "O"))
        )
        return "person" if acts else ""

    def _agent(self, subject: list[Token]) -> str:
        """Who acts, from a subject's words ("" for no subject)."""
        words = [t for t in subject if t[3] != "A"]
        if not words:
            return ""
        if words[0][3] == "P":
            return ASSISTANT
        return OTHER

    def _generic(self, subject: list[Token], aux: list[Token], after: list[Token]) -> bool:
        """A present passive of a bare plural subject states a rule ("Cancelled orders are purged"), no act."""
        words = [t for t in subject if t[3] != "A"]
        if not words or words[0][3] in ("D", "P", "U", "T", "#") or words[0][0] in OBJECT_PRONOUNS:
            return False
        if words[0][0] in _COUNTS and (len(words) < 2 or words[1][0] != "of"):
            return False  # a count determines it: "(All) three parking fines are paid off" is a report (guard8en;
            # "Three of your five goals are completed" is a tally: the rule reads on)
        if any(t[2] - t[1] > len(t[0]) for t in words[:-1]):
            return False  # a possessive determines it: "Grandpa's reminders are set for 8 a.m." is his, no rule
        if _one_occasion(after):
            return False  # "Movers are booked for Sunday", "… for all 14 orders": one occasion, no rule
        # a head noun with a participle after it ("Photos uploaded after midnight are tagged"): the head decides
        cut = next((n for n, t in enumerate(words) if n and t[3] == "V"), len(words))
        words = words[:cut]
        if not words[-1][0].endswith("s") or words[-1][0].endswith("ss"):
            return False
        return all(
            t[0] in ("is", "are", "get") or (t[3] == "A" and t[0] not in ("now", "already", "just")) for t in aux
        ) and any(t[0] in ("is", "are", "get") for t in aux)

    def _head_flags(self, part: Part, tokens: list[Token], i: int) -> frozenset[str]:
        """A bare participle that is a modifier, not a report: "Deleted notes stay in the trash", "Completed: 3"."""
        rest = tokens[i + 1 :]
        if part.end_mark == ":" and rest and all(t[3] in ("O", "V", "R") for t in rest):
            return frozenset({"label"})
        if rest and (rest[0][3] == "D" or rest[0][0] in OBJECT_PRONOUNS):
            return frozenset()  # it takes an object: "Paid the gas bill on Sep 30" (a modifier takes none)
        for k, t in enumerate(rest):
            if t[3] in ("B", "H", "M"):
                return frozenset({"attributive"})
            if (
                k > 0
                and t[0] in self.lex.verb_lemmas
                and rest[k - 1][0].endswith("s")
                and rest[k - 1][3] == "O"
                and rest[k - 1][0] not in self.preps  # "set as default": "as" is no plural noun (guard8en)
                and part.text[rest[k - 1][2] - part.start : rest[k - 1][2] - part.start + 1] not in _POSSESSIVE
                and not any(w[0] in self.preps for w in rest[: k - 1])  # "Signed Sam up for the tennis camp"
            ):
                return frozenset({"attributive"})  # not a possessive plural: "Turned off autoplay on the kids' tablet"
        return frozenset()

    @staticmethod
    def _words(tokens: list[Token]) -> str:
        return " ".join(t[0] for t in tokens)
