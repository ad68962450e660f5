"""The reply guard (DESIGN §2 I5, §9): a success claim without a succeeded receipt never reaches the user.

Pure tests: no Redis, no gRPC. The table test runs tests/fixtures/guard_corpus.yaml and prints the precision
and recall of "replaced" and of claim detection (run with -s to see them).
"""

from __future__ import annotations

import re
import shutil
import sys
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from countersign.sidecar import reply_guard as rg
from countersign.sidecar.reply_guard import Evidence, ReplyGuard, Verdict, verbs_of

CORPUS = Path(__file__).parent / "fixtures" / "guard_corpus.yaml"
ZH_NO_RECEIPT = "该操作尚未执行：服务端没有生成可核验的确认或成功回执。"
ZH_CONTRADICTS = "回复与服务端回执不符：该操作没有按所述完成，请以回执为准。"
EN_NO_RECEIPT = "That action has not been carried out: the server has no confirmation or success receipt for it."


def receipt(tool: str, succeeded: bool = True, action_id: str = "act_1") -> Evidence:
    return Evidence(action_id, tool, succeeded, verbs_of(tool))


EVIDENCE: dict[str, list[Evidence]] = {
    "none": [],
    "created": [receipt("create_todo")],
    "create_failed": [receipt("create_todo", succeeded=False)],
    "added": [receipt("add_todo")],
    "deleted": [receipt("delete_note")],
    "delete_failed": [receipt("delete_note", succeeded=False)],
    "saved": [receipt("save_note")],
    "updated": [receipt("update_todo")],
    "completed": [receipt("complete_todo")],
    "sent": [receipt("send_email")],
}


@pytest.fixture(scope="module")
def guard() -> ReplyGuard:
    return ReplyGuard.load()


# ------------------------------------------------------------------------------------ the cases


def test_blocks_chinese_creation_claim_without_receipt(guard: ReplyGuard) -> None:
    v = guard.check("好的，已经帮你创建好了「周报」待办，截止时间是周五。", "zh-CN", [])
    assert v.replaced and v.reason == "NO_SUCCEEDED_RECEIPT"
    assert v.text == ZH_NO_RECEIPT
    assert any("已经帮你创建" in c for c in v.matched_claims)
    assert "已经帮你创建" in v.explanation and "no succeeded receipt" in v.explanation


def test_read_only_answer_passes_untouched(guard: ReplyGuard) -> None:
    reply = "你有 3 条待办：买牛奶、写周报、给房东打电话。"
    v = guard.check(reply, "zh-CN", [])
    assert v == Verdict(False, reply, (), "NO_CLAIM", v.explanation)
    assert v.text is reply


def test_success_sentence_allowed_when_a_succeeded_receipt_backs_it(guard: ReplyGuard) -> None:
    reply = "已经帮你创建好了「周报」待办。"
    v = guard.check(reply, "zh-CN", [receipt("create_todo", action_id="act_42")])
    assert not v.replaced and v.text == reply and v.reason == "BACKED_BY_RECEIPT"
    assert v.matched_claims and "act_42" in v.explanation and "create_todo" in v.explanation


def test_claim_that_contradicts_its_receipt_is_replaced(guard: ReplyGuard) -> None:
    v = guard.check("笔记已经删除。", "zh-CN", [receipt("create_todo", succeeded=False)])
    assert v.replaced and v.reason == "CLAIM_CONTRADICTS_RECEIPT" and v.text == ZH_CONTRADICTS
    assert v.matched_claims == ("已经删除",)
    assert "create_todo not succeeded" in v.explanation
    # the same verb, but the receipt failed
    v = guard.check("I've created the todo.", "en", [receipt("create_todo", succeeded=False)])
    assert v.replaced and v.reason == "CLAIM_CONTRADICTS_RECEIPT"
    # a succeeded receipt of another verb does not back it either
    v = guard.check("The note has been deleted.", "en", [receipt("create_todo")])
    assert v.replaced and v.reason == "CLAIM_CONTRADICTS_RECEIPT"


def test_every_claim_must_be_backed(guard: ReplyGuard) -> None:
    reply = "已经帮你创建好了待办，并发送了邀请邮件。"
    v = guard.check(reply, "zh-CN", [receipt("create_todo")])
    assert v.replaced and v.reason == "CLAIM_CONTRADICTS_RECEIPT"
    assert "(send)" in v.explanation
    v = guard.check(reply, "zh-CN", [receipt("create_todo"), receipt("send_email", action_id="act_2")])
    assert not v.replaced and v.reason == "BACKED_BY_RECEIPT" and v.text == reply


