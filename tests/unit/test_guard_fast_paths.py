"""The guard's fast paths (notes/guard-cpu2.md): each finds exactly what the slower form it stands in for finds,
on generated text (hypothesis) and on every sentence of every guard corpus as the guard reads it. They change
no verdict (scripts/guard_verdicts.py hashes ~9,100 verdicts); these tests pin each equivalence on its own.

Pure tests: no Redis, no gRPC.
"""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from countersign.guard import ReplyGuard, labels, segment
from countersign.guard import exclusions as ex
from countersign.guard import lexicon as lexicon_module
from countersign.guard import normalise as nm
from countersign.guard.claims import ASSISTANT, OTHER, Candidate
from countersign.guard.exclusions import Exclusion
from countersign.guard.lexicon import EXCLUSION_RULES, Cue, Lexicon
from countersign.guard.needles import NeedleIndex, needs, satisfied
from countersign.guard.normalise import Normaliser
from countersign.guard.schema import GATED_RULES

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(scope="module")
def guard() -> ReplyGuard:
    return ReplyGuard.load()


def _corpus_texts() -> Iterator[str]:
    for path in sorted(FIXTURES.glob("guard_*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for item in doc["sentences"]:
            yield str(item["text"])


def _spans(rx: re.Pattern[str], text: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), m.group(0)) for m in rx.finditer(text)]


# -- segment: part breaks without the spaced-dash branch ------------------------------------------------------

_BREAK_ALPHABET = " \t\n\u3000,:，、：;；|→>()（）0123456789ab已了 '\"“”"  # every break but the dashes


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(alphabet=_BREAK_ALPHABET, max_size=40))
def test_undashed_part_breaks_are_the_part_breaks_of_a_text_without_a_dash(text: str) -> None:
    """In a text with no "-", "–" or "—", _PART_BREAK_UNDASHED finds the matches of _PART_BREAK: commas between
    digits and not, runs of separators, arrows, brackets, spaces around them."""
    assert _spans(segment._PART_BREAK_UNDASHED, text) == _spans(segment._PART_BREAK, text)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(alphabet=_BREAK_ALPHABET + "-–—", max_size=40))
def test_parts_cut_as_by_the_full_part_break_regex(guard: ReplyGuard, text: str) -> None:
    """segment.parts (which takes the undashed regex only when no dash is in the sentence) cuts as a cut by
    _PART_BREAK alone does, for every lexicon's breaks."""
    for lex in guard.lexicons_by_name.values():
        assert segment.parts(text, lex.part_breaks) == _parts_by_full_regex(text, lex.part_breaks), text


def test_parts_of_every_corpus_sentence_cut_as_by_the_full_regex(guard: ReplyGuard) -> None:
    for text in _corpus_texts():
        for sentence in segment.sentences(guard.normaliser.normalise(text)):
            for lex in guard.lexicons_by_name.values():
                got = segment.parts(sentence.text, lex.part_breaks, sentence.quotes)
                assert got == _parts_by_full_regex(sentence.text, lex.part_breaks, sentence.quotes), sentence.text


def _parts_by_full_regex(
    sentence: str, breaks: re.Pattern[str] | None, quotes: tuple[tuple[int, int], ...] | None = None
) -> list[segment.Part]:
    """segment.parts as it was (guard-cpu at 79c094c): _PART_BREAK on every sentence."""
    cuts = [(m.start(), m.end(), m.group(0).strip()[:1]) for m in segment._PART_BREAK.finditer(sentence)]
    if breaks is not None:
        words = segment._break_words(sentence, breaks)
        if words:
            cuts = sorted(cuts + words)
    if quotes is None:
        quotes = segment._quotes(sentence)
    if quotes:
        cuts = [c for c in cuts if not any(qs < c[0] < qe for qs, qe in quotes)]
    out: list[segment.Part] = []
    start = 0
    for cs, ce, mark in cuts:
        if cs > start and sentence[start:cs].strip():
            out.append(segment.Part(sentence[start:cs], start, cs, mark))
        start = max(start, ce)
    if sentence[start:].strip():
        out.append(segment.Part(sentence[start:], start, len(sentence), ""))
    return out


