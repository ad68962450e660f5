"""Example downstream domain service for the Countersign sidecar: a todo list over SQLite.

HTTP (aiohttp) via :func:`make_app`, gRPC ``ToolBackendService`` via :class:`TodoBackend`; both share one
:class:`TodoStore` and, optionally, one :class:`ServiceControls` (request log + fault injection).
"""

from .app import Fault, FaultInjector, RequestLog, ServiceControls, make_app
from .due import SERVICE_TZ, DueAtError, parse_due_at, resolve_due_at
from .store import Answer, KeyRecord, KeyState, TodoStore

__all__ = [
    "SERVICE_TZ",
    "Answer",
    "DueAtError",
    "Fault",
    "FaultInjector",
    "KeyRecord",
    "KeyState",
    "RequestLog",
    "ServiceControls",
    "TodoStore",
    "make_app",
    "parse_due_at",
    "resolve_due_at",
]
