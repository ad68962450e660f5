"""Normalisation: the text a reader sees, before the guard reads a word (DESIGN §9, ATTACKS "Text the guard reads").

``Normaliser.normalise(reply)`` undoes what hides a claim from a matcher but not from a person:

1. Text a reader is not shown is removed: HTML comments, struck-through text (``~~x~~``, ``<del>``/``<s>``/
   ``<strike>``), hidden elements (``hidden``, ``display:none``, ``<script>``) and markdown link definitions; so
   ``has ~~not~~ been moved`` says "has been moved", and ``~~I've cancelled it~~`` says nothing. Then HTML tags
   (a block tag becomes a line break). Markup counts only as a renderer reads it: written in ASCII, before
   character references are decoded (``&lt;!-- not --&gt;`` and full-width ``～～not～～`` are shown, so read).
2. HTML character references are decoded ("I&#39;ve"); a tag that the decoding shows as text is read past like
   the tags of step 1 ("I've &lt;b&gt;deleted&lt;/b&gt; it" shows "<b>deleted</b>"), the words between it kept.
3. NFKC (full-width letters, mathematical letters, ligatures), then format characters are removed: every
   category Cf (zero-width space/joiner, word joiner, soft hyphen, bidi marks, BOM, tag characters), variation
   selectors and stray combining marks (category Mn left after NFKC; letters under a strike overlay go with
   them) and invisible fillers. Markdown marks (emphasis, code, links, headings, quote marks) are dropped.
4. Letters of other scripts that look Latin (``data/confusables.tsv``) are folded into Latin inside a word that
   also holds a Latin letter (a Cyrillic "е" in "dеleted"), or in a word of look-alikes only that is an
   English word or all Latin small capitals ("ᴅᴇʟᴇᴛᴇᴅ"); a Russian word is left alone.
5. Traditional Chinese characters are folded to simplified ones (``data/t2s.tsv``, from OpenCC).
6. A line break inside a sentence is joined (a list item or a finished sentence keeps its line); a word cut by
   a break or a hyphen at a line end is glued back when the whole is a word the lexicons know.
7. Letters spaced out ("d e l e t e d", "已 经 删 除") are closed up.

Pure and total: ``normalise`` never raises and never looks at more than it is given.
"""

from __future__ import annotations

import functools
import html
import re
import unicodedata
from collections.abc import Callable
from importlib import resources