# -- normalise: one scan for the four steps that act on rare characters; a line's end by its last character ---


class _Before(Normaliser):
    """normalise.Normaliser as it was (main at 53d8f9d, guard5's shown tags included): the four steps gated one by
    one (six scans), and _LINE_END_STOP searched in each line."""

    def normalise(self, text: str, skip: frozenset[str] = frozenset()) -> str:
        if "<" in text and "comments" not in skip:
            text = nm._COMMENT.sub("", text)
        if ("~" in text or "<" in text) and "struck" not in skip:
            text = nm._STRUCK.sub("", text)
        if ("<" in text or "]:" in text) and "hidden" not in skip:
            text = nm._hidden(text)
        if "<" in text and "tags" not in skip:
            text = nm._BLOCK_TAG.sub("\n", text)
            text = nm._TAG.sub("", text)
        if "&" in text and "entities" not in skip and nm._ENTITY.search(text):
            text = html.unescape(text)
            if "<" in text and "shown_tags" not in skip:
                text = nm._TAG.sub("", text)
        if not text.isascii():
            if "nfkc" not in skip:
                if nm._WIDE_FORMS.search(text):
                    text = nm._WIDE_FORMS.sub(nm._wide, text)
                if not unicodedata.is_normalized("NFKC", text):
                    text = unicodedata.normalize("NFKC", text)
            if "format" not in skip and (
                self._drop_bmp.search(text) or (nm._ASTRAL.search(text) and self._drop_rx.search(text))
            ):
                text = self._drop_rx.sub("", text)
            if "marks" not in skip and nm._MARKS.search(text):
                text = nm._OVERLAY.sub("", text)
                text = nm._MARKS.sub("", text)
        if "markdown" not in skip:
            text = nm._markdown(text)
        if not text.isascii():
            if "confusables" not in skip and self._foldable.search(text):
                text = self._latinish.sub(self._fold_word, text)
            if "traditional" not in skip and (
                self._traditional_bmp.search(text)
                or (nm._ASTRAL.search(text) and not self._traditional.isdisjoint(text))
            ):
                text = text.translate(self._t2s)
        if ("\n" in text or "\r" in text) and "lines" not in skip:
            text = self._join_lines(text)
        if " " in text and "spacing" not in skip:
            text = _spaced_before(text)
        return text

    def _join_lines(self, text: str) -> str:
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        out = [lines[0]]
        for line in lines[1:]:
            prev = out[-1]
            if not prev.strip() and len(out) > 1 and nm._goes_on_across_a_blank_line(out[-2], line):
                out.pop()  # (guard6en: a sentence cut by an empty line reads on; the same in both)
                prev = out[-1]
            if not prev.strip() or not line.strip() or nm._LINE_END_STOP.search(prev) or nm._NEW_LINE_UNIT.match(line):
                out.append(line)
                continue
            a, b = prev.rstrip(), line.lstrip()
            if nm._CJK.match(a[-1]) and nm._CJK.match(b[0]):
                out[-1] = a + b
                continue
            head = re.search(r"([A-Za-z]+)(-?)$", a)
            tail = re.match(r"[A-Za-z]+", b)
            if head and tail and (head.group(2) or b[0].islower()):
                glued = head.group(1) + tail.group(0)
                if head.group(2) or (self._known_word(glued.lower()) and not self._known_word(tail.group(0).lower())):
                    out[-1] = a[: head.start()] + glued + b[tail.end() :]
                    continue
            if b[0].islower() or not a[-1].isalnum() or (a[-1].islower() and not b[0].isupper()):
                out[-1] = a + " " + b
                continue
            out.append(line)
        return "\n".join(out)


def _spaced_before(text: str) -> str:
    """normalise._spaced as it was: the apostrophe gate searched space first."""
    if "'" in text and nm._SPACE_APOSTROPHE.search(text):
        text = nm._SPACED_APOSTROPHE.sub("'", text)
    if nm._SPACED_HINT.search(text):
        text = nm._SPACED_LATIN.sub(lambda m: m.group(0).replace(" ", ""), text)
    return nm._SPACED_CJK.sub("", text) if not text.isascii() else text


