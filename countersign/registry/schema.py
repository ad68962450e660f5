"""The schema-closed rule: a tool schema admits no key the registry never declared (docs/registry.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# What a tool schema may say (docs/design.md §4, docs/registry.md). Closure is checked by walking every subschema these
# keywords hold; anything else (references, conditionals, pattern- and evaluation-based keywords, negation) could
# admit a key the walk cannot see, so it is refused by name rather than half-understood.
_SUBSCHEMA_KEYWORDS = frozenset({"properties", "items", "anyOf", "oneOf", "allOf"})
_VALUE_KEYWORDS = frozenset(
    {
        "type",
        "enum",
        "const",
        "required",
        "additionalProperties",
        "minProperties",
        "maxProperties",
        "dependentRequired",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
        "uniqueItems",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$comment",
    }
)
_SCHEMA_KEYWORDS = _SUBSCHEMA_KEYWORDS | _VALUE_KEYWORDS
_ANY = "admits any value (an object with any keys): give it a type"


def open_objects(schema: Any, where: str) -> Iterator[str]:
    """Every place where a value that passes the schema could carry a key the registry never declared.

    Closed means: only supported keywords; every subschema says what it admits (a type, enum or const, or
    branches that each do); every object sets additionalProperties: false; every array has closed items;
    every property, item and anyOf/oneOf/allOf branch is closed in turn. ``false`` admits nothing: closed.
    """
    if schema is False:
        return
    if not isinstance(schema, dict):  # true (schema-valid refused every other non-schema)
        yield f"{where} is true, which {_ANY}"
        return
    unsupported = sorted(str(key) for key in schema if key not in _SCHEMA_KEYWORDS)
    if unsupported:
        yield (
            f"{where} uses {', '.join(map(repr, unsupported))}, which a tool schema may not use: closure is "
            "checked only through type, properties, items, enum, const, anyOf, oneOf and allOf"
        )
        return
    kind = schema.get("type")
    types = {kind} if isinstance(kind, str) else set(kind or ())
    branches = [
        (f"{key}[{i}]", sub) for key in ("anyOf", "oneOf", "allOf") for i, sub in enumerate(schema.get(key) or [])
    ]
    if not types and "enum" not in schema and "const" not in schema and not branches:
        yield f"{where} {_ANY}, enum or const"
        return
    if ("object" in types or "properties" in schema or "additionalProperties" in schema) and schema.get(
        "additionalProperties"
    ) is not False:
        yield f"{where} must set additionalProperties: false"
    if "array" in types and "items" not in schema:
        yield f"{where} is an array without items: declare a closed schema for its items"
    for name, sub in (schema.get("properties") or {}).items():
        yield from open_objects(sub, f"{where}.properties.{name}")
    if "items" in schema:
        yield from open_objects(schema["items"], f"{where}.items")
    for label, sub in branches:
        yield from open_objects(sub, f"{where}.{label}")
