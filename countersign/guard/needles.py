"""Needles: literal words that every match of a regex contains, so that a regex runs only where it can match.

``needs(pattern)`` reads the parsed regex and returns a conjunction of needle sets: every match holds a string
of each set. In a sequence every item must match, so each item's needs are required together ("is now" needs
"is" and "now"); a branch needs one of its branches' needs (one set, their union); a repeat of at least one
needs its body's. A run of two or more literal characters (or one Chinese character) is a need of its own.
When nothing is required (``\\w+ed``, an optional group only) the answer is None and the regex runs
everywhere: slower, never wrong. Requiring every item, not only the rarest, is what keeps most rules from
running: "is" is in nearly every English sentence, "is ... done" is not.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterable
from typing import Any

_P: Any = importlib.import_module("re._parser" if sys.version_info >= (3, 11) else "sre_parse")
_REPEATS = tuple(getattr(_P, n) for n in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") if hasattr(_P, n))

Needs = tuple[frozenset[str], ...]  # every set must have a member in the text


def needs(pattern: str, lower: bool = True, common: frozenset[str] = frozenset(), limit: int = 2) -> Needs | None:
    """The needle sets every match of ``pattern`` satisfies (lower-cased when ``lower``), or None: at most
    ``limit`` of them, the most selective first (``common``: words found in most sentences). Each set is a
    test per sentence, so two sets buy most of the selectivity at a bounded cost."""
    try:
        parsed = _P.parse(pattern)
    except re.error:
        return None
    found = _seq(list(parsed), common)
    if not found:
        return None
    sets = dict.fromkeys(frozenset(x.lower() for x in f) if lower else f for f in found)
    return tuple(sorted(sets, key=lambda f: (len(f & common), -min(map(len, f)), len(f)))[:limit])


def opens_at_a_boundary(pattern: str) -> bool:
    """Whether ``pattern`` opens with ``\\b`` (inside groups too): re cannot skip ahead to where it may match and
    tries it at every position, so an alternation of such cues costs about the sum of its cues' searches, and
    searching only the cues whose needles a text holds saves most of it. (Cues that open with a literal or a
    class, zh.yaml's, are cheaper searched as one alternation.) A hint for speed only: first_match is exact."""
    try:
        items = list(_P.parse(pattern))
    except re.error:
        return False
    while items and items[0][0] is _P.SUBPATTERN:
        items = list(items[0][1][-1])
    return bool(items) and items[0][0] is _P.AT and items[0][1] is _P.AT_BOUNDARY


def satisfied(need: Needs | None, present: set[str]) -> bool:
    """Whether a text that holds the needles ``present`` may match a regex of these needs (the hot loops
    write this test inline)."""
    return need is None or all(not s.isdisjoint(present) for s in need)


def _best(options: Iterable[frozenset[str]], common: frozenset[str]) -> frozenset[str] | None:
    """The most selective single need: no common word in it, then the longest shortest string, then the fewest."""

    def score(option: frozenset[str]) -> tuple[int, int, int]:
        return (-len(option & common), min(map(len, option)), -len(option))

    candidates = [option for option in options if option]
    return max(candidates, key=score) if candidates else None


def _seq(items: list[Any], common: frozenset[str]) -> list[frozenset[str]]:
    out: list[frozenset[str]] = []
    run = ""
    for op, av in items:
        if op is _P.LITERAL:
            run += chr(av)
            continue
        if _enough(run):
            out.append(frozenset({run}))
        run = ""
        out.extend(_item(op, av, common))
    if _enough(run):
        out.append(frozenset({run}))
    return out


def _enough(run: str) -> bool:
    """Two letters, or one character of a script without spaces (妥): a needle worth a substring test."""
    return len(run) >= 2 or (len(run) == 1 and not run.isascii())


def _item(op: Any, av: Any, common: frozenset[str]) -> list[frozenset[str]]:
    if op is _P.SUBPATTERN:
        return _seq(list(av[-1]), common)
    if op is _P.BRANCH:
        union: set[str] = set()
        for branch in av[1]:
            need = _best(_seq(list(branch), common), common)
            if not need:
                return []
            union |= need
        return [frozenset(union)]
    if op is _P.IN and av and all(o is _P.LITERAL and not chr(c).isascii() for o, c in av):
        return [frozenset(chr(c) for _o, c in av)]  # [✅✔☑✓]: one of these characters
    if op in _REPEATS and av[0] >= 1:
        return _seq(list(av[2]), common)
    if op is _P.ATOMIC_GROUP if hasattr(_P, "ATOMIC_GROUP") else False:
        return _seq(list(av), common)
    return []


class NeedleIndex:
    """Which of many needles a text holds, cheaper than a substring test per needle (this runs for every
    sentence, part and candidate):

    - an ASCII text: a needle of letters can occur nowhere but inside a run of letters, so the needles each
      run (word) holds are looked up once per word (words repeat: a small memo, like the tokeniser's); the
      few needles with other characters ("'s", "n't") are searched in the text;
    - any other text: a substring test for each needle whose first character the text holds (a needle can
      occur only where its first character does): the text's characters meet the first characters in one set
      intersection, so a Chinese sentence tests a few dozen of the cue index's ~380 needles, not all of them
      (5x less time on the bench's dense listing than one test per needle; an ASCII needle in a wide string
      costs more than in an ASCII one).
    ``words``: the text's runs of letters when the caller has them already (lower-cased with the text).

    ``caseless``: the regexes behind the needles match case-insensitively on text that is not lower-cased (a
    zh-style lexicon: "OK了" is "ok了"); the needles must then be lower-case (``needs(..., lower=True)``) and a
    needle with a cased letter is looked for in the text lower-cased, only when the text holds its first letter
    in either case (a Chinese sentence without Latin letters pays one set test)."""

    def __init__(self, needles: Iterable[str], caseless: bool = False) -> None:
        self.needles = tuple(sorted(set(needles)))
        self.caseless = caseless
        self._letters = tuple(n for n in self.needles if n.isascii() and n.isalpha())
        self._others = tuple(n for n in self.needles if n not in self._letters)
        self._by_word: dict[str, frozenset[str]] = {}
        by_first: dict[str, list[str]] = {}
        cased: dict[str, list[str]] = {}
        for n in self.needles:
            if caseless and n != n.upper():
                for first in {n[:1], n[:1].upper()}:
                    cased.setdefault(first, []).append(n)
            else:
                by_first.setdefault(n[:1], []).append(n)
        self._cased = {first: tuple(ns) for first, ns in cased.items()}  # first letter (either case) -> needles
        self._cased_firsts = frozenset(self._cased)
        for first in self._cased_firsts:
            by_first.setdefault(first, [])  # one scan of the text finds the first characters of both kinds
        self._by_first = {first: tuple(ns) for first, ns in by_first.items()}
        self._firsts = frozenset(self._by_first) - {""}
        self._empty = ("",) if "" in self._by_first else ()  # an empty needle is in every text

    def present(self, text: str, words: Iterable[str] | None = None) -> set[str]:
        if words is None and not text.isascii():
            by_first = self._by_first
            hits = self._firsts.intersection(text)
            found = {n for first in hits for n in by_first[first] if n in text}
            if self._cased_firsts and not self._cased_firsts.isdisjoint(hits):
                low, cased = text.lower(), self._cased
                found.update(n for first in self._cased_firsts.intersection(hits) for n in cased[first] if n in low)
            return found.union(self._empty) if self._empty else found
        if self.caseless and words is None:
            text = text.lower()
        found = {n for n in self._others if n in text}
        memo = self._by_word
        for word in _LETTER_RUNS.findall(text) if words is None else words:
            hit = memo.get(word)
            if hit is None:
                if len(memo) > 20000:
                    memo.clear()
                hit = memo[word] = frozenset(n for n in self._letters if n in word)
            if hit:
                found |= hit
        return found


_LETTER_RUNS = re.compile(r"[A-Za-z]+")
