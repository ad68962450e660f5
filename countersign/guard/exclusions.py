"""Exclusions: the named rules that say a candidate claim is no claim, each with the cue that decided it.

Rules run in this order; the first that matches names the exclusion (lexicon.EXCLUSION_RULES):

    quotation             the claim stands inside quotes ("The notification says 'Your order has shipped'")
    negation              a negation before it in its part ("hasn't been", "没有", "Nothing was uploaded")
    question              its part asks ("Has it been deleted?", "退款已经到账了吗？")
    offer_plan            an offer or a plan ("I'll", "will be", "我可以", "马上")
    condition             a condition ("If you confirm", "一旦", "如果")
    waiting_confirmation  the write waits for the user ("pending your approval", "确认后")
    failure               its part reports a failure ("failed", "出错", "couldn't")
    instruction           the user is told what to do ("Tap", "请点击", "只差一步")
    capability            what can be done ("can be", "能", "支持")
    other_agent           the user or a third party acts ("you deleted", "the seller cancelled", "小王已经")
    state                 a state or a thing's own change, not an act: a property ("is located", "is delayed"),
                          a habit or a frame of one ("is closed on Sundays", "due to"), a capacity ("fully
                          booked", "约满了"), a thing that changes by itself ("prices fell", "雨停了")
    time_anchor           a fact read from data, anchored in the past ("on June 3", "yesterday", "上周")
    success_noun          a success word as a noun or a modifier ("success rate", "已取消的订单",
                          "Completed tasks: 12", "Deleted notes stay in the trash")
    generic_statement     a rule, not an act ("Cancelled orders are purged after 30 days")

The cues of ``state``, ``time_anchor`` and ``generic_statement`` (schema.GATED_RULES) set aside only a candidate
the assistant did not perform: "I've set the lights to go off every night" is a claim.
Each rule's cues are regexes in the lexicon, in scopes: ``before`` (from the part's start to the claim's end),
``part``, ``after`` (from the claim's end to the part's end) and ``sentence`` (an attribution cue of an earlier
part spares a first-person claim: attribution.py). Some rules also read what the grammar found (the agent, an
attributive participle): those are said below, next to their rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from countersign.guard.attribution import ATTRIBUTION, earliest_from, governs, in_own_clause
from countersign.guard.claims import ASSISTANT, NOBODY, OTHER, Candidate
from countersign.guard.labels import counted_label, status_list
from countersign.guard.lexicon import EXCLUSION_RULES, Cue
from countersign.guard.reported_en import after_attempt, quoted_message_sent, source_reports
from countersign.guard.schema import GATED_RULES


@dataclass(frozen=True)
class Exclusion:
    rule: str
    cue: str  # the text that decided (or what the grammar saw)


def exclude(
    c: Candidate,
    disabled: frozenset[str] = frozenset(),
    cache: dict[tuple[int, int, str], tuple[int, str, str] | None] | None = None,
    words: tuple[str, ...] = (),
) -> Exclusion | None:
    """The rule that makes ``c`` no claim, or None. ``disabled`` switches rules off (tests show each rule's
    own sentence fails without it). ``cache`` keeps one reply's part- and sentence-wide searches. ``words``: the
    sentence's Latin words, lower-cased, when the caller has them (language.Reading.words of an ASCII sentence:
    each run of letters is in one of them, so the cue needles they hold are the text's; NeedleIndex.present).

    The rules the grammar's findings decide are asked first, in order; then, for a candidate the assistant did
    not perform, the gated rules (state, time_anchor, generic_statement: most of what a read-out of data
    holds, so asked before the long cue lists); then the cues: in each scope the earliest cue of any rule
    names the rule."""
    if disabled:  # rule by rule: slower, only for the tests that switch rules off
        return _decided(c, disabled) or _one_by_one(c, disabled)
    why = _decided(c, disabled)
    if why is not None:
        return why
    part = c.part
    memo: dict[Any, Any] = {} if cache is None else cache
    sid = id(c.sentence)
    text = memo.get(sid)
    if text is None:
        text = memo[sid] = c.lexicon.fold(c.sentence.text)
    gated_rules: tuple[str, ...] = ()
    if c.agent != ASSISTANT:
        asked = memo.get((sid, "asked"))
        if asked is None:
            asked = memo[(sid, "asked")] = _on_request(c, text)
        gated_rules = () if asked else GATED_RULES
    # the cues whose needles the sentence holds (the gated rules' too), found once per sentence when first needed:
    # a needle a span holds is in the sentence, so this only ever runs a cue too many, never one too few
    live = memo.get((sid, "live"))
    for rule in gated_rules:
        if rule == "state" and "now" in c.flags:
            continue
        if rule == "time_anchor" and "fact" in c.flags:
            return Exclusion(rule, "a past event of the user's")
        if rule == "time_anchor" and "dated" in c.flags:
            return Exclusion(rule, "a past passive on a day of the month")
        if rule == "time_anchor" and (anchor := _continued_anchor(c, text)):
            return Exclusion(rule, anchor)
        one_by_one = c.lexicon.gated.get(rule, {})
        for scope, rx in c.lexicon.exclusions.get(rule, {}).items():
            whole = scope == "after" or (rule == "time_anchor" and "present" in c.flags)
            gated = (sid, -1 if scope == "sentence" else part.start, rule, scope)
            find: re.Pattern[str] | _Finder = rx
            if (whole or gated not in memo) and scope in one_by_one:
                if live is None:
                    live = memo[(sid, "live")] = c.lexicon.live_cues(_needles(c, text, words))
                if not (cues := live[(rule, scope)]):
                    if not whole:  # no cue of the scope can match in the sentence: nothing to search
                        memo[gated] = None
                    continue
                find = _Finder(cues)
            if whole:
                m = _gated(rule, scope, find, c, text)
            else:  # the part's (or sentence's) earliest match, once per reply; "before" compares its start
                if gated not in memo:
                    memo[gated] = _gated(rule, "part" if scope == "before" else scope, find, c, text)
                m = memo[gated]
                if m is not None and scope == "before" and m.start() + part.start >= c.end:
                    m = None
            if m is not None:
                return Exclusion(rule, m.group(0) or scope)
    if live is None:
        live = memo[(sid, "live")] = c.lexicon.live_cues(_needles(c, text, words))
    for scope in c.lexicon.cues:
        cues = live[scope]
        if scope == "after":
            hit = _earliest(cues, text[c.end : part.end], 0)
            if hit is not None:
                return Exclusion(hit[1], hit[2])
            continue
        key = (sid, -1 if scope == "sentence" else part.start, scope)
        if key not in memo:
            whole_sentence = scope == "sentence"
            memo[key] = (
                _earliest(cues, text, 0) if whole_sentence else _earliest(cues, text[part.start : part.end], part.start)
            )
        hit = memo[key]
        if hit is not None and scope == "sentence" and hit[1] in ATTRIBUTION and not governs(c, hit[0], hit[2], text):
            hit = earliest_from(cues, text, c)  # the attribution governs its own clause
        # "before": the earliest cue in the part must start before the claim ends
        if hit is not None and (scope != "before" or hit[0] < c.end):
            return Exclusion(hit[1], hit[2])
    return None


# the rules _decided asks, in the order of EXCLUSION_RULES (tests/unit/test_guard_fast_paths.py checks it)
DECIDED_RULES = ("quotation", "instruction", "other_agent", "state", "success_noun", "generic_statement")


def _decided(c: Candidate, disabled: frozenset[str]) -> Exclusion | None:
    """The rules the grammar's findings decide, in the order of EXCLUSION_RULES (quotes, the agent, flags); one
    test after the other, not a loop over the fourteen rules (this runs for every candidate)."""
    if "quotation" not in disabled:
        if c.sentence.quotes and c.sentence.quoted(c.vstart, c.vend):
            return Exclusion("quotation", "inside quotes")
        if c.lexicon.grammar == "en" and c.agent != ASSISTANT and (why := _reported(c)):
            return Exclusion("quotation", why)
    if "instruction" not in disabled and _imperative(c):
        return Exclusion("instruction", "an imperative: a base form joined to another base form (set … and leave)")
    if "other_agent" not in disabled:
        if c.agent == OTHER:
            return Exclusion("other_agent", c.subject or "another agent")
        if c.agent != ASSISTANT and c.verb in c.lexicon.others:
            return Exclusion("other_agent", "an act of a merchant or a carrier")
    if "state" not in disabled:
        if c.agent != ASSISTANT and not c.flags.isdisjoint(_STATE_FLAGS):
            return Exclusion("state", next(_STATE_FLAGS[f] for f in _STATE_FLAGS if f in c.flags))
        if _consequence(c):
            return Exclusion("state", "a thing's change after a failure (no one acted)")
    if "success_noun" not in disabled:
        if status_list(c):
            return Exclusion("success_noun", "a status named in a list of statuses")
        if not c.flags.isdisjoint(_NOUN_FLAGS) or counted_label(c):
            return Exclusion("success_noun", "a participle used as a modifier or a label")
    if "generic_statement" not in disabled and "generic" in c.flags:
        return Exclusion("generic_statement", "a present passive of a bare plural subject")
    return None


# grammar rules that report a thing's own change when no one is named ("the phone switched to offline mode",
# "电脑进入了睡眠"); phrase rules ("went through", 成功) report an outcome and are not read so
_CHANGE_RULES = frozenset({"headline", "past", "perfective_le", "result_complement"})
_CONTRAST = re.compile(
    r"^\W*(?:and\s+)?(?:but|however|yet|though|still|luckily|fortunately)\b|^\W*(?:不过|但|可是|然而|还好|幸好|好在)"
)
# adverbs before a Chinese verb are no subject ("也约了"); a connective of a remedy opens the speaker's own next
# step ("所以改用你的备用卡付了"), not a thing's change
_ZH_ADVERBS = re.compile(r"^(?:也|又|还|都|就|再|并且|并|然后|接着|随后|马上|立刻|顺便)+")
_ZH_REMEDY = re.compile(r"所以|于是|因此|只好|只能|便|改|换")
_ACTOR_MARKS = re.compile(r"[我帮给把将为替被]|已|刚")


def _consequence(c: Candidate) -> bool:
    """A thing that changes in a part after one that reports a failure: the failure's consequence, no act of the
    assistant's ("The sync failed and the phone switched to offline mode", "备份没完成，电脑进入了睡眠"). Only a
    named subject that is not the assistant (a Chinese one holds no coverb or aspect: "已把" is an act), and not
    after a contrast ("but the second try went through" reports the outcome)."""
    part = c.part
    if c.agent == ASSISTANT or part.start == 0:
        return False
    # a present passive of a thing after a failure is its state, the reason: "I couldn't place the order — the
    # restaurant is closed", "I didn't transfer it — the account is frozen" ("is now …" reports a change)
    present = c.rule == "passive" and "present" in c.flags and "now" not in c.flags and c.lexicon.grammar == "en"
    if c.rule not in _CHANGE_RULES and not present:
        return False
    head = c.sentence.text[part.start : c.vstart]
    if present and after_attempt(c, c.lexicon.fold(c.sentence.text[: part.start])):
        return True  # "I tried to move it, but the room is booked": the obstacle, after a contrast too (guard8en)
    if _CONTRAST.match(head.lower()):
        return False
    if c.lexicon.grammar == "en":
        if not c.subject:
            return False
    else:
        head = _ZH_ADVERBS.sub("", head.strip(" ,，、"))
        if not head or _ACTOR_MARKS.search(head) or _ZH_REMEDY.match(head):
            return False
    earlier = c.lexicon.fold(c.sentence.text[: part.start])
    found = c.lexicon.exclusions
    return any(
        rx.search(earlier)
        for rule in ("failure", "negation")
        for scope, rx in found.get(rule, {}).items()
        if scope in ("part", "before")
    )


def _reported(c: Candidate) -> str:
    """What a source reports or a quoted message's delivery (reported_en.py), as the cue that decided; ""."""
    if c.subject and (verb := source_reports(c)):
        return f"what a source reports ({verb})"
    return "a quoted message's own delivery" if quoted_message_sent(c) else ""