@pytest.fixture(scope="module")
def normalisers(guard: ReplyGuard) -> tuple[Normaliser, Normaliser]:
    known = guard.normaliser._known_word
    return Normaliser(known), _Before(known)


# pieces of what each step acts on: format characters, marks, look-alikes, traditional forms, full-width and
# astral letters, markup, line ends with white space, words cut at a line end
_NORMALISE_PIECES = [
    "\u200b", "\u2060", "\u00ad", "\ufe0f", "\U000e0041", "\u202e", "\u0301", "\u0336", "é", "е", "ᴅᴇʟᴇᴛᴇᴅ",
    "刪除", "訂單", "已經", "ｄｅｌｅｔｅｄ", "\U0001d41d", "~~not~~", "<!-- x -->", "&#21024;", "&lt;b&gt;", "**", "`",
    "I’ve", "。", "：", "\u3000", "\n", "\r\n", " \n", "\t\n", ".\u2003\n", "—\n", "del-\neted", "can\ncelled",
    "- ", "1. ", "deleted", "已删除", "a", " ", "I 've", "it \u2003's", "we 're", "'ll", "\t'd", " 't", "'s", "'m",
]  # fmt: skip


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=st.lists(st.one_of(st.sampled_from(_NORMALISE_PIECES), st.text(max_size=3)), max_size=16),
    skip=st.sets(st.sampled_from(nm.STEPS), max_size=2),
)
def test_normalise_is_what_it_was(
    normalisers: tuple[Normaliser, Normaliser], pieces: list[str], skip: set[str]
) -> None:
    """Normaliser.normalise with its one-scan gate and its set test at line ends gives what the gated steps one
    by one and _LINE_END_STOP gave, for any steps switched off."""
    now, before = normalisers
    text = "".join(pieces)
    assert now.normalise(text, frozenset(skip)) == before.normalise(text, frozenset(skip)), text


def test_normalise_of_every_corpus_sentence_is_what_it_was(normalisers: tuple[Normaliser, Normaliser]) -> None:
    now, before = normalisers
    texts = list(_corpus_texts())
    for text in (*texts, *("\n".join(texts[i : i + 10]) for i in range(0, len(texts), 10))):
        assert now.normalise(text) == before.normalise(text), text


@settings(max_examples=500, deadline=None)
@given(line=st.text(alphabet=' \t\u2003\u3000\x1c\x85。！？!?.;；:：…)）」』"”a1-', max_size=8))
def test_a_line_ends_a_sentence_where_line_end_stop_finds_it(line: str) -> None:
    assert (line.rstrip()[-1:] in nm._LINE_END_CHARS) == (nm._LINE_END_STOP.search(line) is not None), repr(line)


@settings(max_examples=500, deadline=None)
@given(text=st.text(alphabet=" \t\n\u2003\u3000'vesrmldtx_1.", max_size=12))
def test_the_apostrophe_gate_written_apostrophe_first_is_the_space_first_one(text: str) -> None:
    assert (nm._APOSTROPHE_AFTER_SPACE.search(text) is None) == (nm._SPACE_APOSTROPHE.search(text) is None), text


# -- exclusions: the rules the grammar's findings decide, one test after the other ---------------------------


