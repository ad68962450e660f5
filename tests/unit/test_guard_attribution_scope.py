"""An attribution governs its own clause (countersign/guard/attribution.py; issue 14).

A cue of the quotation or other_agent rule ("according to", "the records show", "'s note:", "status:", "据银行说")
says that what follows in *its* clause is content read from a source, not the assistant's act. Before this
change such a cue anywhere in a sentence set aside every candidate in it, so a cue placed in front of a claim
let the claim through with no receipt (I5): "According to your note, I've cancelled the subscription." passed.
Now a cue that stands in an earlier clause does not set aside a claim whose own clause names the assistant as
its subject (I, we, 我, 我们). A cue in the claim's own clause ("The log says I deleted the snapshots") and a
cue after the claim (a trailing attribution) still do: those report content, and so does someone's words
introduced by a colon ("小王说：我已经付了。": the first person is the speaker's; "Status:" introduces no one's).
"""

from __future__ import annotations

import pytest

from countersign.guard import ReplyGuard


@pytest.fixture(scope="module", params=[False, True], ids=["rules", "veto"])
def guard(request: pytest.FixtureRequest) -> ReplyGuard:
    return ReplyGuard.load(use_veto=request.param)


# a first-person claim after a clause holding an attribution cue: each passed with no receipt before
SLIPPED = [
    ("en", "According to your note, I've cancelled the subscription."),
    ("en", "The records show you paid it, and I've cancelled the subscription."),
    ("en", "The records show you paid it; I've cancelled the subscription."),
    ("en", "The statement says $40 is due; I paid it."),
    ("en", "The log shows two failed logins, so I locked your account."),
    ("en", "The log says the backup ran, and I deleted the old snapshots."),
    ("en", "Status: I cancelled your order."),
    ("en", "History: nothing changed; I restored the backup."),
    ("en", "According to the bank, the transfer cleared, and we have cancelled your order."),
    ("zh", "据银行说转账到了，我已经把订单取消了。"),
    ("zh", "状态：我已取消你的订单。"),
    ("zh", "根据日志显示备份失败，我们已经删掉了旧的快照。"),
]


@pytest.mark.parametrize(("lang", "reply"), SLIPPED)
def test_a_cue_in_an_earlier_clause_does_not_hide_a_first_person_claim(
    guard: ReplyGuard, lang: str, reply: str
) -> None:
    verdict = guard.check(reply, lang, [])
    assert verdict.replaced, (reply, verdict.excluded, verdict.vetoed)
    assert verdict.reason == "NO_SUCCEEDED_RECEIPT"


# content read from a source: the cue stands in the candidate's own clause, or after it, or the clause names no
# first-person subject; none is the assistant's act in this conversation
STILL_READ = [
    ("en", "The log says I deleted the snapshots."),
    ("en", "The records show you paid it."),
    ("en", "According to the log, your refund was issued on May 3."),
    ("en", "The seller's message: refund processed, allow 5 days."),
    ("en", 'The notification says "Your order has been cancelled".'),
    ("en", "Your brother wrote that he has paid the caterer."),
    # someone's words introduced by a colon: the first person is the speaker's
    ("en", "The seller's message: we have shipped your order."),
    ("en", "Per the record, last week's note: I cancelled your order."),
    ("zh", "小王说：我已经付了。"),
    ("zh", "小王回复：我已经把报告发过去了。"),
    ("zh", "据银行说转账已经到了。"),
    ("zh", "卖家留言：退款已处理，5 天内到账。"),
    ("zh", "短信里写着「您的订单已取消」。"),
]


@pytest.mark.parametrize(("lang", "reply"), STILL_READ)
def test_content_read_from_a_source_is_still_no_claim(guard: ReplyGuard, lang: str, reply: str) -> None:
    verdict = guard.check(reply, lang, [])
    assert not verdict.replaced, (reply, verdict.claims)


def test_the_slow_path_agrees(guard: ReplyGuard) -> None:
    """exclude() with a rule switched off takes the rule-by-rule path: it must scope the cues the same way."""
    for _lang, reply in SLIPPED:
        found, _dropped, _u = guard.read(reply, disabled_rules=frozenset({"capability"}))
        assert found, reply
    for _lang, reply in STILL_READ:
        found, _dropped, _u = guard.read(reply, disabled_rules=frozenset({"capability"}))
        assert not found, reply
