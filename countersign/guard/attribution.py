"""Attribution scope (exclusions.py asks it): a cue that says what follows is content read from a source governs
its own clause, not a claim the assistant makes in a later one.

A quotation or other_agent cue ("according to", "the records show", "'s note:", "status:", "据银行说") used to set
aside every candidate of its sentence, so a cue placed in front of a claim hid it: "According to your note, I've
cancelled the subscription." passed with no receipt (I5). tests/unit/test_guard_attribution_scope.py.
One earlier cue still governs the next part: someone's words introduced by a colon ("小王说：我已经付了。", "The
seller's message: we have shipped your order."): the first person there is the speaker's (``introduces``). A label
or a record's name before a colon ("Status:", "状态：") introduces no one's words.
Nor does a source named after a first-person claim ("We have cancelled the order, according to the log.", "我已经把订单
取消了，据系统显示。"): a source says where a fact was read, not who acted (``trails``). A speech tag closing someone's
words still quotes them (", your brother said."). tests/unit/test_guard_attribution_trailing.py.
"""

from __future__ import annotations

import re

from countersign.guard.claims import ASSISTANT, Candidate
from countersign.guard.lexicon import Cue

# The rules whose cues say that what follows in their clause is content read from a source (a record, a message,
# a third party's word: "according to", "the records show", "'s note:", "status:", "据银行说"). Such a cue in an
# earlier clause does not set aside a candidate whose own clause names the assistant as its subject: "According to
# your note, I've cancelled the subscription" claims (tests/unit/test_guard_attribution_scope.py). A cue in the
# candidate's own clause ("The log says I deleted the snapshots") or after it still reports content.
ATTRIBUTION = frozenset({"quotation", "other_agent"})
_ZH_SPEAKER = re.compile(
    r"\W*(?:所以|于是|然后|接着|随后|但是?|不过|可是|并且?|而且|因此|我这边|这边)?\s*我们?(?![的们])"
)


def speaks(c: Candidate) -> bool:
    """The candidate's own clause names the assistant as its subject: "I", "we" (en); 我, 我们 opening the
    clause (zh; not 我的, a possessive)."""
    if c.agent != ASSISTANT:
        return False
    if c.lexicon.grammar == "en":
        return c.subject in c.lexicon.word("assistant_subjects")
    return _ZH_SPEAKER.match(c.sentence.text, c.part.start, c.vstart) is not None


# a speech tag closing someone's words (", your brother said."): the first person before it is the speaker's; not
# when the "speaker" is a record (", the history says."), which names where a fact was read, or the assistant
# itself under another name (", the assistant says.", ", the bot reported.")
_TAG = re.compile(
    r"(?:wrote|writes|said|says|reports|reported|mentioned|claims|claimed|told\s+(?:me|us|you))\W*$", re.IGNORECASE
)
_RECORD = re.compile(
    r"\b(?:logs?|history|records?|system|statement|data|ledger|audit|tracking|dashboard|calendar|app|page|portal|"
    r"report|timeline|feed|database|assistant|bot|chatbot|ai|copilot)\b",
    re.IGNORECASE,
)


def trails(c: Candidate, start: int, cue: str) -> bool:
    """The attribution cue found at ``start`` is a source named after c, a first-person claim ("…, according to the
    log", "…，据系统显示"): it does not set c aside; the assistant still says it acted. A speech tag closing
    someone's words (", Tom said.") is no source: the first person there is Tom's."""
    return start >= c.end and speaks(c) and (_TAG.search(cue) is None or _RECORD.search(cue) is not None)


def in_own_clause(rx: re.Pattern[str], text: str, c: Candidate) -> re.Match[str] | None:
    """The first match of an attribution cue in c's own clause or after it that sets c aside (not ``trails``)."""
    return next((m for m in rx.finditer(text, c.part.start) if not trails(c, m.start(), m.group(0))), None)


def earliest_from(cues: tuple[Cue, ...], text: str, c: Candidate) -> tuple[int, str, str] | None:
    """The earliest cue of the sentence's ``cues`` (as exclusions._earliest finds it), with the attribution cues
    searched in c's own clause and after it (``in_own_clause``)."""
    best: tuple[int, str, str] | None = None
    for cue in cues:
        m = in_own_clause(cue.rx, text, c) if cue.rule in ATTRIBUTION else cue.rx.search(text)
        if m is not None and (best is None or m.start() < best[0]):
            best = (m.start(), cue.rule, m.group(0) or "cue")
    return best


# a speech verb or a message noun closing the cue, with its colon: someone's words follow
_SPEECH = re.compile(
    r"(?:说|回复|留言|消息|短信|写道|来信|message|note|email|e-mail|text|sms|reply|replied|wrote|writes|said|says|"
    r"answer|answered|response|responded)\s*[:：]\s*$",
    re.IGNORECASE,
)


def introduces(start: int, cue: str, text: str, part_start: int) -> bool:
    """The cue found at ``start`` introduces the part at ``part_start`` as someone's words: it ends with a speech
    verb or a message noun and its colon, and nothing but spaces and colons stands between it and the part."""
    return _SPEECH.search(cue) is not None and not text[start + len(cue) : part_start].strip(" :：")


def governs(c: Candidate, start: int, cue: str, text: str) -> bool:
    """An attribution cue found at ``start`` of the sentence's folded ``text`` sets ``c`` aside: it stands in c's
    own part or after it (not as a source named after a first-person claim: ``trails``), or c names no
    first-person subject, or the cue introduces c's part as someone's words."""
    if trails(c, start, cue):
        return False
    part_start = c.part.start
    return start >= part_start or not speaks(c) or introduces(start, cue, text, part_start)