_NOUN_FLAGS = frozenset({"attributive", "label"})
_STATE_FLAGS = {
    "state": "a passive that names a property",
    "event": "a thing's own change (no one acted)",
    "relation": "a standing relation read from data (is connected to, is stored in)",
    "record": "a present state beside someone else's act: its record (claims_en.py)",
}


_AND_BASE = re.compile(r"\b(?:and|then)\s+(?:then\s+)?(?:just\s+|also\s+)?([a-z]+)\b")


def _imperative(c: Candidate) -> bool:
    """A bare head at the sentence's start whose form is also the base form (set, put, reset, cut), joined by
    "and"/"then" to a verb in its base form that is no past form ("Set the oven to 180 and leave it for an hour"):
    an instruction to the user, not a report ("Set the oven to 180 and left it" reports)."""
    if c.rule != "bare_head" or c.lexicon.grammar != "en":
        return False
    text = c.sentence.text
    if text[c.vstart : c.vend].lower() != c.verb.replace("-", ""):
        return False
    lex = c.lexicon
    if c.part.start != c.sentence.parts[0].start:
        return _chained_imperative(c, text.lower())
    return any(
        m.group(1) in lex.verb_lemmas and m.group(1) not in lex.verb_forms
        for m in _AND_BASE.finditer(text.lower(), c.vend)
    )


