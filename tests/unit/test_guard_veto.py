"""The reply guard's learned veto (issue 14, countersign/guard/veto.py, notes/guard-veto2.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from countersign.guard import Evidence, ReplyGuard
from countersign.guard import veto as veto_mod
from countersign.reply.evidence import logged_statements
from countersign.sidecar.settings import Settings, SettingsError
from countersign.sidecar.trust import load_guard

SAMPLE = Path(__file__).resolve().parent.parent / "fixtures" / "guard_veto_sample.json"
# sentences the rules replace (no receipt) and the packaged veto sets aside (p(claim) < t); found by
# scoring the in-sample corpus's replaced non-claims (notes/guard-veto2.md)
VETOED = {"en": "Your account was created with a work email.", "zh": "你的车在安联投了保，到五月。"}


@pytest.fixture(scope="module")
def off() -> ReplyGuard:
    return ReplyGuard.load()


@pytest.fixture(scope="module")
def on() -> ReplyGuard:
    return ReplyGuard.load(use_veto=True)


def test_scoring_is_deterministic_and_equals_the_trainers_prediction() -> None:
    models = veto_mod.load()
    sample = json.loads(SAMPLE.read_text(encoding="utf-8"))
    assert set(sample) == {"en", "zh"}
    for lang, items in sample.items():
        assert len(items) >= 50
        for item in items:
            p = models[lang].p(item["text"])
            assert p == models[lang].p(item["text"]) == veto_mod.load()[lang].p(item["text"])
            assert abs(p - item["p"]) < 1e-4, (lang, item["text"], p, item["p"])


def test_the_data_files_are_small_and_named_by_their_digest(on: ReplyGuard) -> None:
    for lang in ("en", "zh"):
        assert (veto_mod.DATA / f"veto_{lang}.bin").stat().st_size <= 600_000
        assert 0.0 < on.veto_models[lang].threshold <= 0.5
    assert on.veto_digest.startswith("en:") and ",zh:" in on.veto_digest
    assert ReplyGuard.load().veto_digest == "off"


def test_a_changed_byte_refuses_to_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "data"
    shutil.copytree(veto_mod.DATA, folder)
    raw = bytearray((folder / "veto_zh.bin").read_bytes())
    raw[len(raw) // 2] ^= 1
    (folder / "veto_zh.bin").write_bytes(bytes(raw))
    with pytest.raises(veto_mod.VetoError, match=r"veto_zh\.bin: SHA-256 .* differs from the recorded"):
        veto_mod.load(folder)
    monkeypatch.setattr(veto_mod, "DATA", folder)
    settings = Settings(registry="unused.yaml", guard_veto="on")
    with pytest.raises(SettingsError, match=r"--guard-veto on: veto_zh\.bin: SHA-256"):
        load_guard(settings)
    load_guard(Settings(registry="unused.yaml", guard_veto="off"))  # off: the data file is not read


def test_guard_veto_takes_on_or_off_only() -> None:
    assert Settings(registry="r.yaml").validate().guard_veto == "on"  # it lifted dev10 precision (notes/guard-veto2.md)
    assert load_guard(Settings(registry="r.yaml")).use_veto
    with pytest.raises(SettingsError, match="--guard-veto must be on or off"):
        Settings(registry="r.yaml", guard_veto="yes").validate()


@pytest.mark.parametrize(("lang", "text"), sorted(VETOED.items()))
def test_a_vetoed_sentence_passes_and_is_explained(off: ReplyGuard, on: ReplyGuard, lang: str, text: str) -> None:
    locale = {"en": "en-US", "zh": "zh-CN"}[lang]
    before = off.check(text, locale, [])
    assert before.replaced and before.reason == "NO_SUCCEEDED_RECEIPT"  # the rules alone: today's verdict
    v = on.check(text, locale, [])
    assert not v.replaced and v.text == text and v.reason == "NO_CLAIM"
    assert v.claims == () and v.vetoed
    claim, p, t = v.vetoed[0]
    assert p < t == on.veto_models[lang].threshold
    assert "veto" in v.explanation and f"p={p:.3f} < t={t:.2f}" in v.explanation
    assert (claim.clause, "veto", f"p={p:.3f} < t={t:.2f}") in v.excluded

    class Keys:
        def digest(self, purpose: str, data: bytes) -> str:
            return f"{purpose}:{len(data)}"

    logged = logged_statements(Keys(), v)  # type: ignore[arg-type]
    assert logged and logged[0]["rule"] == "veto" and logged[0]["read_by"] == claim.rule
    assert logged[0]["p"] == f"{p:.3f}" and logged[0]["t"] == f"{t:.2f}"
    assert text not in json.dumps(logged)


@pytest.mark.parametrize(("lang", "text"), sorted(VETOED.items()))
def test_a_receipt_contradiction_is_never_vetoed(on: ReplyGuard, lang: str, text: str) -> None:
    locale = {"en": "en-US", "zh": "zh-CN"}[lang]
    failed = Evidence("a" * 32, "todos.search", False, frozenset({"send"}))
    v = on.check(text, locale, [failed])
    assert v.replaced and v.reason == "CLAIM_CONTRADICTS_RECEIPT" and not v.vetoed


def test_veto_off_gives_the_rules_verdicts_on_the_in_sample_corpus(off: ReplyGuard) -> None:
    import yaml

    corpus = Path(__file__).resolve().parent.parent / "fixtures" / "guard_corpus.yaml"
    items = yaml.safe_load(corpus.read_text(encoding="utf-8"))["sentences"][:400]
    plain = ReplyGuard.load(use_veto=False)
    for item in items:
        a, b = off.check(item["text"], "en-US", []), plain.check(item["text"], "en-US", [])
        assert (a.replaced, a.reason, a.vetoed) == (b.replaced, b.reason, ())


# Claims a sentence-level score let through (found attacking the veto, 2026-12-02): a claim followed in the same
# sentence by an offer or a question, and a claim with words piled after it. Their claiming clause alone reads as a
# claim, and the veto needs the clause and the sentence both to read as none.
SLIPPED = [
    ("zh", "已帮你取消订单，如需要我还可以帮你退款吗？"),
    ("zh", "我已经把订单取消了，你可以在完成率那一栏查看。"),
    ("en", "I cancelled your order, you asked me to, per the record, last week's note, tracking page, column, rate."),
    ("zh", "已为您取消订单，还需要我帮您办理退款吗？"),
    ("zh", "会议已改到周三下午三点，需要我通知其他参会人吗？"),
    ("en", "I deleted the file, do you want me to empty the trash as well?"),
]


@pytest.mark.parametrize(("lang", "text"), SLIPPED)
def test_a_claim_whose_clause_reads_as_one_is_not_vetoed_by_the_rest_of_its_sentence(
    on: ReplyGuard, lang: str, text: str
) -> None:
    v = on.check(text, {"en": "en-US", "zh": "zh-CN"}[lang], [])
    assert v.replaced and v.reason == "NO_SUCCEEDED_RECEIPT" and not v.vetoed


# "already" made the veto read the assistant's own act as a fact read from data: each of these passed with the veto
# on (the default) and no receipt (I5), p 0.001-0.025 under t 0.03, where the same sentence without "already" was
# replaced. The veto sets aside reads; a claim whose clause has the assistant as its subject (I, we, 我, 我们) is the
# assistant saying it acted, and only a receipt backs it
FIRST_PERSON = [
    "We have already cancelled the order.",
    "We have already sent the invoice.",
    "I have already moved the meeting.",
    "We have already refunded you.",
    "We have already deleted the file.",
    "We have already transferred the deposit.",
    "I have already transferred the money.",
]


@pytest.mark.parametrize("text", FIRST_PERSON)
def test_the_veto_never_sets_aside_the_assistants_own_act(off: ReplyGuard, on: ReplyGuard, text: str) -> None:
    assert off.check(text, "en-US", []).replaced
    v = on.check(text, "en-US", [])
    assert v.replaced and v.reason == "NO_SUCCEEDED_RECEIPT" and not v.vetoed, (text, v.vetoed)


def test_the_veto_still_sets_aside_a_read_that_says_already(on: ReplyGuard) -> None:
    """A fact about the user's or a third party's act, 'already' or not, is what the veto is for."""
    v = on.check("The deposit has already been transferred.", "en-US", [])
    assert not v.replaced and v.vetoed
