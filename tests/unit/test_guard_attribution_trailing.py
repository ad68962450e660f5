"""A trailing attribution does not hide the assistant's own act (countersign/guard/attribution.py; issue 14).

A source cue placed after a first-person completion ("…, according to the log.", "…，据系统显示。") set the claim
aside as content read from a source, so an assistant could say it did something with no receipt (I5): "We have
cancelled the order, according to the log." passed. A source names where a fact was read; it does not change who
the sentence says acted: the assistant (I, we, 我, 我们), in this turn's wording. Such a sentence is a claim now.
Still reads: a third party or the user as subject (with a date or not: "Your refund was issued on May 3,
according to the log."), a cue governing the claim from before it ("The log says I deleted the
snapshots."), someone's words introduced by a colon, and a speech tag closing someone's words (", Tom said.").
"""

from __future__ import annotations

import pytest

from countersign.guard import ReplyGuard


@pytest.fixture(scope="module", params=[False, True], ids=["rules", "veto"])
def guard(request: pytest.FixtureRequest) -> ReplyGuard:
    return ReplyGuard.load(use_veto=request.param)


# a first-person completion with a source cue only after it: each passed with no receipt before
TRAILING = [
    ("en", "We have cancelled the order, according to the log."),
    ("en", "I've cancelled your subscription according to the records."),
    ("en", "I have refunded the payment, as the records show."),
    ("en", "We've deleted the three drafts, the history says."),
    ("en", "I've sent the invoice to the client, according to the system."),
    ("en", "I've archived the old tickets, so the log shows."),
    ("en", "I have transferred the deposit, according to the statement."),
    # a date does not make the assistant's own act a read: "We cancelled that order on June 3." claims, with or
    # without its source (the time_anchor rule reads facts about the user or a third party)
    ("en", "We cancelled that order on June 3, according to the log."),
    # the assistant named as the speaker of its own words is no one else's quotation
    ("en", "I have cancelled the order, the assistant says."),
    ("en", "We have cancelled the order, the bot reported."),
    ("en", "We have cancelled your order, the AI wrote."),
    ("zh", "我已经把订单取消了，据系统显示。"),
    ("zh", "我们已经给您退款了，据后台记录。"),
    ("zh", "我已经把提醒设好了，据日历显示。"),
    ("zh", "我已为您删除了这三条记录，据系统日志记录。"),
]


@pytest.mark.parametrize(("lang", "reply"), TRAILING)
def test_a_source_named_after_a_first_person_claim_does_not_hide_it(guard: ReplyGuard, lang: str, reply: str) -> None:
    verdict = guard.check(reply, lang, [])
    assert verdict.replaced, (reply, verdict.excluded, verdict.vetoed)
    assert verdict.reason == "NO_SUCCEEDED_RECEIPT"


# content read from a source, with the cue after it: no first-person act of this turn
STILL_READ = [
    ("en", "Your refund was issued on May 3, according to the log."),
    ("en", "The seller shipped it yesterday, according to the tracking page."),
    ("en", "You cancelled it yourself, the records show."),
    ("en", "Your landlord has already paid the plumber, according to the statement."),
    ("en", "I've paid the caterer, your brother said."),
    ("en", "We have shipped your order, the seller wrote."),
    ("en", "The log says I deleted the snapshots."),
    ("zh", "卖家昨天已经发货了，据物流显示。"),
    ("zh", "您上周已经取消了这个订单，据系统记录。"),
    ("zh", "小王已经把纪要发到群里了，据群消息显示。"),
    ("zh", "小王说：我已经付了。"),
]


@pytest.mark.parametrize(("lang", "reply"), STILL_READ)
def test_a_source_named_after_someone_elses_act_still_reads(guard: ReplyGuard, lang: str, reply: str) -> None:
    verdict = guard.check(reply, lang, [])
    assert not verdict.replaced, (reply, verdict.claims)


def test_the_slow_path_agrees(guard: ReplyGuard) -> None:
    """exclude() with a rule switched off takes the rule-by-rule path: it must scope the cues the same way."""
    for _lang, reply in TRAILING:
        found, _dropped, _u = guard.read(reply, disabled_rules=frozenset({"capability"}))
        assert found, reply
    for _lang, reply in STILL_READ:
        found, _dropped, _u = guard.read(reply, disabled_rules=frozenset({"capability"}))
        assert not found, reply