# struck-through text: ~~x~~ (markdown), <del>/<s>/<strike> (HTML); non-greedy, within 2,000 characters
_STRUCK = re.compile(r"~~(?=\S)(.{1,2000}?)(?<=\S)~~|<(del|s|strike)\b[^>]*>.{0,2000}?</\2\s*>", re.S | re.I)
_COMMENT = re.compile(r"<!--.*?(?:-->|$)", re.S)
# an element a browser does not show: <script>, <style>, <template>, or an element whose own attributes hide it
# (the hidden attribute, a style of display:none or visibility:hidden). Attributes are parsed, so the word
# "hidden" in a title or a data attribute hides nothing.
_OPEN_TAG = re.compile(r"<([A-Za-z][A-Za-z0-9-]*)((?:\s[^<>]*)?)>")
_ATTRIBUTE = re.compile(r"""([^\s"'=<>/`]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+)))?""")
_HIDING_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.I)
_HIDING_HINT = re.compile(r"hidden|display|<\s*(?:script|style|template)", re.I)
_HIDING_ELEMENTS = frozenset({"script", "style", "template"})
# a markdown link reference definition ("[note]: # (text)"): renders as nothing, but it cannot interrupt a
# paragraph (CommonMark 4.7), so a line under a line of text is shown
_LINK_DEFINITION = re.compile(
    r" {0,3}\[[^\]\n]{1,200}\]:[ \t]*\S+(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^)\n]*\)))?[ \t]*"
)
# a letter followed by one or more combining strike/slash overlays (U+0335..U+0338): struck, so removed
_OVERLAY = re.compile(r".[\u0335-\u0338]+", re.S)
# combining diacritics NFKC left standing alone (a mark it composed into its letter, é, is no longer one)
_MARKS = re.compile("[\u0300-\u036f]")
_BLOCK_TAG = re.compile(r"<\s*/?\s*(?:br|p|div|li|ul|ol|tr|h[1-6]|table|blockquote)\b[^>]*>", re.I)
_TAG = re.compile(r"<\s*/?\s*[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?\s*>")
_IMAGE_OR_LINK = re.compile(r"!?\[([^\]\n]{0,300})\]\([^)\n]{0,500}\)")
_CODE = re.compile(r"`+")
_STARS = re.compile(r"(?<!^)\*{1,3}|^\*{2,3}", re.M)  # a single "* " at a line start is a bullet: kept
_UNDERSCORES = re.compile(r"(?<![A-Za-z0-9])_{1,3}|_{1,3}(?![A-Za-z0-9])")
_LINE_MARKUP = re.compile(r"^[ \t]*(?:#{1,6}[ \t]+|>[ \t]?)+", re.M)
# the characters NFKC changes in most Chinese and full-width text (full-width ASCII forms, the ideographic space),
# folded one by one before NFKC's quick check, which then mostly finds nothing left to do: NFKC of the folded
# text is NFKC of the text (each is replaced by its own compatibility mapping, and none has a combining class)
_WIDE = {cp: unicodedata.normalize("NFKC", chr(cp)) for cp in (*range(0xFF01, 0xFF5F), 0x3000)}
_WIDE_FORMS = re.compile("[\uff01-\uff5e\u3000]")
_INVISIBLE = "\u115f\u1160\u3164\uffa0\u2800"  # Hangul fillers and the braille blank: letters that show nothing
# a line that starts a new unit: a list marker, a check mark, a table row, a heading
_NEW_LINE_UNIT = re.compile(r"^\s*(?:[-*+•·▪‣◦]\s|\d{1,3}[.)、]\s*|[✅✔☑✓❌✗✘⚠]|\||#)")
_LINE_END_STOP = re.compile(r"[。！？!?.;；:：…)）」』\"”]\s*$")
# what _LINE_END_STOP finds, as the last character of the line stripped (str.isspace is re's \s): one set test,
# where the search tries the class at every character of the line
_LINE_END_CHARS = frozenset('。！？!?.;；:：…)）」』"”')
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def _goes_on_across_a_blank_line(before: str, line: str) -> bool:
    """A line with no sentence end, one empty line, then a line that opens in lower case: one sentence a reader
    reads on ("I haven't\n\ncancelled the order yet."), not two paragraphs (a list item or a heading keeps its line)."""
    a, b = before.rstrip(), line.lstrip()
    return bool(
        a
        and b
        and "a" <= b[0] <= "z"
        and a[-1] not in _LINE_END_CHARS
        and not _NEW_LINE_UNIT.match(before)
        and not _NEW_LINE_UNIT.match(line)
    )


_APOSTROPHE = re.compile(r"(?<=[A-Za-z])[\u2018\u2019\u02bc\u00b4`](?=[A-Za-z])")


def _table(name: str) -> dict[int, str]:
    text = resources.files("countersign.guard").joinpath("data", name).read_text(encoding="utf-8")
    out: dict[int, str] = {}
    for line in text.splitlines():
        src, _, dst = line.partition("\t")
        if len(src) == 1 and dst:
            out[ord(src)] = dst
    return out


@functools.cache
def _drop_table() -> dict[int, None]:
    """Every format character (Cf), variation selector and invisible filler, for str.translate."""
    drop: dict[int, None] = {}
    # every Cf, VS and filler lies below U+20000 or in plane 14 (tags, variation selectors supplement)
    for cp in (*range(0x20000), *range(0xE0000, 0xE1000)):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        if (
            unicodedata.category(ch) == "Cf"
            or 0xFE00 <= cp <= 0xFE0F
            or 0xE0100 <= cp <= 0xE01EF
            or 0x180B <= cp <= 0x180F
            or ch in _INVISIBLE
        ):
            drop[cp] = None
    return drop


