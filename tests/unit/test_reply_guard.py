"""The reply guard (DESIGN §2 I5, §9): a success claim without a succeeded receipt never reaches the user.

Pure tests: no Redis, no gRPC. The corpus tests run tests/fixtures/guard_corpus.yaml (in-sample: every
sentence must be right) and print precision and recall on it and on the held-out dev set (run with -s).
"""

from __future__ import annotations

import re
import shutil
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from countersign.guard import (
    REASONS,
    REPLACED_REASONS,
    Evidence,
    LexiconError,
    ReplyGuard,
    Verdict,
    exclusions,
    segment,
    verbs_of,
)
from countersign.guard.verdict import SCAN_LIMIT

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CORPUS = FIXTURES / "guard_corpus.yaml"
HELDOUT = FIXTURES / "guard_heldout_dev.yaml"
# every held-out file, in the order written: dev (issue 14), dev2 (before guard2's changes), dev3 (after them),
# dev4 (before guard3's changes), dev5 (guard3, after its normalise change, before its precision and CPU changes),
# dev6 (before guard4's changes), dev7 (before rounds 6 and 7), dev9 (after them; set 8 was handed to round 7 as a
# probe batch: notes/guard7-probes). dev … dev9 are spent (a `spent:` time in each: round 8 read their misses);
# the sets written blind for round 8 (guard_heldout_dev10*.yaml) are the untuned measure.
SPENT_SETS = [HELDOUT, *(FIXTURES / f"guard_heldout_dev{n}.yaml" for n in (2, 3, 4, 5, 6, 7, 9))]
HELDOUT_SETS = [*SPENT_SETS, *sorted(FIXTURES.glob("guard_heldout_dev1[0-9]*.yaml"))]
ZH_NO_RECEIPT = "该操作尚未执行：服务端没有生成可核验的确认或成功回执。"
ZH_CONTRADICTS = "回复与服务端回执不符：该操作没有按所述完成，请以回执为准。"
EN_NO_RECEIPT = "That action has not been carried out: the server has no confirmation or success receipt for it."
LOCALES = {"zh": "zh-CN", "en": "en-US", "de": "de-DE", "es": "es-ES", "ja": "ja-JP"}


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


# ------------------------------------------------------------------------------------ verdicts and receipts


def test_blocks_a_chinese_creation_claim_without_receipt(guard: ReplyGuard) -> None:
    v = guard.check("好的，已经帮你创建好了「周报」待办，截止时间是周五。", "zh-CN", [])
    assert v.replaced and v.reason == "NO_SUCCEEDED_RECEIPT" and v.text == ZH_NO_RECEIPT
    assert v.matched_claims == ("已经帮你创建好了「周报」待办",)
    assert v.claims[0].rule == "completion_aspect" and v.claims[0].verb_class == "create"
    assert "no succeeded receipt" in v.explanation and "completion_aspect" in v.explanation


def test_a_read_only_answer_passes_untouched(guard: ReplyGuard) -> None:
    reply = "你有 3 条待办：买牛奶、写周报、给房东打电话。"
    v = guard.check(reply, "zh-CN", [])
    assert not v.replaced and v.reason == "NO_CLAIM" and v.text is reply and v.matched_claims == ()


def test_a_claim_backed_by_a_succeeded_receipt_of_its_verb_passes(guard: ReplyGuard) -> None:
    reply = "已经帮你创建好了「周报」待办。"
    v = guard.check(reply, "zh-CN", [receipt("create_todo", action_id="act_42")])
    assert not v.replaced and v.text == reply and v.reason == "BACKED_BY_RECEIPT"
    assert "act_42 create_todo" in v.explanation


def test_a_claim_the_receipts_contradict_is_replaced(guard: ReplyGuard) -> None:
    v = guard.check("笔记已经删除。", "zh-CN", [receipt("create_todo", succeeded=False)])
    assert v.replaced and v.reason == "CLAIM_CONTRADICTS_RECEIPT" and v.text == ZH_CONTRADICTS
    assert "create_todo not succeeded" in v.explanation
    v = guard.check("I've created the todo.", "en", [receipt("create_todo", succeeded=False)])
    assert v.replaced and v.reason == "CLAIM_CONTRADICTS_RECEIPT"
    v = guard.check("The note has been deleted.", "en", [receipt("create_todo")])  # another verb
    assert v.replaced and v.reason == "CLAIM_CONTRADICTS_RECEIPT"


