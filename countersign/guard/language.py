"""Which language a sentence is in, cheaply: its script, then stop words (no model, no download).

- Kana anywhere: Japanese (it shares kanji with Chinese; kana is what only Japanese writes).
- Another script named in ``languages.yaml`` (Hangul, Cyrillic, Arabic, ...): that language.
- Han characters: the lexicon whose grammar is ``zh``.
- Latin letters: the Latin lexicon (``en``) unless another language's stop words outnumber its own (two at
  least): "La nota ha sido eliminada" is Spanish, "Du hast keine Termine" German, "Deleted." English.
A sentence may be read by two lexicons (Chinese with an English name in it); one in a language with no lexicon
is reported, so that the reply is not passed silently.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from countersign.guard.lexicon import Languages, Lexicon

_P: Any = importlib.import_module("re._parser" if sys.version_info >= (3, 11) else "sre_parse")
_KANA = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff]")
_HAN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile(r"[A-Za-z\u00c0-\u024f]+(?:'[A-Za-z]+)?")
_MIN_WORDS = 3  # a Latin sentence shorter than this is read as the default Latin lexicon's


@dataclass(slots=True)  # not frozen: one is built for every sentence, and a frozen dataclass is slow to build
class Reading:
    lexicons: tuple[Lexicon, ...]  # the lexicons that read the sentence
    unsupported: str  # a language with no lexicon ("" when none)
    words: tuple[str, ...] = ()  # the Latin words, lower-cased (a grammar's cheap test may reuse them)


def _first_letters(patterns: list[str]) -> re.Pattern[str] | None:
    """A class of the letters each pattern must open with ("[\\u0400-\\u04ff]{2,}" opens with one of
    U+0400..U+04FF), or None when one of them opens otherwise (then every script is searched)."""
    ranges: list[str] = []
    for pattern in patterns:
        parsed = list(_P.parse(pattern))
        item = parsed[0] if parsed else None
        if item is not None and item[0] in (_P.MAX_REPEAT, _P.MIN_REPEAT) and item[1][0] >= 1 and item[1][2]:
            item = next(iter(item[1][2]))  # "[...]{2,}": its class
        if item is None or item[0] is not _P.IN:
            return None
        for op, arg in item[1]:
            if op is _P.LITERAL:
                ranges.append(re.escape(chr(arg)))
            elif op is _P.RANGE:
                ranges.append(f"{re.escape(chr(arg[0]))}-{re.escape(chr(arg[1]))}")
            else:
                return None
    return re.compile("[" + "".join(ranges) + "]") if ranges else None


class Detector:
    def __init__(self, lexicons: Mapping[str, Lexicon], languages: Languages) -> None:
        self._han = tuple(lex for lex in lexicons.values() if lex.grammar == "zh")
        self._latin = tuple(lex for lex in lexicons.values() if lex.grammar == "en")
        self._others = {lang: words for lang, words in languages.stop_words.items() if lang not in lexicons}
        scripts = {lang: rx for lang, rx in languages.scripts.items() if lang not in lexicons}
        # a search per script (a character class each: re skips fast) costs less than one alternation of them
        self._scripts = tuple(scripts.items())
        # one class of every script's first letters, searched before the scripts one by one (most sentences
        # hold none of them); None when a script's regex does not open with a class
        self._any_script = _first_letters([rx.pattern for rx in scripts.values()])
        self._kana_supported = "ja" in lexicons
        self._own = frozenset().union(*(lex.stop_words for lex in self._latin))
        self._word_langs: dict[str, list[str]] = {}
        for lang, words in self._others.items():
            for word in words:
                self._word_langs.setdefault(word, []).append(lang)
        self._foreign = frozenset(self._word_langs)

    def read(self, sentence: str) -> Reading:
        if sentence.isascii():
            words = _LATIN_WORD.findall(sentence.lower())
            if not words:
                return Reading((), "")
            lang = self._latin_language(words, False)
            return Reading((), lang) if lang else Reading(self._latin, "", tuple(words))
        if not self._kana_supported and _KANA.search(sentence):
            return Reading((), "ja")
        first: tuple[int, str] | None = None  # the script that shows up first in the sentence names it
        for lang, rx in self._scripts if self._any_script is None or self._any_script.search(sentence) else ():
            m = rx.search(sentence)
            if m is not None and (first is None or m.start() < first[0]):
                first = (m.start(), lang)
        if first is not None:
            return Reading((), first[1])
        chosen: list[Lexicon] = []
        if _HAN.search(sentence):
            if not self._han:
                return Reading((), "zh")
            chosen.extend(self._han)
        words = _LATIN_WORD.findall(sentence.lower())
        if chosen and len(words) < _MIN_WORDS:
            return Reading(tuple(chosen), "")  # a name or "OK" inside a Chinese sentence: Chinese reads it
        if words:
            lang = self._latin_language(words, any(not w.isascii() for w in words))
            if lang:
                if chosen:  # a foreign clause inside a Chinese sentence: the Chinese reading stands
                    return Reading(tuple(chosen), "")
                return Reading((), lang)
            chosen.extend(self._latin)
        return Reading(tuple(chosen), "")

    def _latin_language(self, words: list[str], accented: bool) -> str:
        """The language of a Latin-script sentence that has no lexicon ("" when a lexicon reads it)."""
        if len(words) < _MIN_WORDS or not self._others:
            return ""
        present = set(words)
        foreign = self._foreign.intersection(present)
        if not foreign:
            return ""
        own = len(self._own & present)
        if len(foreign) <= own:
            return ""  # a language scores at most one per foreign word: it cannot outnumber English
        hits: dict[str, int] = {}
        for word in foreign:
            for lang in self._word_langs[word]:
                hits[lang] = hits.get(lang, 0) + 1
        if not hits:
            return ""
        best = max(hits, key=lambda lang: hits[lang])
        # two of its words and more than English has; or one, with a letter English does not write (é, ñ, ü)
        # and no English word
        return best if (hits[best] >= 2 or (accented and own == 0)) and hits[best] > own else ""