STEPS = (
    "entities",
    "comments",
    "nfkc",
    "format",
    "marks",
    "struck",
    "hidden",
    "tags",
    "shown_tags",
    "markdown",
    "confusables",
    "traditional",
    "lines",
    "spacing",
)
_ENTITY = re.compile(r"&(?:#\d{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
# letters spaced out to dodge a word list: "d e l e t e d", "已 经 删 除"
_SPACED_LATIN = re.compile(r"(?<![A-Za-z])[A-Za-z](?: [A-Za-z]){3,}(?![A-Za-z])")
_SPACED_HINT = re.compile(r" [A-Za-z] [A-Za-z] ")
_SPACED_CJK = re.compile(r" (?<=[\u3400-\u9fff] )(?=[\u3400-\u9fff])")  # the space first: re skips fast to one


_SPACED_APOSTROPHE = re.compile(r"(?<=[A-Za-z])\s+'(?=(?:ve|s|re|m|ll|d|t)\b)")
_SPACE_APOSTROPHE = re.compile(r"\s'(?:ve|s|re|m|ll|d|t)\b")  # what every match above holds
# the same test written apostrophe first (the space is looked behind): re skips fast to each apostrophe instead of
# trying at every character (~13x fewer instructions on a 2 KB reply)
_APOSTROPHE_AFTER_SPACE = re.compile(r"'(?<=\s')(?:ve|s|re|m|ll|d|t)\b")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _wide(m: re.Match[str]) -> str:
    return _WIDE[ord(m.group(0))]


def _hides(name: str, attributes: str) -> bool:
    if name in _HIDING_ELEMENTS:
        return True
    for m in _ATTRIBUTE.finditer(attributes):
        key = m.group(1).lower()
        if key == "hidden":
            return True
        if key == "style" and _HIDING_STYLE.search(m.group(2) or m.group(3) or m.group(4) or ""):
            return True
    return False


def _element_end(text: str, name: str, start: int) -> int | None:
    """Where the element opened before ``start`` closes (elements of its own name nest), within 2,000
    characters; None when it does not close there (then it is left to be read: the safe side)."""
    depth = 1
    for m in re.finditer(rf"<(/?){re.escape(name)}\b[^<>]*>", text[start : start + 2000], re.I):
        if m.group(0).endswith("/>") and not m.group(1):
            continue
        depth += -1 if m.group(1) else 1
        if not depth:
            return start + m.end()
    return None


def _hidden_elements(text: str) -> str:
    out: list[str] = []
    pos = 0
    while m := _OPEN_TAG.search(text, pos):
        name, attributes = m.group(1).lower(), m.group(2)
        end = None
        if not attributes.rstrip().endswith("/") and _hides(name, attributes):
            end = _element_end(text, name, m.end())
        out.append(text[pos : m.end()] if end is None else text[pos : m.start()])
        pos = m.end() if end is None else end
    out.append(text[pos:])
    return "".join(out)


def _link_definitions(text: str) -> str:
    lines = text.split("\n")
    in_paragraph = False
    for i, line in enumerate(lines):
        if not in_paragraph and _LINK_DEFINITION.fullmatch(line):
            lines[i] = ""  # a definition may follow another one
            continue
        in_paragraph = bool(line.strip())
    return "\n".join(lines)


def _hidden(text: str) -> str:
    """Text a reader is never shown: hidden HTML elements and markdown link definitions, removed."""
    if "<" in text and _HIDING_HINT.search(text):
        text = _hidden_elements(text)
    return _link_definitions(text) if "]:" in text else text


def _spaced(text: str) -> str:
    if "'" in text and _APOSTROPHE_AFTER_SPACE.search(text):
        text = _SPACED_APOSTROPHE.sub("'", text)  # "I 've" (a thin space NFKC made a space)
    if _SPACED_HINT.search(text):  # every spaced-out word holds " x y ": a literal-first search skips fast
        text = _SPACED_LATIN.sub(lambda m: m.group(0).replace(" ", ""), text)
    return _SPACED_CJK.sub("", text) if not text.isascii() else text


def _markdown(text: str) -> str:
    """Links, code marks, emphasis and line markup (headings, quotes) dropped; the words stay."""
    if "](" in text:
        text = _IMAGE_OR_LINK.sub(r"\1", text)
    if "`" in text or "\u2019" in text or "\u2018" in text:
        text = _APOSTROPHE.sub("'", text)  # before code marks go: I`ve is an apostrophe, `x` is code
        text = _CODE.sub("", text)
    if "*" in text:
        text = _STARS.sub("", text)
    if "_" in text:
        text = _UNDERSCORES.sub("", text)
    if "#" in text or ">" in text:
        text = _LINE_MARKUP.sub("", text)
    return text


def _char_class(codepoints: object) -> str:
    """A regex character class of the given code points, written as ranges."""
    cps = sorted(codepoints)  # type: ignore[call-overload]
    ranges: list[tuple[int, int]] = []
    for cp in cps:
        if ranges and cp == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], cp)
        else:
            ranges.append((cp, cp))
    return (
        "["
        + "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)
        + "]"
    )


