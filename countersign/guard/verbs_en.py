"""English verb forms: the generated verb table, the lexicon's read verbs, and regular morphology.

A past form is found in the generated verb table, else by regular morphology: a known prefix (un-, re-, ...)
on a table verb, then -ed, -ied, a doubled consonant, and as a last resort any -ed word of five letters or
more ("texted"; not a compound adjective such as "password-protected").
"""

from __future__ import annotations

from countersign.guard.lexicon import Lexicon

_ED_NOT_VERBS = frozenset(
    {
        "hundred",
        "sacred",
        "naked",
        "wicked",
        "rugged",
        "beloved",
        "kindred",
        "shed",
        "embed",
        "bed",
        "red",
        "wed",
        "bred",
        "fled",
        "sled",
        "led",
        "fed",
        "sped",
    }
)


class VerbForms:
    """The lemma of a past form, a base form or a present form, and whether a lemma never writes."""

    def __init__(self, lex: Lexicon) -> None:
        self.lex = lex
        self.prefixes = tuple(sorted(lex.word("prefixes"), key=len, reverse=True))
        self._forms = frozenset(lex.verb_forms)

    def _not_write(self, lemma: str) -> bool:
        """A read verb, also under a prefix: "double-checked", "rechecked", "re-read"."""
        if lemma in self.lex.not_writes:
            return True
        if lemma in self.lex.verb_lemmas:
            return False  # a verb of its own ("update", "restart"), not a prefix on a read verb
        return any(
            lemma.startswith(p) and lemma[len(p) :].lstrip("-") in self.lex.not_writes
            for p in self.prefixes
            if len(lemma) > len(p) + 2 and p != "un"  # un- undoes a state: "unlisted", "unhid" are writes (guard7)
        )

    def past_lemma(self, word: str) -> str:
        """The lemma of a past form or participle ("" when ``word`` is none): the table, else morphology."""
        forms = self.lex.verb_forms
        if word.endswith("eed") and (word not in forms or (word in self.lex.verb_lemmas and forms[word] != word)):
            return (
                ""  # "seed", "feed", "weed": nouns or verbs of their own, no past of see/fee/wee ("agreed" is listed)
            )
        if word in forms:
            return forms[word]
        for prefix in ("", *self.prefixes):
            if prefix and not (word.startswith(prefix) and len(word) > len(prefix) + 3):
                continue
            rest = word[len(prefix) :].lstrip("-")
            if rest in forms:
                return prefix + forms[rest] if prefix else forms[rest]
            if not rest.endswith("ed"):
                continue
            stem = rest[:-2]
            for lemma in (
                stem,
                stem + "e",
                stem[:-1] if len(stem) > 2 and stem[-1] == stem[-2] else "",
                stem[:-1] + "y" if stem.endswith("i") else "",
            ):
                if lemma and lemma in self.lex.verb_lemmas:
                    return prefix + lemma
        if (
            word.endswith("ed")
            and len(word) >= 5
            and word not in _ED_NOT_VERBS
            and not word.endswith("eed")
            and "-" not in word
        ):  # "password-protected", "air-conditioned": a compound adjective
            return word[:-2]  # a verb the table lacks ("texted", "venmoed"): regular morphology
        return ""

    def _base(self, word: str) -> str:
        """The lemma of a base form, also under a prefix ("rebook"), or ""."""
        if word in self.lex.verb_lemmas:
            return word
        for prefix in self.prefixes:
            if word.startswith(prefix) and word[len(prefix) :].lstrip("-") in self.lex.verb_lemmas:
                return word
        return ""

    def _present(self, word: str) -> str:
        """The lemma of a third-person present form ("points" -> point), or ""."""
        lemmas = self.lex.verb_lemmas
        for lemma in (word[:-1], word[:-2], word[:-3] + "y"):
            if word.endswith("s") and lemma in lemmas and lemma not in self.lex.not_writes:
                return lemma
        return ""
