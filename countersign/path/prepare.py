"""Prepare and preview: the concrete arguments the user will countersign, and how they read.

The downstream may turn "今晚 9 点" into a timestamp, add the resource version it will check
(sent back as If-Match at execute), or refuse (its reason is passed on as FAILED_PRECONDITION and
no card is issued). What it returns must still satisfy the tool's closed schema and keep every URL
path's shape: a card only ever holds valid arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from countersign.adapters.base import (
    Adapter,
    CallMeta,
    NotSendable,
    Prepared,
    PrepareRefused,
    PrepareUnavailable,
    address,
    entity_tag,
)
from countersign.errors import FailedPrecondition, Unavailable
from countersign.path import policy
from countersign.reasons import Reason
from countersign.registry import Tool
from countersign.registry.model import locale_key
from countersign.registry.templates import render
from countersign.v1 import common_pb2


async def prepare(
    adapter: Adapter, tool: Tool, arguments: Mapping[str, Any], meta: CallMeta, timeout: float
) -> Prepared:
    try:
        prepared = await adapter.prepare(tool, arguments, meta, timeout)
    except PrepareRefused as exc:
        raise FailedPrecondition(exc.reason, exc.message) from exc
    except PrepareUnavailable as exc:
        raise Unavailable(
            Reason.DOWNSTREAM_UNAVAILABLE,
            str(exc),
            metadata={"tool": tool.name, "downstream": address(tool, tool.adapter.prepare)},
        ) from exc
    if prepared.resource_version:
        try:  # it is sent back as If-Match at execute: a card must not hold one that cannot be
            entity_tag(prepared.resource_version)
        except NotSendable as exc:
            raise FailedPrecondition(
                Reason.PREPARED_VERSION_INVALID,
                f"the downstream prepared a resource version "
                f"for {tool.name!r} that {exc.message.removeprefix('the resource version ')}",
            ) from exc
    problems = policy.validate(tool, prepared.arguments)
    if problems:
        raise FailedPrecondition(
            Reason.PREPARED_ARGS_INVALID,
            f"the downstream prepared arguments that break {tool.name!r}'s schema: "
            + "; ".join(f"{p.field or '(root)'}: {p.description}" for p in problems[:3]),
        )
    return prepared


def preview(tool: Tool, prepared: Prepared, action_id: str, locale: str = "") -> common_pb2.Preview:
    """The downstream's preview when it gave one, else the registry's template, in the caller's locale, over the
    prepared args."""
    values = {**prepared.arguments, "action_id": action_id, "idempotency_key": action_id}
    template = localized(tool.preview, locale)
    source = prepared.preview or template
    try:
        out = common_pb2.Preview(
            title=render(str(source.get("title", "")), values),
            target=render(str(source.get("target", "")), values),
            impact=render(str(source.get("impact", "")), values),
        )
        for detail in template.get("details") or []:
            out.details.add(label=str(detail["label"]), value=render(str(detail["value"]), values))
    except ValueError as exc:  # a lone surrogate from the downstream's JSON: a protobuf string is UTF-8 text
        raise FailedPrecondition(
            Reason.PREPARED_ARGS_INVALID,
            f"the downstream prepared a preview of {tool.name!r} (or arguments it shows) that is not text: {exc}",
        ) from exc
    return out


def localized(preview: Mapping[str, Any], locale: str) -> Mapping[str, Any]:
    """The registry preview for a locale: the variant under ``locales`` that fits it (registry.locale_key), else the
    preview itself (the registry's default language)."""
    locales = preview.get("locales") or {}
    key = locale_key(locales, locale)
    return dict(locales[key]) if key is not None else preview