_BASE_OPENS = re.compile(r"^\W*(?:(?:please|just|simply|now|then|first)\s+)*([a-z]+)\b")
_JOINED = re.compile(r"^\W*(?:and|then|and\s+then)\s")


def _chained_imperative(c: Candidate, low: str) -> bool:
    """A bare head that is also the base form, after "and"/"then", when the part before it opens with a verb in
    its base form that is no past form ("To get the refund issued, attach the receipt and hit Submit"): the next
    step of an instruction ("I filled in the form and hit Submit" reports)."""
    parts = c.sentence.parts
    k = next((n for n, p in enumerate(parts) if p.start == c.part.start), 0)
    if k == 0 or not _JOINED.match(low[c.part.start : c.vstart]):
        return False
    prev = parts[k - 1]
    m = _BASE_OPENS.match(low[prev.start : prev.end])
    lex = c.lexicon
    return m is not None and m.group(1) in lex.verb_lemmas and m.group(1) not in lex.verb_forms


def _on_request(c: Candidate, text: str) -> bool:
    """The sentence says the act was the user's request ("as you asked", "按你的要求"; ``words.request_marks``):
    the assistant did it, so no gated rule (a date, a state, a habit) sets it aside."""
    return any(mark in text for mark in c.lexicon.word("request_marks"))