def _decided_before(c: Candidate, disabled: frozenset[str]) -> Exclusion | None:
    """exclusions._decided as it was (guard-cpu at 79c094c): a loop over EXCLUSION_RULES."""
    for rule in EXCLUSION_RULES:
        if rule in disabled:
            continue
        if rule == "quotation" and c.sentence.quotes and c.sentence.quoted(c.vstart, c.vend):
            return Exclusion(rule, "inside quotes")
        if rule == "quotation" and c.lexicon.grammar == "en" and c.agent != ASSISTANT and (why := ex._reported(c)):
            return Exclusion(rule, why)  # (guard8en: what a source reports, a quoted message's delivery)
        if rule == "other_agent" and c.agent == OTHER:
            return Exclusion(rule, c.subject or "another agent")
        if rule == "other_agent" and c.agent != ASSISTANT and c.verb in c.lexicon.others:
            return Exclusion(rule, "an act of a merchant or a carrier")
        if rule == "instruction" and ex._imperative(c):
            return Exclusion(rule, "an imperative: a base form joined to another base form (set … and leave)")
        if rule == "success_noun" and labels.status_list(c):
            return Exclusion(rule, "a status named in a list of statuses")
        if rule == "success_noun" and (not c.flags.isdisjoint(ex._NOUN_FLAGS) or labels.counted_label(c)):
            return Exclusion(rule, "a participle used as a modifier or a label")
        if rule == "generic_statement" and "generic" in c.flags:
            return Exclusion(rule, "a present passive of a bare plural subject")
        if rule == "state" and c.agent != ASSISTANT and not c.flags.isdisjoint(ex._STATE_FLAGS):
            return Exclusion(rule, next(ex._STATE_FLAGS[f] for f in ex._STATE_FLAGS if f in c.flags))
        if rule == "state" and ex._consequence(c):
            return Exclusion(rule, "a thing's change after a failure (no one acted)")
    return None


def _corpus_candidates(guard: ReplyGuard) -> Iterator[Candidate]:
    """Every candidate the grammars propose in every corpus sentence, as ReplyGuard._sentence finds them."""
    for text in _corpus_texts():
        for sentence in segment.sentences(guard.normaliser.normalise(text)):
            reading = guard.detector.read(sentence.text)
            for lex in reading.lexicons:
                grammar = guard.grammars[lex.name]
                if grammar.may_claim(sentence.text, reading.words):
                    yield from grammar.candidates(segment.cut(sentence, lex.part_breaks), reading.words)


def test_the_decided_rules_are_asked_in_the_order_of_exclusion_rules() -> None:
    assert tuple(r for r in EXCLUSION_RULES if r in ex.DECIDED_RULES) == ex.DECIDED_RULES


def test_decided_is_what_the_loop_over_the_rules_decided(guard: ReplyGuard) -> None:
    """For every corpus candidate, with no rule off, each of the decided rules off and each pair of them off."""
    offs = [frozenset(), *(frozenset({r}) for r in ex.DECIDED_RULES)]
    offs += [frozenset({a, b}) for i, a in enumerate(ex.DECIDED_RULES) for b in ex.DECIDED_RULES[i + 1 :]]
    seen = 0
    for c in _corpus_candidates(guard):
        for off in offs:
            assert ex._decided(c, off) == _decided_before(c, off), (c.sentence.text, c.rule, sorted(off))
        seen += 1
    assert seen > 3000  # the corpora hold thousands of candidates


# -- segment: a sentence end alone is no sentence --------------------------------------------------------------


def _sentences_before(text: str, breaks: re.Pattern[str] | None = None) -> list[segment.Sentence]:
    """segment.sentences as it was: every chunk through _add, a lone sentence end too."""
    out: list[segment.Sentence] = []
    start = 0
    quoted = segment._QUOTE_OPENER.search(text) is not None
    protected = segment._protect_quotes(text) if quoted else text
    for m in segment._SENTENCE_END.finditer(protected):
        segment._add(out, text, start, m.end(), breaks, quoted)
        start = m.end()
    segment._add(out, text, start, len(text), breaks, quoted)
    return out


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(alphabet='。！？!?；;…\n.. a1-*•「」"“”已', max_size=30))
def test_sentences_are_what_they_were(text: str) -> None:
    assert segment.sentences(text) == _sentences_before(text), repr(text)


def test_sentences_of_every_corpus_text_are_what_they_were(guard: ReplyGuard) -> None:
    texts = list(_corpus_texts())
    for text in (*texts, *("\n".join(texts[i : i + 10]) for i in range(0, len(texts), 10))):
        norm = guard.normaliser.normalise(text)
        assert segment.sentences(norm) == _sentences_before(norm), text


