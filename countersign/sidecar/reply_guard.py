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
   (``^``/``$`` are the clause's ends). A claim regex is only run on the clauses that contain a literal the
   regex cannot match without (derived from the regex at load), which keeps a 2 KB reply well under 0.2 ms.
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
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
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
_BASE_BREAK = r"[,，、:：—–…]+"
_DEFINE_REF = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}")
_BACKREF = re.compile(r"\\[1-9]|\(\?P=")
_TOP_KEYS = {"ignore_case", "define", "claims", "not_a_claim", "scope_breaks", "replacement"}
_CANCEL_KEYS = {"preceding", "anywhere"}
_VERB_NAME = re.compile(r"^[a-z][a-z_]*$")
# Characters a case-insensitive regex also matches that str.lower() does not map onto their ASCII letter.
_FOLD_FIXES = (("\u0130", "i"), ("\u0131", "i"), ("\u017f", "s"))


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
    literals: tuple[str, ...] | None  # one of these occurs in every match (folded if ignore_case); None: unknown


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
    if not verbs:
        verbs.update(_TOKEN_VERBS.get(tokens[-1], ()))
    for token in tokens:
        if token in _ANYWHERE_TOKENS:
            verbs.update(_TOKEN_VERBS[token])
    return frozenset(verbs)


# ------------------------------------------------------------------------------ literal extraction

def _sre_parser() -> Any:
    for name in ("re._parser", "sre_parse"):
        try:
            return importlib.import_module(name)
        except ImportError:  # pragma: no cover - depends on the Python version
            continue
    return None  # pragma: no cover


_PARSER = _sre_parser()


def _fold_safe(ch: str) -> bool:
    """A literal character of a case-insensitive regex that ``_fold`` maps like re does."""
    if ch.isascii():
        return True
    return ch.lower() == ch and ch.upper() == ch and ch.casefold() == ch


def _required_literals(source: str, flags: int) -> tuple[str, ...] | None:
    """Strings one of which occurs in every match of ``source`` (lower-cased for IGNORECASE), or None."""
    if _PARSER is None:  # pragma: no cover
        return None
    try:
        parsed = _PARSER.parse(source, flags)
        found = _required_in(list(parsed.data), bool(flags & re.IGNORECASE))
    except Exception:  # pragma: no cover - an unexpected parser shape only costs speed
        return None
    if not found or any(not s for s in found):
        return None
    return found


_PRODUCT_LIMIT = 64


def _exact(seq: list[Any], ignore_case: bool) -> set[str] | None:
    """The finite set of strings ``seq`` matches (folded), or None when it is not a small literal set."""
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


def _best(candidates: list[tuple[str, ...]]) -> tuple[str, ...] | None:
    good = [c for c in candidates if c and all(c)]
    if not good:
        return None
    return max(good, key=lambda c: (min(len(s) for s in c), sum(len(s) for s in c) / len(c), -len(c)))


def _required_in(seq: list[Any], ignore_case: bool) -> tuple[str, ...] | None:
    """Strings one of which occurs in every match of ``seq``: the best of its contiguous literal runs and of
    what its mandatory sub-expressions require."""
    p = _PARSER
    candidates: list[tuple[str, ...]] = []
    run: set[str] = {""}

    def flush() -> None:
        nonlocal run
        if run != {""}:
            candidates.append(tuple(sorted(run)))
        run = {""}

    repeats = tuple(getattr(p, n) for n in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT") if hasattr(p, n))
    for op, av in seq:
        exact = _exact([(op, av)], ignore_case)
        if exact is not None and "" not in exact:
            if len(run) * len(exact) <= _PRODUCT_LIMIT:
                run = {a + b for a in run for b in exact}
            else:
                flush()
                run = exact
            continue
        flush()
        sub: tuple[str, ...] | None = None
        if op is p.SUBPATTERN:
            _group, add_flags, del_flags, body = av
            if not add_flags and not del_flags:
                sub = _required_in(list(body.data), ignore_case)
        elif op is p.BRANCH:
            alternatives = [_required_in(list(b.data), ignore_case) for b in av[1]]
            if alternatives and all(alternatives):
                sub = tuple(sorted({s for a in alternatives if a for s in a}))
        elif op in repeats and av[0] >= 1:
            sub = _required_in(list(av[2].data), ignore_case)
        elif hasattr(p, "ATOMIC_GROUP") and op is p.ATOMIC_GROUP:
            sub = _required_in(list(av.data), ignore_case)
        if sub:
            candidates.append(sub)
    flush()
    return _best(candidates)


def _fold(text: str) -> tuple[str, bool]:
    """Lower-cased text for the literal prefilter of case-insensitive regexes, and whether offsets still align."""
    folded = text.lower()
    aligned = len(folded) == len(text)
    for odd, plain in _FOLD_FIXES:
        if odd in text:
            folded = folded.replace(odd.lower(), plain)
            aligned = False
    return folded, aligned


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
        self._any_ignore_case = any(p.ignore_case for p in patterns)

    @property
    def lexicons(self) -> tuple[str, ...]:
        return tuple(sorted(self._lexicons))

    @property
    def pattern_count(self) -> int:
        return len(self._patterns)

    @property
    def unfiltered_patterns(self) -> tuple[str, ...]:
        """Claim regexes with no derivable literal: run on every clause (slower, still correct)."""
        return tuple(p.source for p in self._patterns if p.literals is None)

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
                    patterns.append(_Pattern(name, verb, src, regex, ignore_case,
                                             _required_literals(expanded, flags)))

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
        combined_breaks = _combine(breaks)
        assert combined_breaks is not None
        return cls(lexicons, patterns, _combine(preceding), _combine(anywhere), combined_breaks)

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

    def _claims(self, text: str) -> tuple[list[_Claim], list[tuple[str, str]]]:
        """The claims in ``text`` (in order, one per span and verb) and the cancelled candidates."""
        folded: str | None = None
        aligned = True
        hits: dict[tuple[str, bool], list[int]] = {}
        clauses: list[tuple[int, int]] | None = None
        starts: list[int] = []
        clause_text: dict[int, str] = {}
        found: dict[tuple[int, int, str], _Claim] = {}
        cancelled: list[tuple[str, str]] = []
        part_cache: dict[int, list[tuple[int, int]]] = {}

        for pat in self._patterns:
            targets: Iterable[int]
            if pat.literals is not None:
                if pat.ignore_case and folded is None:
                    folded, aligned = _fold(text)
                haystack = folded if pat.ignore_case and folded is not None else text
                positions: list[int] = []
                for lit in pat.literals:
                    key = (lit, pat.ignore_case)
                    if key not in hits:
                        hits[key] = _occurrences(haystack, lit)
                    positions.extend(hits[key])
                if not positions:
                    continue
            if clauses is None:
                clauses = _clauses(text)
                starts = [s for s, _ in clauses]
            if pat.literals is None or (pat.ignore_case and not aligned):
                targets = range(len(clauses))
            else:
                targets = sorted({bisect_right(starts, pos) - 1 for pos in positions})
            for ci in targets:
                cs, ce = clauses[ci]
                ctext = clause_text.get(ci)
                if ctext is None:
                    ctext = clause_text[ci] = text[cs:ce]
                for m in pat.regex.finditer(ctext):
                    s, e = m.span()
                    if s == e or (cs + s, cs + e, pat.verb) in found:
                        continue
                    parts = part_cache.get(ci)
                    if parts is None:
                        parts = part_cache[ci] = [b.span() for b in self._breaks.finditer(ctext)]
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
