"""Claims and exclusions (countersign/guard/claims_*.py, exclusions.py): the grammar proposes, a named rule
sets aside, and each rule has a sentence that is read as a claim without it.

Pure tests: no Redis, no gRPC.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from countersign.guard import ReplyGuard
from countersign.guard.lexicon import EXCLUSION_RULES


@pytest.fixture(scope="module")
def guard() -> ReplyGuard:
    return ReplyGuard.load()


# (rule, sentence): a claim when the rule is switched off, no claim with every rule on
RULE_CASES = [
    ("quotation", 'The notification says "Your order has been cancelled".'),
    ("quotation", "短信里写着「您的订单已取消」。"),
    ("negation", "The refund was not issued."),
    ("negation", "笔记并没有被删除。"),
    ("question", "Has the refund been issued?"),
    ("question", "订单已经取消了吗？"),
    ("offer_plan", "The subscription will be cancelled."),
    ("offer_plan", "我马上把它删了。"),
    ("condition", "If the order has been cancelled, you'll get an email."),
    ("condition", "一旦付款成功，会员会自动开通。"),
    ("waiting_confirmation", "Your transfer is being processed."),
    ("waiting_confirmation", "改签方案已生成，需要你确认。"),
    ("failure", "Payment failed: the card was declined."),
    ("failure", "邮件已发送失败。"),
    ("instruction", "只差一步就搞定了：点一下“提交”。"),
    ("instruction", "Make sure the form is submitted before noon."),
    ("capability", "This plan lets you have 3 reminders set at once."),
    ("other_agent", "The seller cancelled the order."),
    ("other_agent", "小王已经把纪要发到群里了。"),
    ("other_agent", "Meeting room A was booked by someone else."),
    ("time_anchor", "The order was cancelled on June 3."),
    ("time_anchor", "这张照片三天前被删除了。"),
    ("success_noun", "Cancelled orders stay in the list for 30 days."),
    ("success_noun", "已取消的订单会在 30 天后清除。"),
    ("success_noun", "本月的退款成功率很高。"),
    ("generic_statement", "Old drafts are removed by default."),
]


def test_every_rule_has_a_case() -> None:
    assert {rule for rule, _ in RULE_CASES} == set(EXCLUSION_RULES)


@pytest.mark.parametrize(("rule", "sentence"), RULE_CASES)
def test_each_exclusion_rule_sets_aside_its_own_sentence(guard: ReplyGuard, rule: str, sentence: str) -> None:
    claims, dropped, _lang = guard.read(sentence)
    assert not claims, f"{sentence!r} is read as a claim: {[c.text for c in claims]}"
    assert rule in {why.rule for _c, why in dropped}, [(c.text, why) for c, why in dropped]
    without, _dropped, _lang = guard.read(sentence, disabled_rules=frozenset({rule}))
    assert without, f"without {rule}, {sentence!r} should be a claim: the test proves nothing"


@pytest.mark.parametrize(
    "reply",
    [
        "I couldn't set the reminder, but the todo has been created.",
        "The SMS failed; the email has been sent.",
        "提醒没设成功，不过待办已经建好了。",
        "短信发送失败，邮件倒是已经发出去了。",
        "You have 3 unread emails; I've archived the oldest one.",
        "查到你下周有两个会议，已经把第二个改到周五了。",
    ],
)
def test_a_claiming_clause_beside_a_denying_or_read_one_is_still_a_claim(guard: ReplyGuard, reply: str) -> None:
    assert guard.check(reply, "en", []).replaced


@pytest.mark.parametrize(
    ("reply", "rule"),
    [
        ("I've refunded the late fee.", "perfect"),
        ("I uploaded the slides to the shared drive.", "past"),
        ("Your subscription has been cancelled.", "passive"),
        ("Deleted.", "bare_head"),
        ('Marked "Pay rent" as done.', "bare_head"),
        ("Invoice exported as PDF.", "headline"),
        ("Your shipping address now points to the office.", "result_state"),
        ("Your dentist appointment is on the calendar.", "result_state"),
        ("All set!", "success_word"),
        ("Yep, took care of it.", "success_phrase"),
        ("✅ Reminder", "success_mark"),
        ("I've unpinned the message.", "perfect"),         # a prefixed verb: regular morphology
        ("I texted Sam the address.", "past"),             # a verb the table lacks: -ed morphology
        ("订单已经帮你取消了。", "completion_aspect"),
        ("明早七点的闹钟设置好了。", "result_complement"),
        ("行，那封邮件删除了。", "perfective_le"),
        ("那封邮件撤回了。", "result_complement"),
        ("我把会议纪要归拢了。", "ba_construction"),
        ("电费已缴纳成功。", "completion_aspect"),
        ("删除成功，共 3 条。", "success_complement"),
        ("你的那条评论被删除", "passive"),
        ("搞定！", "colloquial_success"),
        ("客厅的灯现在已经是关闭状态了。", "result_state"),
    ],
)
def test_the_grammar_rule_that_reads_a_claim_is_named(guard: ReplyGuard, reply: str, rule: str) -> None:
    verdict = guard.check(reply, "en", [])
    assert verdict.replaced, reply
    assert rule in {c.rule for c in verdict.claims}, verdict.claims


def test_any_write_verb_is_read_not_only_todo_verbs(guard: ReplyGuard) -> None:
    verbs = ["refunded", "archived", "muted", "merged", "renewed", "unsubscribed", "rebooked", "transferred",
             "reinstated", "escalated", "quarantined", "whitelisted", "defragmented", "notarized"]
    for verb in verbs:
        assert guard.check(f"I've {verb} it.", "en", []).replaced, verb
        assert guard.check(f"It has been {verb}.", "en", []).replaced, verb
    for verb in ["退", "撤回", "解冻", "注销", "续费", "挂失", "报销", "改签"]:
        assert guard.check(f"已经帮你{verb}了。", "zh-CN", []).replaced, verb


def test_read_verbs_do_not_claim(guard: ReplyGuard) -> None:
    for reply in ("I found three matching documents.", "I've checked your calendar.", "I looked at the order.",
                  "我查看了你的日程。", "我找到了三份相关文件。", "已经收到你的需求。"):
        assert not guard.check(reply, "en", []).replaced, reply


def test_an_excluded_candidate_is_explained(guard: ReplyGuard) -> None:
    verdict = guard.check("The order was never cancelled.", "en", [])
    assert verdict.reason == "NO_CLAIM" and not verdict.replaced
    assert verdict.excluded == (("The order was never cancelled.", "negation", "never"),)
    assert "set aside by negation" in verdict.explanation


_WORDS = ["not", "never", "n't", "will", "if", "once", "pending", "failed", "tap", "can be", "by", "yesterday",
          "ago", "on June 3", "status:", "rate", "always", "done", "all set", "is now", "went through", "care",
          "sorted", "ready", "gone", "✅", "没有", "吗", "？", "会", "如果", "失败", "请", "能", "你", "小王", "昨天",
          "成功率", "搞定", "妥了", "OK了", "已经", "状态", "了", " ", ",", ".", "?", "I", "it", "was", "been"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.lists(st.one_of(st.sampled_from(_WORDS), st.text(max_size=4)), max_size=30).map("".join))
def test_needles_never_hide_a_match(guard: ReplyGuard, text: str) -> None:
    for lex in guard.lexicons_by_name.values():
        folded = lex.fold(text)
        rules = [(c.rx, c.needs) for cues in lex.cues.values() for c in cues]
        rules += [(rx, need) for _rule, rx, need in guard.grammars[lex.name].phrases.rules]
        for rx, need in rules:
            if need is not None and rx.search(folded):
                assert any(n in folded for n in need), (rx.pattern, text)