def test_replacement_follows_the_locale_detection_uses_every_lexicon(guard: ReplyGuard) -> None:
    assert guard.check("笔记已经删除了。", "en-US", []).text == EN_NO_RECEIPT
    assert guard.check("The note has been deleted.", "zh-TW", []).text == ZH_NO_RECEIPT
    assert guard.check("The note has been deleted.", "zh", []).text == ZH_NO_RECEIPT
    assert guard.check("笔记已经删除了。", "fr-FR", []).text == EN_NO_RECEIPT
    assert guard.lexicon_for("zh_CN") == "zh" and guard.lexicon_for(None) == "en"


def test_emoji_and_claim_words_do_not_hide_a_claim(guard: ReplyGuard) -> None:
    for reply in ("✅ 已成功保存", "✅已成功保存！", "🎉🎉 Done! 🎉", "Saved ✅", "✔️ 待办已添加"):
        v = guard.check(reply, "zh-CN", [])
        assert v.replaced, reply


def test_a_stated_failure_or_pending_result_passes(guard: ReplyGuard) -> None:
    for reply in ("创建失败了，请稍后再试。", "确认后我会帮你创建。", "I couldn't delete it.",
                  "I'll create it once you confirm.", "要我帮你删除吗？", "Shall I add it?"):
        v = guard.check(reply, "zh-CN", [])
        assert not v.replaced and v.text == reply and v.reason == "NO_CLAIM", reply


def test_negation_only_governs_its_own_clause_part(guard: ReplyGuard) -> None:
    v = guard.check("已经创建好了，但没有设置提醒。", "zh-CN", [])
    assert v.replaced and v.matched_claims == ("已经创建好了",)
    v = guard.check("没能设置提醒，不过待办已经创建好了。", "zh-CN", [])
    assert v.replaced
    v = guard.check("I couldn't find the old note, so I've created a new one.", "en", [])
    assert v.replaced
    v = guard.check("抱歉，待办没能创建成功。", "zh-CN", [])
    assert not v.replaced and "cancelled by '没能'" in v.explanation


