"""The guard's fast paths (notes/guard-cpu2.md): each finds exactly what the slower form it stands in for finds,
on generated text (hypothesis) and on every sentence of every guard corpus as the guard reads it. They change
no verdict (scripts/guard_verdicts.py hashes ~9,100 verdicts); these tests pin each equivalence on its own.

Pure tests: no Redis, no gRPC.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from countersign.guard import ReplyGuard, segment

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
