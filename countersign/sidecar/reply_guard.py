"""The reply guard (DESIGN §2 I5 "no receipt, no success", §9): a pure detector of success claims.

``ReplyGuard.check(reply, locale, evidence)`` finds confident success claims ("已经帮你创建", "笔记已经删除",
"✅ 已成功保存", "I've created", "has been deleted", "Done!") and replaces the reply with a deterministic
sentence in the caller's locale unless every claim is backed by a succeeded receipt of a matching verb.
No Redis, no gRPC, no I/O after ``load``; ``check`` never raises.

The lexicon is data: one YAML file per language in ``countersign/guard/`` (``zh.yaml``, ``en.yaml``), all of
them applied to every reply; only the replacement sentence follows the caller's locale. A file holds::

    ignore_case: true|false        # compile this file's regexes with re.IGNORECASE
    define:                        # optional fragments; a pattern says {{name}} to use one
      name: 'regex fragment'
    claims:                        # verb -> regexes that match a confident success claim of that verb
      create: [...]                # verbs: create, add, delete, save, update, complete, send (others allowed),
      generic: [...]               # and ``generic`` ("操作已完成", "Done!") that any succeeded receipt backs
    not_a_claim:                   # regexes that cancel a claim in the same clause part
      preceding: [...]             #   when found between the part's start and the claim's end (negation,
                                   #   pending, conditional, question openers: "没能", "once you confirm")
      anywhere: [...]              #   when found anywhere in the part ("删除失败", a part ending in "?")
    scope_breaks: [...]            # words that end a clause part (besides , ， 、 : ： — …): "but", "但是"
    replacement:                   # the deterministic sentence per reason
      NO_SUCCEEDED_RECEIPT: '...'
      CLAIM_CONTRADICTS_RECEIPT: '...'

How a reply is read:

1. At most 16 KB is scanned: the first and last 8 KB of a longer reply (the explanation says so).
2. The text is cut into clauses at 。！？!?；; newlines and ". "; claim regexes are searched in each clause
   (``^``/``$`` are the clause's ends). A claim regex only runs on a clause that holds every literal the regex
   cannot match without (derived from the parsed regex at load): most clauses of a reply run no regex at all.
3. A clause is cut into parts at commas, colons, dashes and the lexicons' ``scope_breaks``; a claim is
   cancelled by a ``preceding`` match in its part before the claim ends, or an ``anywhere`` match in its part
   ("已经创建好了，但没有设置提醒" stays a claim: the negation is in another part).
4. Each remaining claim's verb must be backed by a succeeded ``Evidence`` whose verbs back it (``BACKED_BY``;
   ``generic`` is backed by any succeeded evidence). All backed: BACKED_BY_RECEIPT. Otherwise, when there is
   evidence (a failed receipt, or a succeeded one of other verbs): CLAIM_CONTRADICTS_RECEIPT; when there is
   none: NO_SUCCEEDED_RECEIPT. No claim: NO_CLAIM. ``Evidence`` is a settled receipt of the same request or of
   the named actions; the caller selects it.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import yaml

VERBS = frozenset({"create", "delete", "add", "save", "update", "complete", "send"})
GENERIC = "generic"
REASONS = ("NO_CLAIM", "BACKED_BY_RECEIPT", "NO_SUCCEEDED_RECEIPT", "CLAIM_CONTRADICTS_RECEIPT")
REPLACED_REASONS = ("NO_SUCCEEDED_RECEIPT", "CLAIM_CONTRADICTS_RECEIPT")
SCAN_LIMIT = 16 * 1024
DEFAULT_LEXICON = "en"

# Which receipt verbs back a claim verb (a verb not listed is backed only by itself; generic by any).
BACKED_BY: Mapping[str, frozenset[str]] = {
    "create": frozenset({"create", "add"}),
    "add": frozenset({"add", "create"}),
    "delete": frozenset({"delete"}),
    "save": frozenset({"save", "create", "update"}),
    "update": frozenset({"update", "save"}),
    "complete": frozenset({"complete", "update"}),
    "send": frozenset({"send"}),
}

_CLAUSE_END = re.compile(r"[。！？!?；;\n\r]+|\.+(?=\s|$)")
_CLAUSE_END_CHARS = frozenset("。！？!?；;\n\r.")
# The same ends, written to start with a character class (so re skips ahead fast): the first clause end after
# a position, and, in the reversed text, the last one before it. tests/test_reply_guard.py checks they agree.
_CLAUSE_END_AFTER = re.compile(r"[。！？!?；;\n\r.](?:(?<=[^.])[。！？!?；;\n\r]*|(?<=\.)\.*(?=\s|$))")
_CLAUSE_END_REVERSED = re.compile(r"[。！？!?；;\n\r.](?<!(?<!\s)\.)")
_BASE_BREAK = r"[,，、:：—–…]+"
_DEFINE_REF = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}")
_BACKREF = re.compile(r"\\[1-9]|\(\?P=")
_TOP_KEYS = {"ignore_case", "define", "claims", "not_a_claim", "scope_breaks", "replacement"}
_CANCEL_KEYS = {"preceding", "anywhere"}
_VERB_NAME = re.compile(r"^[a-z][a-z_]*$")


class _Resource(Protocol):
    """The part of ``importlib.resources.abc.Traversable`` that ``load`` needs."""

    @property
    def name(self) -> str: ...

    def is_file(self) -> bool: ...

    def iterdir(self) -> Iterable[_Resource]: ...

    def read_text(self, encoding: str | None = None) -> str: ...


@dataclass(frozen=True)
class Evidence:
    """One receipt the sidecar trusts (built by the caller from a stored, settled Action)."""

    action_id: str
    tool_name: str
    succeeded: bool  # receipt status SUCCEEDED
    verbs: frozenset[str]  # what the tool does: subset of VERBS


@dataclass(frozen=True)
class Verdict:
    replaced: bool
    text: str  # the original reply, or the deterministic replacement
    matched_claims: tuple[str, ...]  # the exact substrings that were read as success claims
    reason: str  # NO_CLAIM, BACKED_BY_RECEIPT, NO_SUCCEEDED_RECEIPT, CLAIM_CONTRADICTS_RECEIPT
    explanation: str  # one human sentence for the agent's logs


@dataclass(frozen=True)
class _Pattern:
    lexicon: str
    verb: str
    source: str
    regex: re.Pattern[str]
    ignore_case: bool
    need: _Need | None  # what wakes it: one of these literals is in every match; None: it runs on every clause
    requires: tuple[tuple[int, _Need], ...]  # (id, need): everything a match contains, checked on a woken clause
    word_keys: tuple[frozenset[bytes], ...] = field(init=False, compare=False, repr=False)
    finders: tuple[tuple[int, re.Pattern[str], bool], ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "word_keys", tuple(n.keys for _i, n in self.requires if n.words))
        object.__setattr__(self, "finders", tuple(
            (i, n.finder, n.ignore_case) for i, n in self.requires if not n.words and n.finder is not None))


@dataclass(frozen=True)
class _Lexicon:
    name: str
    replacements: Mapping[str, str]


@dataclass(frozen=True)
class _Claim:
    start: int  # offsets in the scanned text
    end: int
    verb: str
    text: str


# --------------------------------------------------------------------------------------------- verbs_of

_TOKEN_VERBS: Mapping[str, frozenset[str]] = {
    "create": frozenset({"create"}),
    "new": frozenset({"create"}),
    "add": frozenset({"create", "add"}),
    "insert": frozenset({"create", "add"}),
    "upsert": frozenset({"create", "update"}),
    "delete": frozenset({"delete"}),
    "remove": frozenset({"delete"}),
    "del": frozenset({"delete"}),
    "destroy": frozenset({"delete"}),
    "erase": frozenset({"delete"}),
    "purge": frozenset({"delete"}),
    "trash": frozenset({"delete"}),
    "set": frozenset({"update"}),
    "update": frozenset({"update"}),
    "edit": frozenset({"update"}),
    "rename": frozenset({"update"}),
    "modify": frozenset({"update"}),
    "change": frozenset({"update"}),
    "patch": frozenset({"update"}),
    "move": frozenset({"update"}),
    "reschedule": frozenset({"update"}),
    "mark": frozenset({"update"}),
    "complete": frozenset({"complete"}),
    "finish": frozenset({"complete"}),
    "done": frozenset({"complete"}),
    "close": frozenset({"complete"}),
    "save": frozenset({"save"}),
    "store": frozenset({"save"}),
    "send": frozenset({"send"}),
    "email": frozenset({"send"}),
    "mail": frozenset({"send"}),
    "notify": frozenset({"send"}),
    "message": frozenset({"send"}),
    "forward": frozenset({"send"}),
}
_ANYWHERE_TOKENS = ("done", "complete", "finish")
# a name's last word counts only when it is unmistakably a verb ("todo_create", not "get_email")
_LAST_TOKENS = frozenset({"create", "add", "insert", "upsert", "delete", "remove", "destroy", "erase", "purge",
                          "update", "edit", "rename", "modify", "reschedule", "complete", "finish", "save", "send",
                          "notify"})
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def verbs_of(tool_name: str) -> frozenset[str]:
    """What a tool does, from its name: ``create_todo`` → {create}, ``add_item`` → {create, add},
    ``delete_note``/``remove_x`` → {delete}, ``set_``/``update_``/``edit_``/``rename_`` → {update},
    ``complete_``/``finish_``/``mark_done`` → {complete}, ``save_`` → {save}, ``send_``/``email_``/``notify_`` →
    {send}. The verb is the name's first word (after any ``ns.``/``ns/`` prefix), else its last word
    (``todo_create``); "done"/"complete"/"finish" count anywhere. Unknown: the empty set."""
    if not isinstance(tool_name, str) or not tool_name:
        return frozenset()
    last = re.split(r"[./:]", tool_name)[-1]
    tokens = [t for t in _NON_ALNUM.split(_CAMEL.sub("_", last).lower()) if t]
    if not tokens:
        return frozenset()
    verbs = set(_TOKEN_VERBS.get(tokens[0], ()))
    if not verbs and tokens[-1] in _LAST_TOKENS:
        verbs.update(_TOKEN_VERBS[tokens[-1]])
    for token in tokens:
        if token in _ANYWHERE_TOKENS:
            verbs.update(_TOKEN_VERBS[token])
    return frozenset(verbs)


# ------------------------------------------------------------------------------ literal extraction
#
# Each claim regex is only run where it could match: at load, its parsed form gives a set of literals one of
# which every match contains. Whole ASCII words bounded by \b, \s or ^/$ are looked up in a word index of the
# reply (one bytes pass); other literals are found by one alternation scan per case mode. Both are supersets:
# they may wake a regex that then does not match, never the reverse (a hypothesis test checks this).


def _sre_parser() -> Any:
    for name in ("re._parser", "sre_parse"):
        try:
            return importlib.import_module(name)
        except ImportError:  # pragma: no cover - depends on the Python version
            continue
    return None  # pragma: no cover


_PARSER = _sre_parser()
_PRODUCT_LIMIT = 16
_WORD_CHAR = re.compile(r"\w")
_WORD_LITERAL = re.compile(r"[a-z0-9_]+")
# Non-ASCII characters that re.IGNORECASE matches to an ASCII letter (Python 3.11-3.13; a test re-derives them).
ODD_CASE_CHARS: Mapping[str, str] = {"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"}
# bytes of a UTF-8 reply -> word bytes kept (ASCII letters lowered), everything else a space
_WORD_TABLE = bytes(
    (c | 0x20 if 65 <= c <= 90 else c) if (48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122 or c == 95) else 32
    for c in range(256)
)


def _trie(literals: Iterable[str]) -> str:
    """A regex matching the longest of ``literals`` at a position: one branch per first character."""
    root: dict[str, Any] = {}
    for lit in literals:
        node = root
        for ch in lit:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        alternatives = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if not alternatives:
            return ""
        body = alternatives[0] if len(alternatives) == 1 else "(?:" + "|".join(alternatives) + ")"
        return f"(?:{body})?" if "" in node else body

    return emit(root)


@dataclass(frozen=True)
class _Need:
    literals: tuple[str, ...]  # one of these occurs in every match (lower-cased when the regex ignores case)
    words: bool  # each is a whole ASCII word in every match: found through the word index
    ignore_case: bool

    keys: frozenset[bytes] = field(init=False, compare=False, repr=False)  # the word-index keys
    finder: re.Pattern[str] | None = field(init=False, compare=False, repr=False)  # the literals, as one regex

    def __post_init__(self) -> None:
        keys = frozenset(s.lower().encode("ascii") for s in self.literals) if self.words else frozenset()
        object.__setattr__(self, "keys", keys)
        object.__setattr__(self, "finder", None if self.words else re.compile(_trie(self.literals)))


def _fold_safe(ch: str) -> bool:
    """A literal character of a case-insensitive regex that lower-casing maps the way re does."""
    if ch.isascii():
        return True
    return ch.lower() == ch and ch.upper() == ch and ch.casefold() == ch


def _repeat_ops() -> tuple[Any, ...]:
    p = _PARSER
    return tuple(getattr(p, n) for n in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") if hasattr(p, n))


def _nonword_op(op: Any, av: Any) -> bool:
    """A one-character op that can only match a non-word character."""
    p = _PARSER
    if op is p.LITERAL:
        return _WORD_CHAR.match(chr(av)) is None
    if op is p.IN and av:
        for o, a in av:
            if o is p.LITERAL:
                if _WORD_CHAR.match(chr(a)) is not None:
                    return False
            elif o is p.CATEGORY:
                if a not in (p.CATEGORY_SPACE, p.CATEGORY_NOT_WORD):
                    return False
            else:
                return False
        return True
    return False


def _edge_nonword(seq: list[Any], j: int, step: int, outside: bool) -> bool:
    """Whether the first character ``seq[j:]`` (step +1) or ``seq[:j+1]`` read backwards (step -1) produces is
    certainly a non-word one; ``outside`` answers for running off the end of ``seq``."""
    p = _PARSER
    while 0 <= j < len(seq):
        op, av = seq[j]
        if op is p.ASSERT or op is p.ASSERT_NOT:
            j += step
            continue
        if op is p.AT:
            ats = (p.AT_BOUNDARY, p.AT_BEGINNING, p.AT_BEGINNING_STRING) if step < 0 else (
                p.AT_BOUNDARY, p.AT_END, p.AT_END_STRING)
            return bool(av in ats)
        if op is p.LITERAL or op is p.IN:
            return _nonword_op(op, av)
        rest = _edge_nonword(seq, j + step, step, outside)
        if op in _repeat_ops():
            body = list(av[2].data)
            first = _edge_nonword(body, 0 if step > 0 else len(body) - 1, step, rest)
            return first if av[0] >= 1 else first and rest
        if op is p.SUBPATTERN:
            body = list(av[3].data)
            return _edge_nonword(body, 0 if step > 0 else len(body) - 1, step, rest)
        if op is p.BRANCH:
            return all(_edge_nonword(list(b.data), 0 if step > 0 else len(b.data) - 1, step, rest) for b in av[1])
        return False
    return outside


def _bounded(seq: list[Any], k: int, step: int, outside: bool) -> bool:
    """Whether the character next to op ``k`` (before it: step -1, after it: +1) is a non-word one or an end."""
    return _edge_nonword(seq, k + step, step, outside)


def _exact(seq: list[Any], ignore_case: bool) -> set[str] | None:
    """The finite set of strings ``seq`` matches (lower-cased for IGNORECASE), or None when it is not small."""
    p = _PARSER
    out = {""}
    for op, av in seq:
        part: set[str] | None = None
        if op is p.LITERAL:
            ch = chr(av)
            if ignore_case and not _fold_safe(ch):
                return None
            part = {ch.lower() if ignore_case else ch}
        elif op is p.IN and av and all(o is p.LITERAL for o, _ in av):
            chars = {chr(c) for _, c in av}
            if ignore_case and not all(_fold_safe(c) for c in chars):
                return None
            part = {c.lower() for c in chars} if ignore_case else chars
        elif op is p.BRANCH:
            part = set()
            for branch in av[1]:
                alt = _exact(list(branch.data), ignore_case)
                if alt is None:
                    return None
                part |= alt
        elif op is p.SUBPATTERN and not av[1] and not av[2]:
            part = _exact(list(av[3].data), ignore_case)
        if part is None or len(out) * len(part) > _PRODUCT_LIMIT:
            return None
        out = {a + b for a in out for b in part}
    return out


def _best(candidates: Sequence[_Need]) -> _Need | None:
    good = [c for c in candidates if c.literals and all(c.literals)]
    if not good:
        return None
    return max(good, key=lambda c: (c.words, min(len(s) for s in c.literals),
                                    sum(len(s) for s in c.literals) / len(c.literals), -len(c.literals)))


def _needs_in(seq: list[Any], ignore_case: bool, left: bool, right: bool) -> list[_Need]:
    """Everything every match of ``seq`` contains: its contiguous literal runs and what its mandatory
    sub-expressions require (each an any-of set). ``left``/``right``: the context outside ``seq`` is a
    non-word character or an end."""
    p = _PARSER
    candidates: list[_Need] = []
    run: set[str] = {""}
    run_start = 0

    def flush(end: int) -> None:
        if run != {""} and all(run):
            words = (_bounded(seq, run_start, -1, left) and _bounded(seq, end - 1, 1, right)
                     and all(_WORD_LITERAL.fullmatch(s.lower()) for s in run))
            candidates.append(_Need(tuple(sorted(run)), words, ignore_case))

    for k, (op, av) in enumerate(seq):
        exact = _exact([(op, av)], ignore_case)
        if exact is not None and "" not in exact:
            if run == {""}:
                run_start = k
            if len(run) * len(exact) <= _PRODUCT_LIMIT:
                run = {a + b for a in run for b in exact}
            else:
                flush(k)
                run, run_start = exact, k
            continue
        flush(k)
        run = {""}
        sub_left, sub_right = _bounded(seq, k, -1, left), _bounded(seq, k, 1, right)
        if op is p.SUBPATTERN:
            _group, add_flags, del_flags, body = av
            if not add_flags and not del_flags:
                candidates.extend(_needs_in(list(body.data), ignore_case, sub_left, sub_right))
        elif op is p.BRANCH:
            alternatives = [_best(_needs_in(list(b.data), ignore_case, sub_left, sub_right)) for b in av[1]]
            if alternatives and all(a is not None for a in alternatives):
                needs = [a for a in alternatives if a is not None]
                candidates.append(_Need(tuple(sorted({s for a in needs for s in a.literals})),
                                        all(a.words for a in needs), ignore_case))
        elif op in _repeat_ops() and av[0] >= 1:
            body = list(av[2].data)
            if av[1] != 1:  # a repetition also borders on the body's own other end
                sub_left, sub_right = (sub_left and _edge_nonword(body, len(body) - 1, -1, False),
                                       sub_right and _edge_nonword(body, 0, 1, False))
            candidates.extend(_needs_in(body, ignore_case, sub_left, sub_right))
        elif hasattr(p, "ATOMIC_GROUP") and op is p.ATOMIC_GROUP:
            candidates.extend(_needs_in(list(av.data), ignore_case, sub_left, sub_right))
    flush(len(seq))
    return candidates


def _required_literals(source: str, flags: int) -> tuple[_Need | None, tuple[_Need, ...]]:
    """What every match of ``source`` contains: the best single need (it wakes the regex) and all of them
    (each is checked on a woken clause before the regex runs). (None, ()) when nothing can be derived."""
    if _PARSER is None:  # pragma: no cover
        return None, ()
    try:
        parsed = _PARSER.parse(source, flags)
        ignore_case = bool((flags | parsed.state.flags) & re.IGNORECASE)  # an inline (?i) counts too
        needs = _needs_in(list(parsed.data), ignore_case, False, False)
    except Exception:  # pragma: no cover - an unexpected parser shape only costs speed
        return None, ()
    best = _best(needs)
    if best is None:
        return None, ()
    # cheapest checks first: word sets, then few literals
    ordered = sorted(set(needs), key=lambda n: (not n.words, len(n.literals)))
    return best, tuple(ordered)


# ------------------------------------------------------------------------------------------- loading

def _expand(source: str, defines: Mapping[str, str], where: str) -> str:
    for _ in range(8):
        if "{{" not in source:
            return source

        def sub(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in defines:
                raise ValueError(f"{where}: unknown define {{{{{name}}}}}")
            return f"(?:{defines[name]})"

        source = _DEFINE_REF.sub(sub, source)
    raise ValueError(f"{where}: defines nest too deep")


def _compile(source: object, flags: int, where: str) -> re.Pattern[str]:
    if not isinstance(source, str) or not source:
        raise ValueError(f"{where}: a pattern must be a non-empty string")
    if _BACKREF.search(source):
        raise ValueError(f"{where}: backreferences are not allowed: {source!r}")
    try:
        compiled = re.compile(source, flags)
    except re.error as exc:
        raise ValueError(f"{where}: bad regex {source!r}: {exc}") from exc
    if compiled.groupindex:
        raise ValueError(f"{where}: named groups are not allowed: {source!r}")
    return compiled


def _str_list(value: object, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where}: expected a list of strings")
    return list(value)


def _combine(parts: list[tuple[str, bool]]) -> re.Pattern[str] | None:
    if not parts:
        return None
    return re.compile("|".join(f"(?i:{s})" if ic else f"(?:{s})" for s, ic in parts))


@dataclass(frozen=True)
class _Group:
    """Claim regexes woken by the same literals."""

    patterns: tuple[_Pattern, ...]


@dataclass(frozen=True)
class _Scan:
    """One alternation of literals (a trie), searched over the reply (or its lower-cased copy)."""

    regex: re.Pattern[str]
    groups: Mapping[str, tuple[int, ...]]  # a literal the scan finds -> the groups it wakes (its prefixes' too)


def _scan(literal_groups: Mapping[str, set[int]]) -> _Scan | None:
    if not literal_groups:
        return None
    literals = sorted(literal_groups)
    woken = {lit: tuple(sorted({g for other in literals if lit.startswith(other) for g in literal_groups[other]}))
             for lit in literals}
    return _Scan(re.compile(_trie(literals)), woken)


def _words_of(text: str, known: frozenset[bytes], odd: bool = True) -> frozenset[bytes]:
    """The lexicon words (``known``) that ``text`` holds as whole ASCII words, lower-cased: a superset of what
    a \\b-bounded literal can match. ``odd=False``: the caller knows ``text`` holds none of ODD_CASE_CHARS."""
    if odd:
        for ch, plain in ODD_CASE_CHARS.items():
            if ch in text:
                text = text.replace(ch, plain)
    return known.intersection(text.encode("utf-8", "surrogatepass").translate(_WORD_TABLE).split())


class ReplyGuard:
    """Detects success claims in a reply and decides whether the receipts back them (pure, thread-safe)."""

    def __init__(
        self,
        lexicons: Mapping[str, _Lexicon],
        patterns: Sequence[_Pattern],
        preceding: re.Pattern[str] | None,
        anywhere: re.Pattern[str] | None,
        breaks: re.Pattern[str],
    ) -> None:
        self._lexicons = dict(lexicons)
        self._patterns = tuple(patterns)
        self._preceding = preceding
        self._anywhere = anywhere
        self._breaks = breaks
        by_need: dict[tuple[bool, _Need | None], list[_Pattern]] = {}
        for pat in self._patterns:
            by_need.setdefault((pat.need.ignore_case if pat.need else pat.ignore_case, pat.need), []).append(pat)
        groups: list[_Group] = []
        words: dict[bytes, set[int]] = {}
        word_literals: dict[bytes, str] = {}
        exact: dict[str, set[int]] = {}
        folded: dict[str, set[int]] = {}
        unfiltered: list[int] = []
        for (ignore_case, need), pats in by_need.items():
            gi = len(groups)
            groups.append(_Group(tuple(pats)))
            if need is None:
                unfiltered.append(gi)
            elif need.words:
                for lit in need.literals:
                    key = lit.lower().encode("ascii")
                    words.setdefault(key, set()).add(gi)
                    word_literals[key] = lit.lower()
            else:
                bucket = folded if ignore_case else exact
                for lit in need.literals:
                    bucket.setdefault(lit, set()).add(gi)
        self._groups = tuple(groups)
        self._known_words = frozenset(k for p in self._patterns for keys in p.word_keys for k in keys)
        self._words = {k: tuple(sorted(v)) for k, v in words.items()}
        self._word_keys = frozenset(self._words)
        self._word_literals = word_literals
        self._exact_scan = _scan(exact)
        self._folded_scan = _scan(folded)
        self._unfiltered = tuple(unfiltered)

    @property
    def lexicons(self) -> tuple[str, ...]:
        return tuple(sorted(self._lexicons))

    @property
    def pattern_count(self) -> int:
        return len(self._patterns)

    @property
    def unfiltered_patterns(self) -> tuple[str, ...]:
        """Claim regexes with no derivable literal: they run on every clause (slower, still correct)."""
        return tuple(p.source for p in self._patterns if p.need is None)

    # ---------------------------------------------------------------------------------------- load

    @classmethod
    def load(cls, directory: str | Path | None = None) -> ReplyGuard:
        """Load every ``*.yaml`` lexicon of ``directory`` (default: the packaged ``countersign/guard/``).

        Raises ValueError naming the file and the problem (bad regex, unknown key, missing replacement)."""
        root: _Resource = (
            resources.files("countersign").joinpath("guard") if directory is None else Path(directory)
        )
        files = sorted((f for f in root.iterdir() if f.is_file() and f.name.endswith(".yaml")), key=lambda f: f.name)
        if not files:
            raise ValueError(f"{root}: no *.yaml lexicon")
        lexicons: dict[str, _Lexicon] = {}
        patterns: list[_Pattern] = []
        preceding: list[tuple[str, bool]] = []
        anywhere: list[tuple[str, bool]] = []
        breaks: list[tuple[str, bool]] = [(_BASE_BREAK, False)]
        need_ids: dict[_Need, int] = {}
        for f in files:
            name = f.name[: -len(".yaml")]
            where = f.name
            try:
                raw = yaml.safe_load(f.read_text(encoding="utf-8"))
            except yaml.YAMLError as exc:
                raise ValueError(f"{where}: not YAML: {exc}") from exc
            if not isinstance(raw, dict):
                raise ValueError(f"{where}: expected a mapping")
            unknown = set(raw) - _TOP_KEYS
            if unknown:
                raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
            ignore_case = raw.get("ignore_case", False)
            if not isinstance(ignore_case, bool):
                raise ValueError(f"{where}: ignore_case must be true or false")
            flags = re.IGNORECASE if ignore_case else 0
            defines = raw.get("define") or {}
            if not isinstance(defines, dict) or not all(isinstance(v, str) for v in defines.values()):
                raise ValueError(f"{where}: define must map names to regex fragments")

            claims = raw.get("claims") or {}
            if not isinstance(claims, dict):
                raise ValueError(f"{where}: claims must map a verb to a list of regexes")
            for verb, sources in claims.items():
                if not isinstance(verb, str) or not _VERB_NAME.match(verb):
                    raise ValueError(f"{where}: bad verb {verb!r}")
                for i, src in enumerate(_str_list(sources, f"{where}: claims.{verb}")):
                    spot = f"{where}: claims.{verb}[{i}]"
                    expanded = _expand(src, defines, spot)
                    regex = _compile(expanded, flags, spot)
                    need, requires = _required_literals(expanded, flags)
                    ids = tuple((need_ids.setdefault(r, len(need_ids)), r) for r in requires)
                    patterns.append(_Pattern(name, verb, src, regex, ignore_case, need, ids))

            cancel = raw.get("not_a_claim") or {}
            if not isinstance(cancel, dict) or set(cancel) - _CANCEL_KEYS:
                raise ValueError(f"{where}: not_a_claim must have only the keys {sorted(_CANCEL_KEYS)}")
            for key, bucket in (("preceding", preceding), ("anywhere", anywhere)):
                for i, src in enumerate(_str_list(cancel.get(key), f"{where}: not_a_claim.{key}")):
                    spot = f"{where}: not_a_claim.{key}[{i}]"
                    expanded = _expand(src, defines, spot)
                    _compile(expanded, flags, spot)
                    bucket.append((expanded, ignore_case))
            for i, src in enumerate(_str_list(raw.get("scope_breaks"), f"{where}: scope_breaks")):
                spot = f"{where}: scope_breaks[{i}]"
                expanded = _expand(src, defines, spot)
                _compile(expanded, flags, spot)
                breaks.append((expanded, ignore_case))

            replacement = raw.get("replacement") or {}
            if not isinstance(replacement, dict):
                raise ValueError(f"{where}: replacement must map a reason to a sentence")
            for reason in REPLACED_REASONS:
                if not isinstance(replacement.get(reason), str) or not replacement[reason].strip():
                    raise ValueError(f"{where}: replacement.{reason} is missing")
            lexicons[name] = _Lexicon(name, {r: replacement[r].strip() for r in REPLACED_REASONS})
        # wake each regex by its most telling need: long literals, then literals few other regexes need
        # ("创建" rather than "完成", which a read-only answer says as often as a claim)
        popularity: dict[tuple[str, ...], int] = {}
        for pat in patterns:
            for lits in {n.literals for _i, n in pat.requires}:
                popularity[lits] = popularity.get(lits, 0) + 1
        patterns = [
            pat if pat.need is None else replace(pat, need=max(
                (n for _i, n in pat.requires if n.literals and all(n.literals)),
                key=lambda n: (n.words, min(4, *(len(x) for x in n.literals)), -popularity[n.literals],
                               sum(len(x) for x in n.literals) / len(n.literals), -len(n.literals))))
            for pat in patterns]
        try:  # a regex with a global inline flag such as (?i) in the middle cannot join an alternation
            combined = [_combine(preceding), _combine(anywhere), _combine(breaks)]
        except re.error as exc:
            raise ValueError(f"not_a_claim/scope_breaks: cannot combine the regexes (use (?i:...), not (?i)): {exc}"
                             ) from exc
        assert combined[2] is not None
        return cls(lexicons, patterns, combined[0], combined[1], combined[2])

    # --------------------------------------------------------------------------------------- check

    def lexicon_for(self, locale: object) -> str:
        """The lexicon whose replacement a caller's locale gets: "zh-CN"/"zh-TW"/"zh" → zh, else en."""
        if isinstance(locale, str):
            primary = re.split(r"[-_]", locale.strip().lower(), maxsplit=1)[0]
            if primary in self._lexicons:
                return primary
        if DEFAULT_LEXICON in self._lexicons:
            return DEFAULT_LEXICON
        return min(self._lexicons)

    def check(self, reply: str, locale: str, evidence: Sequence[Evidence]) -> Verdict:
        """The verdict on one reply. Never raises: an internal error fails closed unless a receipt succeeded."""
        text = reply if isinstance(reply, str) else ("" if reply is None else str(reply))
        try:
            return self._check(text, locale, evidence)
        except Exception as exc:  # pragma: no cover - defensive: check must never raise
            evs = _evidence(evidence)
            if any(e.succeeded for e in evs):
                return Verdict(False, text, (), "BACKED_BY_RECEIPT",
                               f"Reply guard error ({type(exc).__name__}); passed because a receipt succeeded.")
            lex = self._lexicons[self.lexicon_for(locale)]
            return Verdict(True, lex.replacements["NO_SUCCEEDED_RECEIPT"], (), "NO_SUCCEEDED_RECEIPT",
                           f"Reply guard error ({type(exc).__name__}); replaced because no receipt succeeded.")

    def _check(self, reply: str, locale: str, evidence: Sequence[Evidence]) -> Verdict:
        truncated = len(reply) > SCAN_LIMIT
        scanned = reply[: SCAN_LIMIT // 2] + "\n" + reply[-(SCAN_LIMIT // 2):] if truncated else reply
        note = (f" Only the first and last {SCAN_LIMIT // 2048} KB of this {len(reply)}-character reply were scanned."
                if truncated else "")
        claims, cancelled = self._claims(scanned)
        if not claims:
            extra = ""
            if cancelled:
                shown = "; ".join(f"{c!r} cancelled by {w!r}" for c, w in cancelled[:3])
                extra = f" ({len(cancelled)} candidate(s) not read as claims: {shown})"
            return Verdict(False, reply, (), "NO_CLAIM", f"No confident success claim found{extra}.{note}")

        evs = _evidence(evidence)
        succeeded = [e for e in evs if e.succeeded]
        matched = tuple(c.text for c in claims)
        backing: list[str] = []
        unbacked: list[_Claim] = []
        for c in claims:
            allowed = BACKED_BY.get(c.verb, frozenset({c.verb}))
            by = next((e for e in succeeded if c.verb == GENERIC or e.verbs & allowed), None)
            if by is None:
                unbacked.append(c)
            else:
                backing.append(f"{c.text!r} ({c.verb}) by {by.action_id} {by.tool_name}")
        if not unbacked:
            return Verdict(False, reply, matched, "BACKED_BY_RECEIPT",
                           f"Every success claim is backed by a succeeded receipt: {'; '.join(backing)}.{note}")
        lex = self._lexicons[self.lexicon_for(locale)]
        said = ", ".join(f"{c.text!r} ({c.verb})" for c in unbacked)
        if evs:
            receipts = ", ".join(
                f"{e.action_id} {e.tool_name} {'SUCCEEDED' if e.succeeded else 'not succeeded'}"
                f" [{','.join(sorted(e.verbs)) or '-'}]" for e in evs[:5])
            reason = "CLAIM_CONTRADICTS_RECEIPT"
            why = (f"Claim {said} is not backed by a succeeded receipt of a matching verb; the receipts say: "
                   f"{receipts}; reply replaced.{note}")
        else:
            reason = "NO_SUCCEEDED_RECEIPT"
            why = f"Claim {said} has no succeeded receipt in this request; reply replaced.{note}"
        return Verdict(True, lex.replacements[reason], matched, reason, why)

    # ------------------------------------------------------------------------------------ detection

    def _wake(self, text: str) -> tuple[dict[int, set[int]], set[int], dict[int, tuple[_Pattern, ...]], bool]:
        """Where the literals are: position -> the groups a literal there wakes; the groups that must run on
        every clause (no literal, or a lower-cased copy whose offsets do not line up with ``text``); for each
        woken group, its regexes whose word needs are all in ``text``; whether ``text`` holds ODD_CASE_CHARS."""
        at: dict[int, set[int]] = {}
        everywhere = set(self._unfiltered)
        lowered: str | None = None
        aligned = True
        odd = any(c in text for c in ODD_CASE_CHARS)
        words = _words_of(text, self._known_words, odd)
        alive: dict[int, tuple[_Pattern, ...]] = {}
        living: dict[tuple[int, ...], tuple[int, ...]] = {}

        def live(groups: tuple[int, ...]) -> tuple[int, ...]:
            out = living.get(groups)
            if out is None:
                for gi in groups:
                    if gi not in alive:
                        alive[gi] = self._alive(gi, words)
                out = living[groups] = tuple(gi for gi in groups if alive[gi])
            return out

        present = self._word_keys.intersection(words)
        if present:
            lowered = text.lower()
            aligned = len(lowered) == len(text) and not odd
            for key in present:
                groups = live(self._words[key])
                if not groups:
                    continue
                if not aligned:
                    everywhere.update(groups)
                    continue
                lit = self._word_literals[key]
                i = lowered.find(lit)
                while i >= 0:
                    at.setdefault(i, set()).update(groups)
                    i = lowered.find(lit, i + 1)
        for scan, on_lowered in ((self._exact_scan, False), (self._folded_scan, True)):
            if scan is None:
                continue
            if on_lowered and lowered is None:
                lowered = text.lower()
                aligned = len(lowered) == len(text) and not odd
            haystack = lowered if on_lowered and lowered is not None else text
            if on_lowered and odd:  # what re.IGNORECASE reads as an ASCII letter (offsets no longer line up)
                for ch, plain in ODD_CASE_CHARS.items():
                    haystack = haystack.replace(ch.lower(), plain)
            search = scan.regex.search
            m = search(haystack)
            while m is not None:
                pos = m.start()
                groups = live(scan.groups[m.group()])
                if groups:
                    if on_lowered and not aligned:
                        everywhere.update(groups)
                    else:
                        at.setdefault(pos, set()).update(groups)
                m = search(haystack, pos + 1)
        return at, everywhere, alive, odd

    def _claims(self, text: str, prefilter: bool = True) -> tuple[list[_Claim], list[tuple[str, str]]]:
        """The claims in ``text`` (in order; overlapping claims of one verb merged) and the cancelled
        candidates. ``prefilter=False`` runs every regex on every clause (the reference the tests compare to)."""
        odd_text = True
        alive: dict[int, tuple[_Pattern, ...]] = {}  # group -> its regexes whose word needs the reply holds
        if prefilter:
            at, everywhere, alive, odd_text = self._wake(text)
        else:
            at, everywhere = {}, set(range(len(self._groups)))
        found: dict[tuple[int, int, str], _Claim] = {}
        cancelled: list[tuple[str, str]] = []
        if not at and not everywhere:
            return [], cancelled
        # clause start -> (clause end, groups to run there)
        todo: dict[int, tuple[int, set[int]]] = {}
        every: list[tuple[int, int]] | None = None
        if everywhere:
            every = _clauses(text)
            for cs, ce in every:
                todo[cs] = (ce, set(everywhere))
        if at:
            n = len(text)
            reversed_text = text[::-1]
            end = -1
            start = 0
            for pos in sorted(at):
                if text[pos] in _CLAUSE_END_CHARS:  # a literal inside a run of clause ends: read every clause
                    if every is None:
                        every = _clauses(text)
                        for cs, ce in every:
                            todo.setdefault(cs, (ce, set()))
                    for cs, _ce in every:
                        todo[cs][1].update(at[pos])
                    continue
                if pos >= end:  # a new clause
                    before = _CLAUSE_END_REVERSED.search(reversed_text, n - pos)
                    after = _CLAUSE_END_AFTER.search(text, pos)
                    start = n - before.start() if before else 0
                    end = after.end() if after else n
                    if start not in todo:
                        todo[start] = (end, set())
                todo[start][1].update(at[pos])
        groups = self._groups
        for cs in sorted(todo):
            ce, woken = todo[cs]
            ctext = text[cs:ce]
            words: frozenset[bytes] | None = None
            lowered: str | None = None
            odd: bool | None = None
            parts: list[tuple[int, int]] | None = None
            held: dict[int, bool] = {}  # need id -> whether this clause holds it
            for gi in sorted(woken):
                pats = alive.get(gi)
                for pat in groups[gi].patterns if pats is None else pats:
                    if prefilter:
                        if pat.word_keys:
                            if words is None:
                                words = _words_of(ctext, self._known_words, odd_text)
                            missing = False
                            for keys in pat.word_keys:
                                if words.isdisjoint(keys):
                                    missing = True
                                    break
                            if missing:
                                continue
                        missing = False
                        for nid, finder, ignore_case in pat.finders:
                            ok = held.get(nid)
                            if ok is None:
                                if not ignore_case:
                                    ok = finder.search(ctext) is not None
                                else:
                                    if lowered is None:
                                        lowered = ctext.lower()
                                        odd = odd_text or len(lowered) != len(ctext)
                                    ok = bool(odd) or finder.search(lowered) is not None
                                held[nid] = ok
                            if not ok:
                                missing = True
                                break
                        if missing:
                            continue
                    if pat.regex.search(ctext) is None:
                        continue
                    for m in pat.regex.finditer(ctext):
                        s, e = m.span()
                        if s == e or (cs + s, cs + e, pat.verb) in found:
                            continue
                        if parts is None:
                            parts = [b.span() for b in self._breaks.finditer(ctext)]
                        veto = self._veto(ctext, parts, s, e)
                        if veto is not None:
                            cancelled.append((m.group(0), veto))
                            continue
                        found[(cs + s, cs + e, pat.verb)] = _Claim(cs + s, cs + e, pat.verb, m.group(0))
        claims: list[_Claim] = []
        for c in sorted(found.values(), key=lambda c: (c.verb, c.start, c.end)):
            last = claims[-1] if claims else None
            if last is not None and last.verb == c.verb and c.start < last.end:  # one claim, several regexes
                if c.end > last.end:
                    claims[-1] = _Claim(last.start, c.end, c.verb, text[last.start:c.end])
            else:
                claims.append(c)
        claims.sort(key=lambda c: (c.start, c.end, c.verb))
        return claims, cancelled

    def _alive(self, gi: int, words: frozenset[bytes]) -> tuple[_Pattern, ...]:
        """The regexes of group ``gi`` whose word needs are all among the reply's ``words``."""
        out = []
        for pat in self._groups[gi].patterns:
            for keys in pat.word_keys:
                if words.isdisjoint(keys):
                    break
            else:
                out.append(pat)
        return tuple(out)

    def _veto(self, clause: str, breaks: list[tuple[int, int]], s: int, e: int) -> str | None:
        """The text that cancels the claim clause[s:e] within its part, or None."""
        part_start, part_end = 0, len(clause)
        for bs, be in breaks:
            if be <= s:
                part_start = be
            elif bs >= e:
                part_end = bs
                break
        part = clause[part_start:part_end]
        if self._preceding is not None:
            m = self._preceding.search(part, 0, e - part_start)
            if m is not None:
                return m.group(0)
        if self._anywhere is not None:
            m = self._anywhere.search(part)
            if m is not None:
                return m.group(0) or "end of question"
        return None


def _occurrences(haystack: str, needle: str) -> list[int]:
    out: list[int] = []
    i = haystack.find(needle)
    while i >= 0:
        out.append(i)
        i = haystack.find(needle, i + 1)
    return out


def _clauses(text: str) -> list[tuple[int, int]]:
    """Clause spans (each keeps its terminator) covering ``text``."""
    out: list[tuple[int, int]] = []
    start = 0
    for m in _CLAUSE_END.finditer(text):
        end = m.end()
        if end > start:
            out.append((start, end))
        start = end
    if start < len(text) or not out:
        out.append((start, len(text)))
    return out


def _evidence(evidence: object) -> list[Evidence]:
    """The well-formed evidence items (anything else is ignored)."""
    if not isinstance(evidence, Iterable) or isinstance(evidence, str | bytes):
        return []
    out: list[Evidence] = []
    for e in evidence:
        if isinstance(e, Evidence):
            verbs = e.verbs if isinstance(e.verbs, frozenset) else frozenset(e.verbs or ())
            out.append(Evidence(str(e.action_id), str(e.tool_name), e.succeeded is True, verbs))
    return out