def _continued_anchor(c: Candidate, text: str) -> str:
    """A time anchor of the part a subjectless verb goes on from: "The account was created in 2019 and verified
    the same week" (a bare verb whose agent is nobody shares an earlier part's passive subject, and its date)."""
    if c.part.start == 0:
        return ""
    if c.rule != "bare_head" or c.agent != NOBODY:
        return _fronted_anchor(c, text)
    earlier = text[: c.part.start]
    for scope, rx in c.lexicon.exclusions.get("time_anchor", {}).items():
        if scope != "sentence" and (m := rx.search(earlier)) is not None:
            return f"{m.group(0)} (of the part it goes on from)"
    return ""


_TIME_OPENERS = frozenset({"on", "in", "since", "back", "yesterday", "last", "earlier", "two", "three", "a", "an"})


def _fronted_anchor(c: Candidate, text: str) -> str:
    """A date fronted as a part of its own before the claim's part: "On March 3, the subscription was cancelled",
    "On 12 May at 9:40, the parcel was delivered" (guard8en): the date governs the clause after it."""
    if c.lexicon.grammar != "en":
        return ""
    parts = c.sentence.parts
    k = next((n for n, p in enumerate(parts) if p.start == c.part.start), 0)
    if k == 0:
        return ""
    before = text[parts[k - 1].start : parts[k - 1].end]
    words = before.split()
    if not words or len(words) > 6 or words[0] not in _TIME_OPENERS:
        return ""
    for scope, rx in c.lexicon.exclusions.get("time_anchor", {}).items():
        if scope != "sentence" and (m := rx.search(before)) is not None and m.start() < 3:
            return f"{m.group(0)} (a date fronted before the clause)"
    return ""