# -- exclusions: the cue needles of an ASCII sentence found through the detector's words -----------------------


def _needles_by_words_are_the_texts(guard: ReplyGuard, sentence: str) -> None:
    words = guard.detector.read(sentence).words
    for lex in guard.lexicons_by_name.values():
        if lex.lower and words:
            folded = lex.fold(sentence)
            assert lex.cue_index.present(folded, words) == lex.cue_index.present(folded), sentence


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=st.lists(
        st.one_of(
            st.sampled_from(["isn't", "it's", "I'll", "we'd", "don't", "on", "March", "yesterday", "since", "ago"]),
            st.text(alphabet="abnorstuy'_0 ,.-ABS", max_size=5),
        ),
        max_size=20,
    )
)
def test_cue_needles_found_through_the_detectors_words_are_the_texts(guard: ReplyGuard, pieces: list[str]) -> None:
    _needles_by_words_are_the_texts(guard, " ".join(pieces))
    _needles_by_words_are_the_texts(guard, "".join(pieces))


def test_cue_needles_of_every_corpus_sentence_found_through_the_words_are_the_texts(guard: ReplyGuard) -> None:
    for text in _corpus_texts():
        for sentence in segment.sentences(guard.normaliser.normalise(text)):
            _needles_by_words_are_the_texts(guard, sentence.text)


# -- exclusions: a gated rule's cues searched one by one, only those whose needles the sentence holds ----------

PACKAGE = Path(lexicon_module.__file__).resolve().parent


Scope = tuple[Lexicon, re.Pattern[str], tuple[Cue, ...], NeedleIndex]


@pytest.fixture(scope="module")
def gated_scopes(guard: ReplyGuard) -> list[Scope]:
    """Every gated rule's every scope of both lexicons, split as compile_lexicon splits a scope it puts in
    Lexicon.gated (zh.yaml's too, which stay one alternation), with the scope's alternation beside."""
    out = []
    for lex in guard.lexicons_by_name.values():
        raw = yaml.safe_load((PACKAGE / f"{lex.name}.yaml").read_text(encoding="utf-8"))
        common = frozenset(w.lower() for w in raw.get("stop_words", ()))
        for rule in GATED_RULES:
            for scope, patterns in (raw["exclusions"].get(rule) or {}).items():
                flags = 0 if lex.lower else re.IGNORECASE
                cues = tuple(Cue(rule, re.compile(p, flags), needs(p, True, common)) for p in patterns)
                index = NeedleIndex(
                    (n for cue in cues if cue.needs for group in cue.needs for n in group), caseless=not lex.lower
                )
                out.append((lex, lex.exclusions[rule][scope], cues, index))
    return out


def _first_match_is_the_alternations(gated_scopes: list[Scope], sentence: str) -> None:
    for lex, combined, cues, index in gated_scopes:
        folded = lex.fold(sentence)
        present = index.present(folded)
        for text in (folded, *(folded[p.start : p.end] for p in segment.parts(folded, lex.part_breaks))):
            want, got = combined.search(text), lexicon_module.first_match(cues, present, text)
            assert (got and (got.span(), got.group(0))) == (want and (want.span(), want.group(0))), (text, combined)


def test_the_packaged_lexicons_split_the_english_gated_scopes() -> None:
    """en.yaml's gated cues open with \\b: searched one by one; zh.yaml's open with characters: one alternation."""
    guard = ReplyGuard.load()
    assert guard.lexicons_by_name["en"].gated["time_anchor"]
    assert not any(guard.lexicons_by_name["zh"].gated.values())


def test_first_match_is_the_alternations_in_every_corpus_sentence(guard: ReplyGuard, gated_scopes: list[Scope]) -> None:
    """In every corpus sentence and each of its parts, for every gated scope of both lexicons: the cues one by one
    (needles of the whole sentence) find the match, span and text, of the scope's alternation."""
    for text in _corpus_texts():
        for sentence in segment.sentences(guard.normaliser.normalise(text)):
            _first_match_is_the_alternations(gated_scopes, sentence.text)