class Normaliser:
    """Built once (tables read at start); ``normalise`` is then pure CPU."""

    def __init__(self, known_word: Callable[[str], bool] | None = None) -> None:
        self._t2s = _table("t2s.tsv")
        self._confusable = _table("confusables.tsv")
        self._confusable_chars = frozenset(chr(c) for c in self._confusable)
        # a run of letters that may be a disguised Latin word: Latin (with diacritics) and look-alikes
        self._latinish = re.compile(
            "[A-Za-z\u00c0-\u024f" + "".join(sorted(re.escape(ch) for ch in self._confusable_chars)) + "]+"
        )
        self._drop_rx = re.compile(_char_class(_drop_table()))
        # the same class in the Basic Multilingual Plane only: re tests it by a bitmap, several times faster than
        # the whole class (whose astral ranges are tested one by one); the whole class runs only on a text that
        # holds an astral character at all
        self._drop_bmp = re.compile(_char_class(cp for cp in _drop_table() if cp < 0x10000))
        self._traditional = frozenset(chr(c) for c in self._t2s)
        # as with format characters: the BMP part as one class (a bitmap), the rest only behind an astral gate
        self._traditional_bmp = re.compile(_char_class(c for c in self._t2s if c < 0x10000))
        # a letter that is not plain Latin but may sit in a Latin word: a look-alike or a diacritic
        self._foldable = re.compile(
            "[\u00c0-\u024f" + "".join(sorted(re.escape(ch) for ch in self._confusable_chars)) + "]"
        )
        self._known_word = known_word or (lambda _w: False)
        # every character the format, marks, confusables and traditional steps act on (and any astral one), as one
        # class: a text that holds none skips those four steps after one scan instead of six
        acted_on = {cp for cp in _drop_table() if cp < 0x10000} | set(range(0x300, 0x370)) | set(range(0xC0, 0x250))
        acted_on |= {c for c in (*self._confusable, *self._t2s) if c < 0x10000}
        self._acted_on = re.compile(_char_class(acted_on)[:-1] + "\U00010000-\U0010ffff]")

    def normalise(self, text: str, skip: frozenset[str] = frozenset()) -> str:
        """``text`` as a reader sees it. ``skip`` names steps (STEPS) to leave out: the tests show that each
        step's own sentence is missed without it."""
        # each pass is skipped when a cheap test shows it has nothing to do: most replies are plain text.
        # Markup is read only as a renderer reads it, in its own ASCII characters and before character references
        # are decoded: "&lt;!-- not --&gt;", "～～not～～" and "＜！－－" are text a reader sees, not hidden text.
        if "<" in text and "comments" not in skip:
            text = _COMMENT.sub("", text)
        if ("~" in text or "<" in text) and "struck" not in skip:
            text = _STRUCK.sub("", text)
        if ("<" in text or "]:" in text) and "hidden" not in skip:
            text = _hidden(text)
        if "<" in text and "tags" not in skip:
            text = _BLOCK_TAG.sub("\n", text)
            text = _TAG.sub("", text)
        if "&" in text and "entities" not in skip and _ENTITY.search(text):
            text = html.unescape(text)  # "I&#39;ve", "已&#21024;除", "can&shy;celled"
            if "<" in text and "shown_tags" not in skip:
                # a tag shown as text ("I've &lt;b&gt;deleted&lt;/b&gt; it" shows "<b>deleted</b>") is read past, as
                # the tags around a word are: the words between stay (a shown "&lt;del&gt;not&lt;/del&gt;" is a
                # "not" the user reads), and a shown comment is text (the tag pattern matches no "<!--")
                text = _TAG.sub("", text)
        plain = True  # no character the format, marks, confusables or traditional steps act on
        if not text.isascii():
            if "nfkc" not in skip:
                if _WIDE_FORMS.search(text):
                    text = _WIDE_FORMS.sub(_wide, text)
                if not unicodedata.is_normalized("NFKC", text):
                    text = unicodedata.normalize("NFKC", text)
            plain = self._acted_on.search(text) is None  # (the markdown step adds no character: it stays so)
        if not plain:
            if "format" not in skip and (
                self._drop_bmp.search(text) or (_ASTRAL.search(text) and self._drop_rx.search(text))
            ):
                text = self._drop_rx.sub("", text)
            if "marks" not in skip and _MARKS.search(text):
                text = _OVERLAY.sub("", text)  # a letter under a strike overlay is struck
                text = _MARKS.sub("", text)
        if "markdown" not in skip:
            text = _markdown(text)
        if not plain and not text.isascii():
            if "confusables" not in skip and self._foldable.search(text):
                text = self._latinish.sub(self._fold_word, text)
            if "traditional" not in skip and (
                self._traditional_bmp.search(text) or (_ASTRAL.search(text) and not self._traditional.isdisjoint(text))
            ):
                text = text.translate(self._t2s)
        if ("\n" in text or "\r" in text) and "lines" not in skip:
            text = self._join_lines(text)
        if " " in text and "spacing" not in skip:
            text = _spaced(text)
        return text

    def _fold_word(self, m: re.Match[str]) -> str:
        word = m.group(0)
        if word.isascii():
            return word
        if any("a" <= c <= "z" or "A" <= c <= "Z" for c in word):
            word = word.translate(self._confusable)  # "dеleted" with a Cyrillic е
        elif all(ord(c) in self._confusable for c in word):
            folded = word.translate(self._confusable)  # "ᴅᴇʟᴇᴛᴇᴅ", "ԁеlеtеd": look-alikes only
            if self._known_word(folded.lower()) or all(unicodedata.name(c, "").startswith("LATIN") for c in word):
                return folded
        if not word.isascii():  # "déleted": a diacritic laid on an English word
            bare = "".join(c for c in unicodedata.normalize("NFD", word) if not unicodedata.combining(c))
            if bare.isascii() and self._known_word(bare.lower()):
                return bare
        return word

    def _join_lines(self, text: str) -> str:
        lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        out = [lines[0]]
        for line in lines[1:]:
            prev = out[-1]
            if not prev.strip() and len(out) > 1 and _goes_on_across_a_blank_line(out[-2], line):
                out.pop()  # "I haven't\n\ncancelled it": one sentence cut by an empty line reads on
                prev = out[-1]
            if (
                not prev.strip()
                or not line.strip()
                or prev.rstrip()[-1:] in _LINE_END_CHARS
                or _NEW_LINE_UNIT.match(line)
            ):
                out.append(line)
                continue
            a, b = prev.rstrip(), line.lstrip()
            if _CJK.match(a[-1]) and _CJK.match(b[0]):
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