class _Finder:
    """What ``search`` of a gated rule's scope (one alternation of its cues) finds, found as ``first_match`` of the
    cues one by one (``Lexicon.gated``): only the cues whose needles the sentence holds run (``cues``: those,
    from Lexicon.live_cues)."""

    __slots__ = ("cues",)

    def __init__(self, cues: tuple[Cue, ...]) -> None:
        self.cues = cues

    def search(self, text: str) -> re.Match[str] | None:
        best: re.Match[str] | None = None  # lexicon.first_match, its needle test done by live_cues
        for cue in self.cues:
            m = cue.rx.search(text)
            if m is not None and (best is None or m.start() < best.start()):
                best = m
        return best


def _needles(c: Candidate, text: str, words: tuple[str, ...]) -> set[str]:
    """The cue needles of the candidate's sentence (``text``, folded); see ``exclude`` for ``words``."""
    return c.lexicon.cue_index.present(text, words if c.lexicon.lower and words else None)


def _gated(rule: str, scope: str, rx: re.Pattern[str] | _Finder, c: Candidate, text: str) -> re.Match[str] | None:
    """A gated rule's cue in its scope. A time anchor anywhere in the sentence dates a present state ("is
    tagged 'home'" beside "was set on March 3"); ``before`` cues must start before the claim ends."""
    part = c.part  # slices, not search(text, pos): a cue's "^" is the start of its scope
    if scope == "sentence" or (rule == "time_anchor" and "present" in c.flags):
        return rx.search(text)
    if scope == "after":
        return rx.search(text[c.end : part.end])
    m = rx.search(text[part.start : part.end])
    return None if m is None or (scope == "before" and m.start() + part.start >= c.end) else m


def _earliest(cues: tuple[Cue, ...], text: str, offset: int) -> tuple[int, str, str] | None:
    """The earliest cue match in ``text``: (start + offset, rule, cue). ``cues``: those whose needles the sentence
    holds (Lexicon.live_cues; finding the needles a text holds is far cheaper than a regex search per cue)."""
    best: tuple[int, str, str] | None = None
    for cue in cues:
        m = cue.rx.search(text)
        if m is not None and (best is None or m.start() + offset < best[0]):
            best = (m.start() + offset, cue.rule, m.group(0) or "cue")
    return best


def _one_by_one(c: Candidate, disabled: frozenset[str]) -> Exclusion | None:
    text, part = c.lexicon.fold(c.sentence.text), c.part
    for rule in EXCLUSION_RULES:
        if rule in disabled:
            continue
        if rule in GATED_RULES:
            if c.agent == ASSISTANT or _on_request(c, text) or (rule == "state" and "now" in c.flags):
                continue
            if rule == "time_anchor" and "fact" in c.flags:
                return Exclusion(rule, "a past event of the user's")
            if rule == "time_anchor" and "dated" in c.flags:
                return Exclusion(rule, "a past passive on a day of the month")
            if rule == "time_anchor" and (anchor := _continued_anchor(c, text)):
                return Exclusion(rule, anchor)
            for scope, rx in c.lexicon.exclusions.get(rule, {}).items():
                m = _gated(rule, scope, rx, c, text)
                if m is not None:
                    return Exclusion(rule, m.group(0) or scope)
            continue
        for scope, rx in c.lexicon.exclusions.get(rule, {}).items():
            if scope == "after":
                m = rx.search(text[c.end : part.end])
            elif scope == "before":
                m = next((x for x in rx.finditer(text[part.start : part.end]) if x.start() < c.end - part.start), None)
            elif scope == "sentence":
                m = rx.search(text)
                if m is not None and rule in ATTRIBUTION and not governs(c, m.start(), m.group(0), text):
                    m = in_own_clause(rx, text, c)
            else:
                m = rx.search(text[part.start : part.end])
            if m is not None:
                return Exclusion(rule, m.group(0) or scope)
    return None
