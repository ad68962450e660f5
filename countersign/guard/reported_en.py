"""What a source reports (guard8en): an English clause whose subject holds a source and its present verb ("The
sensor reports the door is closed", "The status reads Completed"), and what a quoted message's own delivery is
("The text says 'Your table is booked', sent from an unknown number"). Who acts is the source, not the
assistant: the claim is content read from data (exclusion rule ``quotation``, asked in exclusions._decided).
"""

from __future__ import annotations

import re

from countersign.guard.claims import Candidate

_SUBJECT_PRONOUNS = frozenset({"it", "this", "that"})
_ATTEMPT = re.compile(r"\b(?:tried|attempted|went)\s+to\b|(?:'d|\bwould)\s+(?:\w+ly\s+)?have\b")
_WORD = re.compile(r"[a-z]+")


def source_reports(c: Candidate) -> str:
    """The source verb in the candidate's subject that makes the claim its content, or "": a present verb of
    ``words.source_verbs`` after a word of the subject, with more of the subject after it ("the garage sensor
    reports the door"), or closing a headline's subject before a participle in Title Case, a label shown ("the
    status reads Completed"; not "Meeting notes shared with the team": a plural noun before a report)."""
    words = c.subject.split()
    if len(words) < 2 or words[0] in ("i", "we"):
        return ""
    verbs = c.lexicon.word("source_verbs")
    for n, w in enumerate(words[1:], 1):
        if w not in verbs or words[n - 1] in c.lexicon.word("determiners"):
            continue
        if n < len(words) - 1:
            return w
        shown = c.sentence.text[c.vstart : c.vstart + 1]
        if c.rule == "headline" and shown.isupper():
            return w
    return ""


def quoted_message_sent(c: Candidate) -> bool:
    """A send verb right after a quoted message, about the message: a participle with no object in the part after
    the quote ("…'Your order is confirmed', sent from an unknown number") or a passive of "it" ("…, but it was
    sent to your colleague"). The message's author sent it; the assistant's own send names an object ("…, so
    I forwarded it to you") or a subject of its own."""
    quotes = c.sentence.quotes
    if not quotes or c.part.start == 0 or c.verb not in c.lexicon.word("send_verbs"):
        return False
    if c.rule == "passive":  # "it" after a quote is the quoted message
        return c.subject in _SUBJECT_PRONOUNS and any(qe <= c.part.start for _qs, qe in quotes)
    between = c.sentence.text[max(qe for _qs, qe in quotes) : c.part.start] if quotes[-1][1] <= c.part.start else "x"
    if c.rule != "bare_head" or between.strip(" ,;:—–-\"”’'"):
        return False  # the quote closes the part just before this one
    after = _WORD.match(c.lexicon.fold(c.sentence.text[c.vend : c.part.end]).lstrip())
    return after is not None and after.group(0) in c.lexicon.word("prepositions")


def after_attempt(c: Candidate, earlier: str) -> bool:
    """A present passive after a part that tried and did not say it worked, or that says what would have been
    ("I tried to move the meeting, but the room is booked", "I'd usually have it renewed, but the office is
    shut"): the obstacle's state, not a result."""
    return _ATTEMPT.search(earlier) is not None