def test_every_claim_must_be_backed(guard: ReplyGuard) -> None:
    reply = "已经帮你创建好了待办，并发送了邀请邮件。"
    v = guard.check(reply, "zh-CN", [receipt("create_todo")])
    assert v.replaced and v.reason == "CLAIM_CONTRADICTS_RECEIPT" and "-> send" in v.explanation
    v = guard.check(reply, "zh-CN", [receipt("create_todo"), receipt("send_email", action_id="act_2")])
    assert not v.replaced and v.reason == "BACKED_BY_RECEIPT"


def test_a_verb_outside_the_receipt_classes_is_backed_by_any_succeeded_receipt(guard: ReplyGuard) -> None:
    v = guard.check("订单已经帮你取消了。", "zh-CN", [receipt("cancel_order")])
    assert not v.replaced and v.claims[0].verb_class == "generic"
    assert guard.check("订单已经帮你取消了。", "zh-CN", [receipt("cancel_order", succeeded=False)]).replaced


def test_the_replacement_follows_the_locale_and_every_lexicon_reads(guard: ReplyGuard) -> None:
    assert guard.check("笔记已经删除了。", "en-US", []).text == EN_NO_RECEIPT
    assert guard.check("The note has been deleted.", "zh-TW", []).text == ZH_NO_RECEIPT
    assert guard.check("笔记已经删除了。", "fr-FR", []).text == EN_NO_RECEIPT
    assert guard.lexicon_for("zh_CN") == "zh" and guard.lexicon_for(None) == "en"


def test_emoji_and_marks_do_not_hide_a_claim(guard: ReplyGuard) -> None:
    for reply in ("✅ 已成功保存", "✅已成功保存！", "🎉🎉 Done! 🎉", "Saved ✅", "✔️ 待办已添加"):
        assert guard.check(reply, "zh-CN", []).replaced, reply


def test_a_stated_failure_a_question_or_a_promise_passes(guard: ReplyGuard) -> None:
    for reply in (
        "创建失败了，请稍后再试。",
        "确认后我会帮你创建。",
        "I couldn't delete it.",
        "I'll create it once you confirm.",
        "要我帮你删除吗？",
        "Shall I add it?",
    ):
        v = guard.check(reply, "zh-CN", [])
        assert not v.replaced and v.text == reply and v.reason == "NO_CLAIM", reply


# ------------------------------------------------------------------------------ languages without a lexicon


@pytest.mark.parametrize(
    "reply",
    [
        "Ich habe die Bestellung storniert.",
        "He cancelado tu pedido ya.",
        "注文をキャンセルしました。",
        "会議を削除しました。",
        "Я удалил заметку.",
    ],
)
def test_a_reply_in_a_language_without_a_lexicon_is_flagged_not_passed_silently(guard: ReplyGuard, reply: str) -> None:
    v = guard.check(reply, "en", [])
    assert not v.replaced and v.reason == "UNSUPPORTED_LANGUAGE" and v.language and v.text == reply


def test_japanese_kanji_is_not_read_as_chinese(guard: ReplyGuard) -> None:
    v = guard.check("会議を削除しました。", "zh-CN", [])
    assert v.language == "ja" and v.matched_claims == ()


def test_unsupported_replace_mode_replaces_unless_a_receipt_succeeded() -> None:
    strict = ReplyGuard.load(unsupported="replace")
    v = strict.check("Ich habe die Bestellung storniert.", "de-DE", [])
    assert v.replaced and v.reason == "UNSUPPORTED_LANGUAGE" and "language" in v.text
    v = strict.check("Ich habe die Bestellung storniert.", "de-DE", [receipt("cancel_order")])
    assert not v.replaced and v.reason == "UNSUPPORTED_LANGUAGE"
    assert strict.check("你有 3 条待办。", "zh-CN", []).reason == "NO_CLAIM"
    with pytest.raises(ValueError, match="unsupported must be one of"):
        ReplyGuard.load(unsupported="ignore")


