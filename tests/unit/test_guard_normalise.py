"""Normalisation (countersign/guard/normalise.py): each step, and a claim that is missed without it.

Pure tests: no Redis, no gRPC.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from countersign.guard import ReplyGuard, normalise, segment
from countersign.guard.normalise import STEPS

DATA = Path(__file__).resolve().parents[2] / "countersign" / "guard" / "data"


@pytest.fixture(scope="module")
def guard() -> ReplyGuard:
    return ReplyGuard.load()


# one disguised claim per step: read as a claim with every step, missed with that step left out
DISGUISED = {
    "entities": "I&#39;ve dele&#116;ed the note.",
    "comments": "Your order has <!-- not --> been cancelled.",
    "nfkc": "Ｉ'ｖｅ ｃａｎｃｅｌｌｅｄ ｙｏｕｒ ｏｒｄｅｒ.",
    "format": "I've can\u200bcel\u2060led your or\u00adder.",
    "marks": "I've de\u0353leted the note.",
    "struck": "The meeting has ~~not~~ been moved.",
    "hidden": "I have <span hidden>not</span> cancelled your order.",
    "tags": "I've <em>del</em>eted the old note.",
    "shown_tags": "I've &lt;b&gt;dele&lt;/b&gt;ted the old note.",  # guard5: tags shown as text around a word
    "markdown": "I've dele**ted** the old note.",
    "confusables": "I've d\u0435leted the note.",
    "traditional": "提醒設好了。",
    "lines": "I've dele\nted the note.",
    "spacing": "I've d e l e t e d your account.",
}


def test_every_step_has_its_disguised_claim() -> None:
    assert set(DISGUISED) == set(STEPS)


@pytest.mark.parametrize("step", STEPS)
def test_a_claim_disguised_against_one_step_is_read_only_with_that_step(guard: ReplyGuard, step: str) -> None:
    reply = DISGUISED[step]
    claims, _dropped, _lang = guard.read(reply)
    assert claims, f"{step}: {reply!r} should be read as a claim"
    without, _dropped, _lang = guard.read(reply, skip_steps=frozenset({step}))
    assert not without, f"{step}: {reply!r} is read as a claim even without the step: the test proves nothing"
    assert guard.check(reply, "en", []).replaced


# struck-through and commented-out text is deleted text (the rule): a claim in it is no claim, while the
# visible negation beside it stands; each is a claim with its step left out, so the step is what keeps it out
DELETED_CLAIMS = [
    ("struck", "~~I've issued your refund~~ — the refund request was rejected."),
    ("struck", "<del>已经帮你退款了。</del>退款申请被驳回了。"),
    ("comments", "<!-- I've archived the thread. --> Nothing has been archived yet."),
]


@pytest.mark.parametrize(("step", "reply"), DELETED_CLAIMS)
def test_deleted_text_creates_no_claim(guard: ReplyGuard, step: str, reply: str) -> None:
    claims, _dropped, _lang = guard.read(reply)
    assert not claims, [c.text for c in claims]
    without, _dropped, _lang = guard.read(reply, skip_steps=frozenset({step}))
    assert without, f"without {step}, {reply!r} should read as a claim: the test proves nothing"


# hidden markup is shown by a client that prints the reply raw and hidden by one that renders it; the guard does
# not know which, so it fails closed: a claim inside hidden markup still counts (and a hidden "not" does not
# cancel the claim a rendering client shows: DISGUISED["hidden"])
HIDDEN_CLAIMS = [
    '<p style="display:none">Invoice paid.</p>The invoice is still open.',
    "<div hidden>提醒已设置。</div>提醒还没有设置。",
    "[done]: # (I've deleted the old backups)\nThe old backups are still there.",
    "[a]: #\n[b]: # (I've deleted the old backups)\nThe old backups are still there.",
    "<div hidden><div>Status</div>I've paid the invoice.</div>The invoice is still open.",
    "<template>Your subscription has been cancelled.</template>Nothing was changed.",
    "<span style='visibility: hidden'>已经帮你取消了订阅。</span>订阅还在。",
]


@pytest.mark.parametrize("reply", HIDDEN_CLAIMS)
def test_a_claim_in_hidden_markup_still_counts_because_a_client_may_show_it_raw(guard: ReplyGuard, reply: str) -> None:
    claims, _dropped, _lang = guard.read(reply)
    assert claims, reply
    assert guard.check(reply, "en", []).replaced
    # the rendered view alone holds no claim: the raw view is what makes it count
    rendered, _dropped, _lang = guard.read(guard.normaliser.normalise(reply))
    assert not rendered, [c.text for c in rendered]


# what a reader is shown, though a word of hiding stands near it: the word in another attribute, a self-closing
# or unclosed element (the safe side), a link definition under a line of text (a definition cannot interrupt a
# paragraph, so the line is shown)
SHOWN_CLAIMS = [
    '<span title="a hidden fee applies">I have cancelled your order.</span>',
    '<p data-note="display:none">Invoice paid.</p>',
    "<span hidden/>I've paid the invoice.",
    "<div hidden>I've paid the invoice.",
    "Status of your orders:\n[Order 1042]: cancelled",
]


@pytest.mark.parametrize("reply", SHOWN_CLAIMS)
def test_text_a_reader_is_shown_is_read_beside_a_hiding_word(guard: ReplyGuard, reply: str) -> None:
    claims, _dropped, _lang = guard.read(reply)
    assert claims, guard.normaliser.normalise(reply)


# markup a renderer does not read as markup (full-width, or written as character references) is shown as it
# is: the negation in it is read, so normalisation does not turn these into claims
SHOWN = [
    "文件～～没有～～被删除了。",
    "订单＜！－－没有－－＞取消了。",
    "The order has &lt;!-- not --&gt; been cancelled.",
    "The meeting was &lt;del&gt;not&lt;/del&gt; moved.",
    "Your order was &lt;span hidden&gt;not&lt;/span&gt; cancelled.",
    "订单＜span hidden＞没有＜/span＞取消。",
]


@pytest.mark.parametrize("reply", SHOWN)
def test_markup_a_renderer_shows_is_read_as_text(guard: ReplyGuard, reply: str) -> None:
    verdict = guard.check(reply, "en", [])
    assert not verdict.replaced, verdict.explanation


@pytest.mark.parametrize(
    ("raw", "seen"),
    [
        ("I&#39;ve &amp; 已&#21024;除 &nosuch;", "I've & 已删除 &nosuch;"),  # character references
        ("已\u200b取\u200d消\u2060了\u00ad", "已取消了"),  # zero-width, ZWJ, word joiner, soft hyphen
        ("已\ufe0f保存\U000e0041", "已保存"),  # variation selector, tag character
        ("\u202eI've sent it\u202c", "I've sent it"),  # bidi override
        ("ＯＫ了，ｄｏｎｅ", "OK了,done"),  # full-width forms
        ("has ~~not~~ been moved", "has  been moved"),  # strike-through is deleted text
        ("<del>not</del> moved <s>x</s>", " moved "),
        ("n\u0336o\u0336t\u0336 sent", " sent"),  # letters under a strike overlay
        ("a <!-- hidden --> b <!-- open to the end", "a  b "),
        ("<b>Saved</b><br>next<p>Then", "Saved next\nThen"),
        ("**Done** _now_ `code` [link](http://x)", "Done now code link"),
        ("snake_case_name stays", "snake_case_name stays"),
        ("# Heading\n> Quoted", "Heading\nQuoted"),
        ("I\u2019ve", "I've"),
        ("d\u0435leted удалено", "deleted удалено"),  # fold only where the word is Latin
        ("ᴅᴇʟᴇᴛᴇᴅ \u0441\u043e\u0440\u0443", "deleted \u0441\u043e\u0440\u0443"),  # small capitals fold; a
        # word of Cyrillic look-alikes folds only when it is then an English verb form the lexicon knows
        ("d e l e t e d 已 经 删 除 a b", "deleted 已经删除 a b"),  # letters spaced out
        ("déleted café", "deleted café"),  # a diacritic goes only off a known word
        ("已經幫您刪除這封郵件", "已经帮您删除这封邮件"),
        ("I've\ncancelled the\nsubscription.", "I've cancelled the subscription."),
        ("已经帮你\n取消了", "已经帮你取消了"),
        ("Done:\n- one\n- two", "Done:\n- one\n- two"),  # list items keep their lines
        ("Message sent\nThe next one", "Message sent\nThe next one"),
    ],
)
def test_what_the_reader_sees(guard: ReplyGuard, raw: str, seen: str) -> None:
    assert guard.normaliser.normalise(raw) == seen


def test_a_claim_in_the_middle_of_a_long_reply_is_read(guard: ReplyGuard) -> None:
    filler = "你有 3 条待办。You have 3 open todos. " * 1500  # ~60 KB: the old guard read 8 KB at each end
    middle = filler[: len(filler) // 2] + "另外，旧地址已经删除了。" + filler[len(filler) // 2 :]
    verdict = guard.check(middle, "zh-CN", [])
    assert verdict.replaced and verdict.matched_claims == ("旧地址已经删除了。",)


def test_the_generated_tables_have_their_shape() -> None:
    verbs = (DATA / "en_verbs.tsv").read_text(encoding="utf-8").splitlines()
    assert len(verbs) > 5000 and all(line.count("\t") == 2 for line in verbs)
    assert "cancel\tcanceled|cancelled\tcanceled|cancelled" in verbs
    zh = (DATA / "zh_verbs.txt").read_text(encoding="utf-8").splitlines()
    assert len(zh) > 5000 and {"取消", "删除", "上传"} <= set(zh)
    t2s = dict(line.split("\t") for line in (DATA / "t2s.tsv").read_text(encoding="utf-8").splitlines())
    assert t2s["經"] == "经" and t2s["幫"] == "帮" and len(t2s) > 3000
    conf = dict(line.split("\t") for line in (DATA / "confusables.tsv").read_text(encoding="utf-8").splitlines())
    assert conf["\u0435"] == "e" and conf["\u03bf"] == "o"


# the readable forms of segment.py's two hot regexes (rewritten there to open with one character class)
_SENTENCE_END_SPEC = re.compile(r"[。！？!?；…][。！？!?；;…]*[\"”’」』)]*|\n+|(?<![.\s][a-zA-Z])\.+(?=[\s\"”’)]|$)")
_PART_BREAK_SPEC = re.compile(r"(?:(?<!\d)[,:]|[,:](?!\d)|[，、：;；|])+|\s[-–—]{1,2}\s|[—–→]+|\s->\s|\(|\)|（|）")


@settings(max_examples=2000, deadline=None)
@given(text=st.text(alphabet=',:，、：;；|  \t\n—–→()（）->1a2Z.。！？!?；;…"”’」』中e', max_size=16))
def test_the_fast_segment_regexes_cut_where_their_readable_forms_do(text: str) -> None:
    assert [m.span() for m in segment._SENTENCE_END.finditer(text)] == [
        m.span() for m in _SENTENCE_END_SPEC.finditer(text)
    ]
    assert [m.span() for m in segment._PART_BREAK.finditer(text)] == [m.span() for m in _PART_BREAK_SPEC.finditer(text)]


@settings(max_examples=3000, deadline=None)
@given(
    text=st.text(
        alphabet="，。（）：；！？～＜＞Ａｚ０\u3000\u0338\u0301\u0308\u3099a>=e中カ가\uff9e\u00a0 ", max_size=12
    )
)
def test_full_width_forms_folded_first_give_what_nfkc_gives(text: str) -> None:
    """normalise folds full-width forms one by one before NFKC (speed): the text a reader sees is NFKC's."""
    folded = normalise._WIDE_FORMS.sub(normalise._wide, text)
    assert unicodedata.normalize("NFKC", folded) == unicodedata.normalize("NFKC", text)


