"""Segmentation: a normalised reply cut into sentences, and each sentence into clause parts.

A sentence ends at 。！？!?； … a line break, or a full stop followed by a space (not "3.5", not "e.g."); an ASCII ";"
joins two clauses of one sentence (a part break: "Nothing was moved; the account was frozen" is read whole).
A list item (``- x``, ``* x``, ``• x``, ``1. x``, ``1) x``) is a sentence of its own, its marker dropped.
A sentence is cut into parts at , ， 、 : ： ; — – → and at a language's ``part_breaks`` ("but", "但是"):
exclusions such as a negation govern the part they stand in ("已经创建好了，但没有设置提醒" still claims).
Quoted spans ("…", “…”, 「…」, 『…』, 《…》) are remembered: a claim inside one is a quotation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# one character class first, so that re skips fast to a candidate end (a pattern that opens with alternatives
# is tried at every position); the same ends as [。！？!?；…][。！？!?；;…]*["”’」』)]* | \n+
# | (?<![.\s][a-zA-Z])\.+(?=[\s"”’)]|$)
_SENTENCE_END = re.compile(
    r"[。！？!?；…\n.](?:(?<=[。！？!?；…])[。！？!?；;…]*[\"”’」』)]*|(?<=\n)\n*|"
    r"(?<=\.)(?<![.\s][a-zA-Z]\.)\.*(?=[\s\"”’)]|$))"
)
_LIST_MARKER = re.compile(r"\s*(?:[-*+•·▪‣◦]\s+|\d{1,3}[.)、]\s+|\d{1,3}、)")
# the same cuts as (?:(?<!\d)[,:]|[,:](?!\d)|[，、：;；|])+ | \s[-–—]{1,2}\s | [—–→]+ | \s->\s | [()（）]
# (a comma between digits is no break), written with one character class first so that re skips fast
_SEP = r"(?:[，、：;；|]|[,:](?!(?<=\d[,:])\d))"
_PART_BREAK = re.compile(
    r"[,:，、：;；|\s—–→()（）](?:(?<=[，、：;；|])" + _SEP + r"*|"
    r"(?<=[,:])(?!(?<=\d[,:])\d)" + _SEP + r"*|"
    r"(?<=\s)(?:[-–—]{1,2}\s|->\s)|(?<=[—–→])[—–→]*|(?<=[()（）]))"
)
# the same less the cut at a spaced dash, for a sentence with no "-", "–" or "—": no match of _PART_BREAK starts
# at a space there (only that branch opens with one, and it needs a dash after it), and re need not try one at
# every space (~3.5x fewer instructions on an English sentence without commas)
_PART_BREAK_UNDASHED = re.compile(
    r"[,:，、：;；|—–→()（）](?:(?<=[，、：;；|])" + _SEP + r"*|"
    r"(?<=[,:])(?!(?<=\d[,:])\d)" + _SEP + r"*|"
    r"(?<=[—–→])[—–→]*|(?<=[()（）]))"
)
# a class search, not set.isdisjoint(text): that hashes every character of the text, several times slower
_QUOTE_OPENER = re.compile('["“「『《‘]')
_QUOTES = re.compile(
    r"\"[^\"\n]{1,200}\"|“[^”\n]{1,200}”|「[^」\n]{1,200}」|『[^』\n]{1,200}』|《[^》\n]{1,200}》"
    r"|‘[^’\n]{1,200}’"
)


# A lexicon's part breaks of the shape \b(?:w1|w2(?!\s+x)|w3(?<!…)|…)\b, case-insensitive, with ASCII words (en.yaml's):
# on an ASCII sentence they are found as (?:w1|…)\b in the lower-cased sentence, keeping a match whose start
# follows no word character. The same matches: every match is word characters only, so no kept or dropped match
# can overlap a match of the original (which starts where a word does), and on ASCII text a case-insensitive
# match is a match of the lower-cased text. It is ~2.5x faster: the leading \b and IGNORECASE keep re from
# skipping to a break word's first letter, and it tries the whole alternation at every position.
_WORD_BREAKS = re.compile(
    r"\(\?:\\b\(\?:((?:[a-z]+(?:\(\?!\\s\+[a-z]+\)|\(\?<![^()|]+\))*\|)*[a-z]+(?:\(\?!\\s\+[a-z]+\)|\(\?<![^()|]+\))*)\)\\b\)"
)  # a word may carry lookbehinds too ("yet(?<!\bnot\syet)"): they read the same on the lower-cased ASCII text
_ascii_breaks: dict[re.Pattern[str], re.Pattern[str] | None] = {}


def _lower_breaks(breaks: re.Pattern[str]) -> re.Pattern[str] | None:
    """The lower-case form of ``breaks`` for an ASCII sentence (see _WORD_BREAKS), or None: not of that shape."""
    if breaks not in _ascii_breaks:
        shape = _WORD_BREAKS.fullmatch(breaks.pattern)
        ok = shape is not None and breaks.flags == re.IGNORECASE | re.UNICODE
        _ascii_breaks[breaks] = re.compile(f"(?:{shape.group(1)})\\b") if ok and shape is not None else None
    return _ascii_breaks[breaks]


def _break_words(sentence: str, breaks: re.Pattern[str]) -> list[tuple[int, int, str]]:
    """Where ``breaks`` matches in ``sentence``: (start, start, the word as written), as breaks.finditer finds."""
    lower = _lower_breaks(breaks) if sentence.isascii() else None
    if lower is None:
        return [(m.start(), m.start(), m.group(0)) for m in breaks.finditer(sentence) if m.group(0)]
    low = sentence.lower()
    return [
        (m.start(), m.start(), sentence[m.start() : m.end()])
        for m in lower.finditer(low)
        if m.start() == 0 or not (low[m.start() - 1].isalnum() or low[m.start() - 1] == "_")
    ]


@dataclass(slots=True)  # not frozen: a frozen dataclass is several times slower to build
class Part:
    """A clause part: ``text`` is ``sentence.text[start:end]``; ``end_mark`` is what cut it off (",", ":", "")."""

    text: str
    start: int
    end: int
    end_mark: str


@dataclass(slots=True)  # not frozen: a frozen dataclass is several times slower to build
class Sentence:
    text: str
    start: int  # offset in the normalised reply
    parts: tuple[Part, ...]
    quotes: tuple[tuple[int, int], ...]  # quoted spans, offsets in ``text``

    def quoted(self, start: int, end: int) -> bool:
        return any(qs <= start and end <= qe for qs, qe in self.quotes)


def sentences(text: str, breaks: re.Pattern[str] | None = None) -> list[Sentence]:
    """The sentences of ``text`` in order (empty ones dropped); cut into parts only when ``breaks`` is given
    (else ``cut`` does it, for the sentences a grammar reads)."""
    out: list[Sentence] = []
    start = 0
    quoted = _QUOTE_OPENER.search(text) is not None
    protected = _protect_quotes(text) if quoted else text
    for m in _SENTENCE_END.finditer(protected):
        end = m.end()
        if end - start > 1:  # a chunk of one character is a sentence end alone ("\n", "。"): _add would drop it
            _add(out, text, start, end, breaks, quoted)
        start = end
    _add(out, text, start, len(text), breaks, quoted)
    return out


def _protect_quotes(text: str) -> str:
    """``text`` with sentence ends inside short quotes blanked (same length), so a quote stays in one sentence."""
    return _QUOTES.sub(lambda m: re.sub(r"[。！？!?；;.…\n]", "_", m.group(0)), text)


def _add(out: list[Sentence], text: str, start: int, end: int, breaks: re.Pattern[str] | None, quoted: bool) -> None:
    chunk = text[start:end]
    marker = _LIST_MARKER.match(chunk)
    lead = marker.end() if marker else len(chunk) - len(chunk.lstrip())
    body = chunk[lead:].rstrip()
    if not body.strip(" \t.。!！?？;；…"):
        return
    out.append(
        Sentence(
            body,
            start + lead,
            tuple(parts(body, breaks)) if breaks is not None else (),
            _quotes(body) if quoted else (),
        )
    )


def cut(sentence: Sentence, breaks: re.Pattern[str] | None) -> Sentence:
    """The same sentence cut with a language's own part breaks (its quotes, found once by ``sentences``, are reused)."""
    cut_parts = tuple(parts(sentence.text, breaks, sentence.quotes))
    return Sentence(sentence.text, sentence.start, cut_parts, sentence.quotes)