_ANCHOR_PIECES = [
    "on", "March", "3", "yesterday", "last", "week", "ago", "since", "2019", "is", "was", "closed", "on Sundays",
    "until", "while", "has been", "上周", "昨天", "三天前", "了", "两年", "自己", "约满", "售罄", "已经",
]  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(st.one_of(st.sampled_from(_ANCHOR_PIECES), st.text(alphabet="a on,", max_size=3)), max_size=14))
def test_first_match_is_the_alternations_on_generated_text(gated_scopes: list[Scope], pieces: list[str]) -> None:
    _first_match_is_the_alternations(gated_scopes, " ".join(pieces))
    _first_match_is_the_alternations(gated_scopes, "".join(pieces))


# -- exclusions: the cues whose needles a sentence holds, found once per needle set (Lexicon.live_cues) --------


def _live_cues_are_the_satisfied_cues(lex: Lexicon, present: set[str]) -> None:
    live = lex.live_cues(present)
    scopes = [(scope, cues) for scope, cues in lex.cues.items()]
    scopes += [((rule, scope), cues) for rule, by_scope in lex.gated.items() for scope, cues in by_scope.items()]
    assert set(live) == {key for key, _ in scopes}
    for key, cues in scopes:
        assert live[key] == tuple(c for c in cues if satisfied(c.needs, present)), (key, sorted(present))


def test_live_cues_of_every_corpus_sentence_are_the_cues_its_needles_satisfy(guard: ReplyGuard) -> None:
    """For every corpus sentence and both lexicons: the cues live_cues gives (each scope, the gated scopes too)
    are those whose needle test passes on the sentence's needles, in their order; the second call (the memo)
    gives the same."""
    seen = 0
    for text in _corpus_texts():
        for sentence in segment.sentences(guard.normaliser.normalise(text)):
            for lex in guard.lexicons_by_name.values():
                present = lex.cue_index.present(lex.fold(sentence.text))
                _live_cues_are_the_satisfied_cues(lex, present)
                _live_cues_are_the_satisfied_cues(lex, present)
                seen += bool(present)
    assert seen > 3000


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_live_cues_of_any_needle_set_are_the_cues_it_satisfies(guard: ReplyGuard, data: st.DataObject) -> None:
    for lex in guard.lexicons_by_name.values():
        needles = sorted(lex.cue_index.needles)
        present = set(data.draw(st.lists(st.sampled_from(needles), max_size=12)))
        _live_cues_are_the_satisfied_cues(lex, present)


def test_live_cues_keep_at_most_their_bound_of_needle_sets() -> None:
    lex = ReplyGuard.load().lexicons_by_name["en"]
    for i in range(lexicon_module.LIVE_CUES_BOUND + 50):
        lex.live_cues({"on", f"not-a-needle-{i}"})
        assert len(lex._live) <= lexicon_module.LIVE_CUES_BOUND
    _live_cues_are_the_satisfied_cues(lex, {"on", "yesterday"})


# -- claims_zh: the result complements that can end a text, by its last character --------------------------------


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_complements_by_last_character_are_those_that_end_the_text(guard: ReplyGuard, data: st.DataObject) -> None:
    """ChineseGrammar._particle asks the complements that end the text before 了, longest first: the index by the
    last character gives those (and only those that can), in the order of ``complements``."""
    grammar = guard.grammars["zh"]
    comps = list(grammar.complements)  # type: ignore[union-attr]
    piece = st.one_of(st.sampled_from(comps), st.text(alphabet="把改删了已好成到下去", max_size=2))
    pieces = data.draw(st.lists(piece))
    for before in ("".join(pieces), *("把它" + c for c in comps)):  # every complement ending a text, too (齐全, 全)
        by_last = grammar._complements_by_last.get(before[-1:], grammar._no_complement)  # type: ignore[union-attr]
        assert [c for c in by_last if before.endswith(c)] == [c for c in comps if before.endswith(c)], before