@settings(max_examples=2000, deadline=None)
@given(
    text=st.text(
        alphabet="a中經㑮\U0002005e\U00020325\U00020001\U000e0041\U000e0100\u200b\u00ad\ufe0f\U0001f600", max_size=8
    )
)
def test_the_plane_gates_never_hide_a_format_or_traditional_character(text: str) -> None:
    """Format characters and traditional forms are searched in the BMP by one class, elsewhere behind a gate."""
    n = _DETECTOR.normaliser
    has_format = n._drop_bmp.search(text) or (normalise._ASTRAL.search(text) and n._drop_rx.search(text))
    assert bool(has_format) == bool(n._drop_rx.search(text))
    has_traditional = n._traditional_bmp.search(text) or (
        normalise._ASTRAL.search(text) and not n._traditional.isdisjoint(text)
    )
    assert bool(has_traditional) == (not n._traditional.isdisjoint(text))


_DETECTOR = ReplyGuard.load()


@settings(max_examples=500, deadline=None)
@given(text=st.text(alphabet="aé中あ가ЖжΩωשא่ि ", max_size=12))
def test_the_script_gate_never_hides_a_script(text: str) -> None:
    """language.Detector searches the scripts one by one only where one class of their first letters occurs."""
    detector = _DETECTOR.detector
    if any(rx.search(text) for _lang, rx in detector._scripts):
        assert detector._any_script is not None and detector._any_script.search(text)
