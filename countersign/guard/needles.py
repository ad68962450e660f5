"""Needles: literal words one of which every match of a regex contains, so that a regex runs only where it can match.

``needs(pattern)`` reads the parsed regex: in a sequence every item must match, so any item's needs are the
sequence's; a branch needs one of its branches' needs; a repeat of at least one needs its body's. A run of
two or more literal characters (or one Chinese character) is a need of its own. When no such set exists
(``\\w+ed``, an optional group only) the answer is None and the regex runs everywhere: slower, never wrong.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterable
from typing import Any

_P: Any = importlib.import_module("re._parser" if sys.version_info >= (3, 11) else "sre_parse")
_REPEATS = tuple(getattr(_P, n) for n in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") if hasattr(_P, n))


def needs(pattern: str, lower: bool = True, common: frozenset[str] = frozenset()) -> frozenset[str] | None:
    """Strings one of which every match of ``pattern`` contains (lower-cased when ``lower``), or None.
    Where a choice exists, sets without a ``common`` word (one found in most sentences) are preferred."""
    try:
        parsed = _P.parse(pattern)
    except re.error:
        return None
    found = _seq(list(parsed), common)
    if not found:
        return None
    return frozenset(s.lower() for s in found) if lower else frozenset(found)


def _best(options: Iterable[frozenset[str] | None], common: frozenset[str]) -> frozenset[str] | None:
    """The most selective need: no common word in it, then the longest shortest string, then the fewest."""
    def score(option: frozenset[str]) -> tuple[int, int, int]:
        return (-len(option & common), min(map(len, option)), -len(option))

    candidates = [option for option in options if option]
    return max(candidates, key=score) if candidates else None


def _seq(items: list[Any], common: frozenset[str]) -> frozenset[str] | None:
    options: list[frozenset[str] | None] = []
    run = ""
    for op, av in items:
        if op is _P.LITERAL:
            run += chr(av)
            continue
        if _enough(run):
            options.append(frozenset({run}))
        run = ""
        options.append(_item(op, av, common))
    if _enough(run):
        options.append(frozenset({run}))
    return _best(options, common)


def _enough(run: str) -> bool:
    """Two letters, or one character of a script without spaces (妥): a needle worth a substring test."""
    return len(run) >= 2 or (len(run) == 1 and not run.isascii())


def _item(op: Any, av: Any, common: frozenset[str]) -> frozenset[str] | None:
    if op is _P.SUBPATTERN:
        return _seq(list(av[-1]), common)
    if op is _P.BRANCH:
        union: set[str] = set()
        for branch in av[1]:
            need = _seq(list(branch), common)
            if not need:
                return None
            union |= need
        return frozenset(union)
    if op in _REPEATS and av[0] >= 1:
        return _seq(list(av[2]), common)
    if op is _P.ATOMIC_GROUP if hasattr(_P, "ATOMIC_GROUP") else False:
        return _seq(list(av), common)
    return None


class NeedleIndex:
    """Which of many needles a text holds: one substring test per needle, in one pass (cheaper than testing
    each regex's needles apart, and than a regex search per regex)."""

    def __init__(self, needles: Iterable[str]) -> None:
        self.needles = tuple(sorted(set(needles)))

    def present(self, text: str) -> set[str]:
        return {n for n in self.needles if n in text}