def test_a_claim_in_a_supported_language_decides_even_beside_an_unsupported_one(guard: ReplyGuard) -> None:
    v = guard.check("Ich habe die Notiz gelöscht. I've deleted the note.", "en", [])
    assert v.replaced and v.reason == "NO_SUCCEEDED_RECEIPT" and v.language == "de"


# ------------------------------------------------------------------------------------------- robustness


def test_never_raises_on_odd_input(guard: ReplyGuard) -> None:
    for reply in (
        "",
        "\x00",
        "\ud800已经删除",
        "。。。",
        "." * 20_000,
        "\u0130'VE DELETED IT",
        "I've ſaved it",
        "<!--",
        "~~",
        "*" * 500,
        "已" * 5000,
        "<" * 3000,
    ):
        v = guard.check(reply, "", [])
        assert isinstance(v, Verdict) and v.reason in REASONS
    v = guard.check(None, None, None)  # type: ignore[arg-type]
    assert v.reason == "NO_CLAIM" and v.text == ""


_FRAGMENTS = [
    "已经",
    "帮你",
    "创建",
    "删除",
    "好了",
    "成功",
    "保存",
    "完成",
    "操作",
    "没有",
    "吗",
    "？",
    "。",
    "，",
    "但",
    "把",
    "被",
    "I've",
    "I",
    "have",
    "has been",
    "deleted",
    "created",
    "saved",
    " successfully",
    "Done",
    "done",
    "all set",
    "not",
    "won't",
    "?",
    ".",
    ". ",
    "!",
    "\n",
    " ",
    "and",
    "but",
    "'s been",
    "marked it as done",
    "✅",
    "ſ",
    "K",
    "\u0130",
    "is now",
    "we",
    "sent",
    "set",
    "got",
    "搞定了",
    "待办已添加",
    "笔记已经删除",
    "已",
    "了",
    "\u200b",
    "~~",
    "<!--",
    "-->",
    "**",
    "`",
    "「",
    "」",
    '"',
    "Ich",
    "habe",
    "した",
    "е",
]
_TEXT = st.one_of(
    st.text(max_size=300),
    st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=3)), max_size=40).map("".join),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    reply=_TEXT, locale=st.sampled_from(["zh-CN", "en", "zh-TW", "", "de"]), evidence=st.sampled_from(sorted(EVIDENCE))
)
def test_check_never_raises_and_a_pass_returns_the_reply(
    guard: ReplyGuard, reply: str, locale: str, evidence: str
) -> None:
    v = guard.check(reply, locale, EVIDENCE[evidence])
    assert v.reason in REASONS and v.explanation
    if v.replaced:
        assert v.reason in REPLACED_REASONS
        assert v.matched_claims or v.reason == "UNSUPPORTED_LANGUAGE"
    else:
        assert v.text == reply
    seen = guard.normaliser.normalise(reply)
    for clause in v.matched_claims:
        assert clause in seen


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


# --------------------------------------------------------------------------------------------- corpora


