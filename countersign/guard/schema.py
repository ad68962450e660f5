"""The shape of a lexicon file and of ``languages.yaml``, checked at load (JSON schema, jsonschema-rs).

``check(name, raw)`` raises ``LexiconError("<file>: <where>: <what>")`` on the first fault, so a broken file
stops the start naming the file and the place.
"""

from __future__ import annotations

from typing import Any

import jsonschema_rs


class LexiconError(ValueError):
    """A lexicon file that cannot be used; the message starts with the file's name."""


EXCLUSION_RULES = (
    "quotation",
    "negation",
    "question",
    "offer_plan",
    "condition",
    "waiting_confirmation",
    "failure",
    "instruction",
    "capability",
    "other_agent",
    "state",
    "time_anchor",
    "success_noun",
    "generic_statement",
)
# rules whose cues set aside only a candidate the assistant did not perform ("I've set it to repeat every day")
GATED_RULES = ("state", "time_anchor", "generic_statement")
SCOPES = ("before", "part", "after", "sentence")
REPLACEMENTS = ("NO_SUCCEEDED_RECEIPT", "CLAIM_CONTRADICTS_RECEIPT")
GRAMMARS = ("en", "zh")

_LIST = {"type": "array", "items": {"type": "string", "minLength": 1}}
_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["language", "grammar", "replacement"],
    "properties": {
        "language": {"type": "string", "pattern": "^[a-z]{2,3}$"},
        "grammar": {"enum": list(GRAMMARS)},
        "stop_words": _LIST,
        "part_breaks": _LIST,
        "words": {"type": "object", "additionalProperties": _LIST},
        "verbs": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "table": {"type": "string"},
                "not_writes": _LIST,
                "extra": _LIST,
                "states": _LIST,
                "changes": _LIST,
                "others": _LIST,
                "particle_writes": {"type": "object", "additionalProperties": _LIST},
                "classes": {"type": "object", "additionalProperties": _LIST},
            },
        },
        "claims": {"type": "object", "additionalProperties": _LIST},
        "exclusions": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                rule: {"type": "object", "additionalProperties": False, "properties": {s: _LIST for s in SCOPES}}
                for rule in EXCLUSION_RULES
            },
        },
        "replacement": {
            "type": "object",
            "additionalProperties": {"type": "string", "minLength": 1},
            "required": list(REPLACEMENTS),
        },
    },
}
_LANGUAGES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "stop_words": {"type": "object", "additionalProperties": _LIST},
        "scripts": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
VALIDATOR = jsonschema_rs.validator_for(_SCHEMA)
LANGUAGES_VALIDATOR = jsonschema_rs.validator_for(_LANGUAGES_SCHEMA)


def check(name: str, raw: Any, validator: Any = VALIDATOR) -> None:
    errors = sorted(validator.iter_errors(raw), key=lambda e: [str(p) for p in e.instance_path])
    if errors:
        first = errors[0]
        where = ".".join(str(p) for p in first.instance_path) or "(top)"
        raise LexiconError(f"{name}: {where}: {first.message}")