def _quotes(text: str) -> tuple[tuple[int, int], ...]:
    if _QUOTE_OPENER.search(text) is None:
        return ()
    return tuple(m.span() for m in _QUOTES.finditer(text))


def parts(
    sentence: str, breaks: re.Pattern[str] | None = None, quotes: tuple[tuple[int, int], ...] | None = None
) -> list[Part]:
    """The clause parts of one sentence (a break inside a quote does not cut); ``quotes``: its quoted spans when
    the caller has them (``Sentence.quotes``: _quotes of the same text, or () for a reply with no quote opener,
    where _quotes finds none either)."""
    dashed = "-" in sentence or "–" in sentence or "—" in sentence
    cuts: list[tuple[int, int, str]] = [
        (m.start(), m.end(), m.group(0).strip()[:1])
        for m in (_PART_BREAK if dashed else _PART_BREAK_UNDASHED).finditer(sentence)
    ]
    if breaks is not None:
        words = _break_words(sentence, breaks)
        if words:
            cuts = sorted(cuts + words)
    if quotes is None:
        quotes = _quotes(sentence)
    if quotes:
        cuts = [c for c in cuts if not any(qs < c[0] < qe for qs, qe in quotes)]
    out: list[Part] = []
    start = 0
    for cs, ce, mark in cuts:
        if cs > start and sentence[start:cs].strip():
            out.append(Part(sentence[start:cs], start, cs, mark))
        start = max(start, ce)
    if sentence[start:].strip():
        out.append(Part(sentence[start:], start, len(sentence), ""))
    return out