def load_corpus(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    filler = doc.get("filler") or ""
    out = []
    for item in doc["sentences"]:
        n = int(item.get("repeat_filler") or 0)
        out.append({**item, "text": filler * n + item["text"] + filler * n})
    return out, doc


def score(guard: ReplyGuard, items: list[dict[str, Any]]) -> tuple[dict[str, Counter[str]], list[str]]:
    """Per group (a language, "obfuscated"): tp, fp, fn, tn of "detected" (replaced or flagged)."""
    groups: dict[str, Counter[str]] = {}
    wrong = []
    for item in items:
        v = guard.check(item["text"], LOCALES.get(item["lang"], "en"), [])
        got = v.replaced or (item["lang"] not in guard.lexicons and v.reason == "UNSUPPORTED_LANGUAGE")
        want = item["claim"]
        cell = "tp" if got and want else "fp" if got else "fn" if want else "tn"
        for group in (item["lang"], *(("obfuscated",) if "obf" in item["kind"] else ())):
            groups.setdefault(group, Counter())[cell] += 1
        if got != want and not item.get("known_miss"):
            wrong.append(
                f"{'MISSED' if want else 'FALSE'} [{item['lang']} {item['kind']}] {item['text'][:120]!r}"
                f" -> {v.reason} {v.matched_claims or v.excluded[:2]}"
            )
    return groups, wrong


def figures(name: str, groups: dict[str, Counter[str]]) -> dict[str, tuple[float, float]]:
    out = {}
    for group, c in sorted(groups.items()):
        p = c["tp"] / (c["tp"] + c["fp"]) if c["tp"] + c["fp"] else 1.0
        r = c["tp"] / (c["tp"] + c["fn"]) if c["tp"] + c["fn"] else 1.0
        out[group] = (p, r)
        print(f"  {name} {group:<11} n={sum(c.values()):<4} precision {p:.3f} recall {r:.3f} {dict(c)}")
    return out


def test_the_in_sample_corpus_is_read_right(guard: ReplyGuard) -> None:
    items, _doc = load_corpus(CORPUS)
    langs = Counter(i["lang"] for i in items)
    assert langs["zh"] >= 300 and langs["en"] >= 300, langs
    for lang in ("zh", "en"):
        positives = sum(1 for i in items if i["lang"] == lang and i["claim"])
        assert sum(1 for i in items if i["lang"] == lang and not i["claim"]) >= positives  # hard negatives
    groups, wrong = score(guard, items)
    known = [i["text"] for i in items if i.get("known_miss")]
    print(f"\nreply guard, in-sample ({len(items)} sentences; known misses kept in the corpus: {known}):")
    figures("in-sample", groups)
    supported = [w for w in wrong if not re.search(r"\[(de|es|ja) ", w)]
    assert not supported, "\n".join(supported)


def test_the_backing_table(guard: ReplyGuard) -> None:
    _items, doc = load_corpus(CORPUS)
    wrong = []
    for e in doc["backing"]:
        v = guard.check(e["text"], e.get("locale") or LOCALES[e["lang"]], EVIDENCE[e["evidence"]])
        if v.replaced != (e["expect"] == "replaced") or v.reason != e["reason"]:
            wrong.append(f"{e['text']!r} [{e['evidence']}]: want {e['expect']}/{e['reason']}, got {v.reason}")
    assert len(doc["backing"]) >= 25 and not wrong, "\n".join(wrong)


@pytest.mark.parametrize("path", HELDOUT_SETS, ids=lambda p: p.stem)
def test_the_held_out_dev_set_is_measured_and_never_tuned_on(guard: ReplyGuard, path: Path) -> None:
    """Prints the figures (no figure is asserted: a held-out set is measured, not passed)."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert re.match(r"^\d{4}-\d{2}-\d{2}T", str(doc["frozen"]))
    items, _doc = load_corpus(path)
    langs = Counter(i["lang"] for i in items)
    assert langs["zh"] >= 100 and langs["en"] >= 100
    assert not any(i.get("known_miss") for i in items)  # a held-out file is never annotated from its results
    spent = doc.get("spent")
    assert (path in SPENT_SETS) == bool(spent), "a spent set says since when; a fresh one is never spent"
    assert not spent or str(spent) > str(doc["frozen"])
    groups, _wrong = score(guard, items)
    state = f"spent since {spent}" if spent else "untuned"
    print(f"\nreply guard, held-out {path.stem} frozen {doc['frozen']}, {state} ({len(items)} sentences):")
    figures("held-out" if not spent else "spent", groups)


# -------------------------------------------------------------------------------------- lexicons as data


def _copy_lexicons(tmp_path: Path) -> Path:
    for f in resources.files("countersign").joinpath("guard").iterdir():
        if f.name.endswith(".yaml"):
            (tmp_path / f.name).write_text(f.read_text(encoding="utf-8"), encoding="utf-8")
    return tmp_path


def _edit(folder: Path, name: str, change: Any) -> None:
    doc = yaml.safe_load((folder / name).read_text(encoding="utf-8"))
    change(doc)
    (folder / name).write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")


def test_the_lexicon_is_data_an_extra_cue_or_verb_changes_a_verdict(guard: ReplyGuard, tmp_path: Path) -> None:
    assert guard.check("I've deleted it, allegedly.", "en", []).replaced
    assert guard.check("文档已同步到平板。", "zh-CN", []).replaced
    folder = _copy_lexicons(tmp_path)
    _edit(folder, "en.yaml", lambda d: d["exclusions"]["negation"].update(sentence=[r"\ballegedly\b"]))
    _edit(folder, "zh.yaml", lambda d: d["verbs"]["not_writes"].append("同步"))
    extended = ReplyGuard.load(folder)
    v = extended.check("I've deleted it, allegedly.", "en", [])
    assert not v.replaced and v.excluded[0][1:] == ("negation", "allegedly")
    assert not extended.check("文档已同步到平板。", "zh-CN", []).replaced


@pytest.mark.parametrize("reply", ["都OK了！", "都ok了！", "都oK了！", "都Ok啦！"])
def test_a_chinese_phrase_rule_with_latin_letters_matches_in_any_case(guard: ReplyGuard, reply: str) -> None:
    """zh.yaml's rules compile case-insensitively (OK了 is ok了): the needle that lets a rule run must be found
    in any case too, or the rule is skipped for a text that writes the letters otherwise."""
    assert guard.check(reply, "zh-CN", []).replaced, reply


@pytest.mark.parametrize("app", ["APP", "App", "app", "aPP"])
def test_a_chinese_cue_with_latin_letters_sets_aside_in_any_case(tmp_path: Path, app: str) -> None:
    """A user's zh cue that holds Latin letters ("APP 上看到" is read from data) sets aside whatever case the
    reply writes them in (the cue compiles case-insensitively; its needles were tested case-sensitively)."""
    sentence = f"{app}上看到订单已经取消了。"
    assert ReplyGuard.load().check(sentence, "zh-CN", []).replaced  # no packaged cue reads it
    folder = _copy_lexicons(tmp_path)
    cue = r"APP\s*(?:里|上)(?:看到|查到)"
    _edit(folder, "zh.yaml", lambda d: d["exclusions"]["quotation"]["sentence"].append(cue))
    v = ReplyGuard.load(folder).check(sentence, "zh-CN", [])
    assert not v.replaced and v.excluded[0][1] == "quotation", v.excluded


def test_the_generated_tables_are_found_beside_a_custom_folder_or_in_the_package(tmp_path: Path) -> None:
    folder = _copy_lexicons(tmp_path)
    assert not (folder / "en_verbs.tsv").exists()
    assert ReplyGuard.load(folder).check("I've refunded it.", "en", []).replaced


@pytest.mark.parametrize(
    ("file", "change", "message"),
    [
        ("en.yaml", lambda d: d.pop("replacement"), 'en.yaml: (top): "replacement" is a required property'),
        ("en.yaml", lambda d: d.update(claimz={}), "en.yaml: (top): Additional properties are not allowed"),
        ("en.yaml", lambda d: d.update(grammar="fr"), "en.yaml: grammar:"),
        ("en.yaml", lambda d: d.update(language="de"), "en.yaml: language: 'de' does not match the file name"),
        (
            "en.yaml",
            lambda d: d["claims"]["success_word"].append("(unclosed"),
            "en.yaml: claims.success_word[1]: bad regex '(unclosed'",
        ),
        (
            "en.yaml",
            lambda d: d["claims"]["success_word"].append("(?P<x>done)"),
            "en.yaml: claims.success_word[1]: named groups are not allowed",
        ),
        (
            "en.yaml",
            lambda d: d["exclusions"]["negation"]["before"].append(r"\bNever\b"),
            "en.yaml: exclusions.negation.before[3]: write it in lower case",
        ),
        ("en.yaml", lambda d: d["exclusions"].update(politeness={}), "en.yaml: exclusions: Additional properties"),
        (
            "zh.yaml",
            lambda d: d["verbs"].update(table="nope.txt"),
            "zh.yaml: verbs.table: 'nope.txt' is neither beside the lexicon nor in data/",
        ),
        ("zh.yaml", lambda d: d["words"].update(result_complements="好"), "zh.yaml: words.result_complements:"),
    ],
)
def test_a_broken_lexicon_stops_the_load_naming_the_file_and_the_fault(
    tmp_path: Path, file: str, change: Any, message: str
) -> None:
    folder = _copy_lexicons(tmp_path)
    _edit(folder, file, change)
    with pytest.raises(LexiconError) as err:
        ReplyGuard.load(folder)
    assert str(err.value).startswith(message), str(err.value)


def test_a_folder_with_one_lexicon_reads_with_it_alone(tmp_path: Path) -> None:
    shutil.copy(Path(str(resources.files("countersign").joinpath("guard", "zh.yaml"))), tmp_path / "zh.yaml")
    only_zh = ReplyGuard.load(tmp_path)
    assert only_zh.lexicons == ("zh",)
    assert only_zh.check("笔记已经删除。", "en", []).text == ZH_NO_RECEIPT  # no en file: the only replacement
    assert only_zh.check("The note has been deleted.", "en", []).reason == "NO_CLAIM"
    with pytest.raises(LexiconError, match="not a folder"):
        ReplyGuard.load(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(LexiconError, match="no lexicon"):
        ReplyGuard.load(tmp_path / "empty")


# ------------------------------------------------------------------------------------ CPU levers: no verdict moves


def _read_every_sentence(guard: ReplyGuard, reply: str) -> tuple[list[Any], list[Any], str]:
    """ReplyGuard.read as it was before a recurring sentence was read once (guard4): every sentence anew."""
    text = reply[:SCAN_LIMIT]
    norm = guard.normaliser.normalise(text)
    views = [norm]
    if "<" in text or "]:" in text:
        shown_raw = guard.normaliser.normalise(text, frozenset({"hidden"}))
        if shown_raw != norm:
            views.append(shown_raw)
    claims: list[Any] = []
    dropped: list[Any] = []
    unsupported = ""
    memo: dict[Any, Any] = {}
    for sentence in (s for view in views for s in segment.sentences(view)):
        reading = guard.detector.read(sentence.text)
        if reading.unsupported and not unsupported:
            unsupported = reading.unsupported
        for lex in reading.lexicons:
            grammar = guard.grammars[lex.name]
            if not grammar.may_claim(sentence.text, reading.words):
                continue
            cut = segment.cut(sentence, lex.part_breaks)
            for cand in grammar.candidates(cut, reading.words):
                why = exclusions.exclude(cand, frozenset(), memo)
                if why is None:
                    claims.append(cand)
                else:
                    dropped.append((cand, why))
    return claims, dropped, unsupported


def _shown(found: tuple[list[Any], list[Any], str]) -> tuple[list[Any], list[Any], str]:
    claims, dropped, unsupported = found
    say = lambda c: (c.clause, c.rule, c.verb, c.agent, c.start, c.end, c.flags)  # noqa: E731
    return [say(c) for c in claims], [(say(c), why) for c, why in dropped], unsupported


def test_a_recurring_sentence_reads_as_it_does_alone(guard: ReplyGuard) -> None:
    """ReplyGuard.read reads a sentence that recurs in a reply once: every corpus, eight sentences at a time and
    each of them twice (forwards, then backwards; by line breaks and by spaces), gives what reading every
    sentence anew gives: the same claims and set-aside candidates with their rules, in the same order."""
    for path in [CORPUS, *HELDOUT_SETS]:
        sentences = [str(item["text"]) for item in yaml.safe_load(path.read_text(encoding="utf-8"))["sentences"]]
        for i in range(0, len(sentences), 8):
            group = sentences[i : i + 8]
            for sep in ("\n", " "):
                reply = sep.join(group + group[::-1])
                assert _shown(guard.read(reply)) == _shown(_read_every_sentence(guard, reply)), reply