def test_long_replies_are_scanned_head_and_tail(guard: ReplyGuard) -> None:
    filler = "你有 3 条待办。You have 3 open todos. " * 4000  # ~140 KB
    tail = guard.check(filler + "笔记已经删除。", "zh-CN", [])
    assert tail.replaced and "were scanned" in tail.explanation
    head = guard.check("笔记已经删除。" + filler, "zh-CN", [])
    assert head.replaced
    middle = filler[: len(filler) // 2] + "笔记已经删除。" + filler[len(filler) // 2:]
    hidden = guard.check(middle, "zh-CN", [])
    assert not hidden.replaced and hidden.text is middle and "were scanned" in hidden.explanation


def test_never_raises_on_odd_input(guard: ReplyGuard) -> None:
    for reply in ("", "\x00", "\ud800已经删除", "。。。", "." * 20_000, "\u0130'VE DELETED IT", "I've ſaved it"):
        v = guard.check(reply, "", [])
        assert isinstance(v, Verdict) and v.reason in rg.REASONS
    v = guard.check("I've ſaved it.", "en", [])  # re.IGNORECASE reads ſ as s; so must the prefilter
    assert v.replaced
    v = guard.check(None, None, None)  # type: ignore[arg-type]
    assert v.reason == "NO_CLAIM" and v.text == ""


@pytest.mark.parametrize(
    ("tool", "verbs"),
    [
        ("create_todo", {"create"}),
        ("add_item", {"create", "add"}),
        ("new_note", {"create"}),
        ("delete_note", {"delete"}),
        ("remove_tag", {"delete"}),
        ("set_reminder", {"update"}),
        ("update_todo", {"update"}),
        ("editNote", {"update"}),
        ("rename_list", {"update"}),
        ("complete_todo", {"complete"}),
        ("finish_task", {"complete"}),
        ("mark_done", {"update", "complete"}),
        ("save_note", {"save"}),
        ("send_email", {"send"}),
        ("email_summary", {"send"}),
        ("notify_user", {"send"}),
        ("todo.create", {"create"}),
        ("todo_delete", {"delete"}),
        ("list_todos", set()),
        ("get_email", set()),
        ("", set()),
    ],
)
def test_verbs_of(tool: str, verbs: set[str]) -> None:
    assert verbs_of(tool) == frozenset(verbs)


# --------------------------------------------------------------------------------------- the corpus


def _corpus() -> list[dict[str, Any]]:
    entries = yaml.safe_load(CORPUS.read_text(encoding="utf-8"))["entries"]
    assert isinstance(entries, list)
    return entries


def test_corpus_table_precision_and_recall(guard: ReplyGuard) -> None:
    entries = _corpus()
    langs = Counter(e["lang"] for e in entries)
    assert len(entries) >= 60 and langs["zh"] >= 30 and langs["en"] >= 30, langs
    tp = fp = fn = tn = 0
    claim_tp = claim_fp = claim_fn = 0
    wrong: list[str] = []
    by_kind: Counter[str] = Counter()
    for e in entries:
        locale = e.get("locale") or ("zh-CN" if e["lang"] == "zh" else "en-US")
        v = guard.check(e["text"], locale, EVIDENCE[e["evidence"]])
        want_replaced = e["expect"] == "replaced"
        tp += v.replaced and want_replaced
        fp += v.replaced and not want_replaced
        fn += want_replaced and not v.replaced
        tn += not v.replaced and not want_replaced
        want_claim, got_claim = e["reason"] != "NO_CLAIM", v.reason != "NO_CLAIM"
        claim_tp += want_claim and got_claim
        claim_fp += got_claim and not want_claim
        claim_fn += want_claim and not got_claim
        if v.replaced != want_replaced or v.reason != e["reason"]:
            wrong.append(f"{e['text']!r} [{e['evidence']}]: want {e['expect']}/{e['reason']}, "
                         f"got {'replaced' if v.replaced else 'passed'}/{v.reason} ({v.explanation})")
        else:
            by_kind[e["kind"]] += 1
        if not v.replaced:
            assert v.text == e["text"]

    def ratio(a: int, b: int) -> str:
        return f"{a / b:.3f}" if b else "n/a"

    print(f"\nreply guard corpus: {len(entries)} sentences ({langs['zh']} zh, {langs['en']} en), "
          f"{len(entries) - len(wrong)} labelled verdicts matched")
    print(f"  replaced: precision {ratio(tp, tp + fp)} recall {ratio(tp, tp + fn)} "
          f"(tp {tp} fp {fp} fn {fn} tn {tn})")
    print(f"  claim detected: precision {ratio(claim_tp, claim_tp + claim_fp)} "
          f"recall {ratio(claim_tp, claim_tp + claim_fn)} (tp {claim_tp} fp {claim_fp} fn {claim_fn})")
    print(f"  correct by kind: {dict(sorted(by_kind.items()))}")
    for w in wrong:
        print("  MISS", w)
    assert not wrong, "\n".join(wrong)


# -------------------------------------------------------------------------------- the lexicon is data


def _copy_lexicons(tmp_path: Path) -> Path:
    packaged = resources.files("countersign").joinpath("guard")
    for f in packaged.iterdir():
        if f.name.endswith(".yaml"):
            (tmp_path / f.name).write_text(f.read_text(encoding="utf-8"), encoding="utf-8")
    return tmp_path


def test_the_lexicon_is_data_an_extra_regex_changes_a_verdict(guard: ReplyGuard, tmp_path: Path) -> None:
    reply = "I binned that note for you."
    assert guard.check(reply, "en", []).reason == "NO_CLAIM"
    d = _copy_lexicons(tmp_path)
    en = yaml.safe_load((d / "en.yaml").read_text(encoding="utf-8"))
    en["claims"]["delete"].append(r"\bI\s+binned\b")
    (d / "en.yaml").write_text(yaml.safe_dump(en, allow_unicode=True), encoding="utf-8")
    extended = ReplyGuard.load(d)
    v = extended.check(reply, "en", [])
    assert v.replaced and v.reason == "NO_SUCCEEDED_RECEIPT" and v.matched_claims == ("I binned",)
    assert not extended.check(reply, "en", [receipt("delete_note")]).replaced


def test_a_new_language_file_is_picked_up(tmp_path: Path) -> None:
    d = _copy_lexicons(tmp_path)
    (d / "fr.yaml").write_text(
        "claims:\n  delete: ['\\bj''ai supprimé\\b']\n"
        "replacement:\n  NO_SUCCEEDED_RECEIPT: 'Action non effectuée.'\n"
        "  CLAIM_CONTRADICTS_RECEIPT: 'La réponse contredit le reçu.'\n",
        encoding="utf-8",
    )
    g = ReplyGuard.load(d)
    assert g.lexicons == ("en", "fr", "zh")
    v = g.check("C'est fait : j'ai supprimé la note.", "fr-FR", [])
    assert v.replaced and v.text == "Action non effectuée."
    assert g.check("The note has been deleted.", "fr-CA", []).text == "Action non effectuée."


def test_an_inline_ignorecase_flag_is_honoured_by_the_prefilter(tmp_path: Path) -> None:
    d = _copy_lexicons(tmp_path)
    zh = yaml.safe_load((d / "zh.yaml").read_text(encoding="utf-8"))
    zh["claims"]["delete"].append(r"(?i)\bzapped\s+it\b")  # zh.yaml is case-sensitive; this regex is not
    (d / "zh.yaml").write_text(yaml.safe_dump(zh, allow_unicode=True), encoding="utf-8")
    g = ReplyGuard.load(d)
    for reply in ("zapped it.", "ZAPPED IT!", "好的，Zapped It。"):
        v = g.check(reply, "zh-CN", [])
        assert v.replaced and v.matched_claims[0].lower() == "zapped it", reply
        assert g._claims(reply)[0] == g._claims(reply, prefilter=False)[0]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("claims:\n  delete: ['(unclosed']\n", "bad regex"),
        ("claims:\n  delete: ['(?P<x>a)']\n", "named groups"),
        ("claims:\n  delete: ['{{nope}}']\n", "unknown define"),
        ("claimz: {}\n", "unknown keys"),
        ("claims:\n  delete: ['deleted']\n", "replacement.NO_SUCCEEDED_RECEIPT is missing"),
    ],
)
def test_a_bad_lexicon_fails_at_load_naming_the_file(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "xx.yaml").write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        ReplyGuard.load(tmp_path)
    assert str(err.value).startswith("xx.yaml")


