"""The MCP front door seen from a host: the official Python SDK client over Streamable HTTP, with the identity
headers, and an elicitation answer a test scripts."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

Answer = str | Callable[[types.ElicitRequestParams], Awaitable[str]]


def identity(**overrides: str) -> dict[str, str]:
    """The identity headers of a host acting for alice (tenant t1, role user, locale en)."""
    base = {
        "X-Countersign-Tenant": "t1",
        "X-Countersign-Actor": "alice",
        "X-Countersign-Subject": "alice",
        "X-Countersign-Session": "s-mcp",
        "X-Countersign-Role": "user",
        "X-Countersign-Locale": "en",
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v}


class Elicitations:
    """Answers every elicitation/create with ``answer`` (accept, decline, cancel) and keeps what was asked."""

    def __init__(self, answer: Answer = "accept") -> None:
        self.answer = answer
        self.asked: list[types.ElicitRequestParams] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params)
        action = self.answer if isinstance(self.answer, str) else await self.answer(params)
        return types.ElicitResult(action=action, content={} if action == "accept" else None)  # type: ignore[arg-type]


def client(
    url: str, headers: dict[str, str] | None = None, *, elicit: Elicitations | None = None, timeout: float = 30.0
) -> Client:
    """An SDK client of the MCP endpoint (auto mode: it finds the handshake era itself); with ``elicit`` it
    declares elicitation (form and URL), without it none."""
    http = httpx2.AsyncClient(headers=identity() if headers is None else headers, timeout=timeout)
    return Client(
        streamable_http_client(url, http_client=http),
        elicitation_callback=elicit,
        read_timeout_seconds=timeout,
    )
