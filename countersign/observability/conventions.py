"""The CLIENT span's attributes for a downstream, by the OpenTelemetry semantic conventions (HTTP, gRPC, MCP)."""

from __future__ import annotations

import urllib.parse
from typing import Any

from countersign.registry.templates import safe_url


def _server(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.hostname or "", port or (443 if parts.scheme == "https" else 80)


def downstream_attributes(kind: str, method: str, url_or_target: str) -> dict[str, Any]:
    """The CLIENT span's attributes for one downstream (HTTP, gRPC or an MCP server), by the conventions."""
    if kind == "mcp":  # an MCP server's tool: the JSON-RPC method over the endpoint URL
        url = safe_url(url_or_target)
        host, port = _server(url)
        return {"mcp.method.name": "tools/call", "server.address": host, "server.port": port, "url.full": url}
    if kind == "http":
        url = safe_url(url_or_target)
        host, port = _server(url)
        return {
            "http.request.method": method,
            "server.address": host,
            "server.port": port,
            "url.full": url,
            "url.template": urllib.parse.urlsplit(url).path,
        }
    target = url_or_target
    attrs: dict[str, Any] = {
        "rpc.system": "grpc",
        "rpc.service": "countersign.v1.ToolBackendService",
        "rpc.method": method,
    }
    if target.startswith("unix:"):
        attrs["server.address"] = target[5:]
    else:
        host, _, number = target.rpartition(":")
        attrs["server.address"] = host.strip("[]") or target
        if number.isdigit():
            attrs["server.port"] = int(number)
    return attrs