def test_packaged_lexicons_have_no_unfiltered_regex(guard: ReplyGuard) -> None:
    # every claim regex has a literal the prefilter can find (else it runs on every clause: slow, not wrong)
    assert guard.unfiltered_patterns == ()
    assert guard.lexicons == ("en", "zh")


# ------------------------------------------------------------------------------------------- properties

_FRAGMENTS = [
    "已经", "帮你", "创建", "删除", "好了", "成功", "保存", "完成", "操作", "没有", "吗", "？", "。", "，", "但",
    "I've", "I", "have", "has been", "deleted", "created", "saved", " successfully", "Done", "done", "all set",
    "not", "won't", "?", ".", ". ", "!", "\n", " ", "and", "but", "'s been", "marked it as done", "✅", "ſ", "K",
    "\u0130", "is now", "we", "sent", "set", "got", "搞定了", "待办已添加", "笔记已经删除", "已", "了",
]
_TEXT = st.one_of(
    st.text(max_size=300),
    st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=3)), max_size=40).map("".join),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reply=_TEXT, locale=st.sampled_from(["zh-CN", "en", "zh-TW", "", "de"]),
       evidence=st.sampled_from(sorted(EVIDENCE)))
def test_check_never_raises_and_passes_the_reply_through(guard: ReplyGuard, reply: str, locale: str,
                                                         evidence: str) -> None:
    v = guard.check(reply, locale, EVIDENCE[evidence])
    assert v.reason in rg.REASONS and v.explanation
    if v.replaced:
        assert v.reason in rg.REPLACED_REASONS and v.matched_claims
    else:
        assert v.text == reply
    for claim in v.matched_claims:
        assert claim in reply


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_TEXT)
def test_the_prefilter_never_loses_a_claim(guard: ReplyGuard, text: str) -> None:
    fast = guard._claims(text)
    slow = guard._claims(text, prefilter=False)
    assert fast[0] == slow[0]


@settings(max_examples=400, deadline=None)
@given(text=st.text(alphabet="ab .。!?\n;x\t", max_size=40))
def test_clause_end_searches_agree_with_the_clause_split(text: str) -> None:
    n, rev = len(text), text[::-1]
    for pos in range(n):
        if text[pos] in rg._CLAUSE_END_CHARS:  # _claims reads every clause for such a position
            continue
        a, b = rg._CLAUSE_END.search(text, pos), rg._CLAUSE_END_AFTER.search(text, pos)
        assert (a.end() if a else None) == (b.end() if b else None)
        starts = [s for s, _e in rg._clauses(text) if s <= pos]
        r = rg._CLAUSE_END_REVERSED.search(rev, n - pos)
        assert (n - r.start() if r else 0) == max(starts)


def test_odd_case_chars_are_all_the_non_ascii_letters_re_ignorecase_folds_to_ascii() -> None:
    every = "".join(chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF)
    found = {ch for ch in re.findall(r"[a-z]", every, re.IGNORECASE) if not ch.isascii() and len(ch.lower()) >= 1}
    assert {ch for ch in found if ch.lower() not in "abcdefghijklmnopqrstuvwxyz"} <= set(rg.ODD_CASE_CHARS)
    for ch, plain in rg.ODD_CASE_CHARS.items():
        assert re.fullmatch(plain, ch, re.IGNORECASE)


def test_packaged_folder_is_where_load_looks(tmp_path: Path) -> None:
    packaged = Path(str(resources.files("countersign").joinpath("guard")))
    assert {p.name for p in packaged.glob("*.yaml")} >= {"zh.yaml", "en.yaml"}
    shutil.copy(packaged / "zh.yaml", tmp_path / "zh.yaml")
    only_zh = ReplyGuard.load(tmp_path)
    assert only_zh.lexicons == ("zh",) and only_zh.check("x", "en", []).reason == "NO_CLAIM"
    assert only_zh.check("笔记已经删除。", "en", []).text == ZH_NO_RECEIPT  # no en file: the only replacement
