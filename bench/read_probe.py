"""Where a read Invoke's wall time goes inside a server: stage clocks patched around the real code (a bench tool).

    python bench/read_probe.py sidecar OUT.json serve --registry ...     # the sidecar's CLI, stages timed
    python bench/read_probe.py reference OUT.json --redis-url ...        # bench/reference_server.py, its Read timed

Wraps functions of the running process with ``time.perf_counter_ns`` marks (CLOCK_MONOTONIC: one clock for every
process on the machine), then runs the server as it would run anyway. The client (bench/read_gap.py) puts its send
time into the call: the first 20 characters of ``CallContext.request_id`` are ``perf_counter_ns()`` at the send, so
the inbound hop (client send -> handler entered) is measured per call without a field of its own. On SIGUSR1 the
process writes the marks of the calls since the last SIGUSR1 to OUT.json (one list of {stage: ns} per call) and
starts afresh. The wrappers cost a few µs per call; read the stages against each other, not against unprobed runs.
"""

from __future__ import annotations

import functools
import json
import signal
import sys
import time
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

now = time.perf_counter_ns
_call: ContextVar[dict[str, int] | None] = ContextVar("read_probe_call", default=None)
_calls: list[dict[str, int]] = []


def _sent_at(request: Any) -> int:
    rid = request.context.request_id
    return int(rid[:20]) if rid[:20].isdigit() else 0


def _entry(method: Callable[..., Any]) -> Callable[..., Any]:
    """The RPC handler as gRPC calls it: the call's marks start here."""

    @functools.wraps(method)
    async def timed(self: Any, request: Any, context: Any) -> Any:
        marks = {"sent": _sent_at(request), "entered": now()}
        token = _call.set(marks)
        try:
            return await method(self, request, context)
        finally:
            marks["returned"] = now()
            _call.reset(token)
            _calls.append(marks)

    return timed


def _stage(name: str, fn: Callable[..., Any], is_async: bool) -> Callable[..., Any]:
    """fn with its start and end marked as name + ".0" / ".1" in the current call's marks (the first time only)."""
    if is_async:

        @functools.wraps(fn)
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            marks = _call.get()
            if marks is None or name + ".0" in marks:
                return await fn(*args, **kwargs)
            marks[name + ".0"] = now()
            try:
                return await fn(*args, **kwargs)
            finally:
                marks[name + ".1"] = now()

        return timed_async

    @functools.wraps(fn)
    def timed_sync(*args: Any, **kwargs: Any) -> Any:
        marks = _call.get()
        if marks is None or name + ".0" in marks:
            return fn(*args, **kwargs)
        marks[name + ".0"] = now()
        try:
            return fn(*args, **kwargs)
        finally:
            marks[name + ".1"] = now()

    return timed_sync


def patch(owner: Any, attr: str, name: str, is_async: bool) -> None:
    setattr(owner, attr, _stage(name, getattr(owner, attr), is_async))


def sidecar() -> None:
    from countersign.adapters import http
    from countersign.adapters.base import CallMeta
    from countersign.observability import tracing
    from countersign.path import pipeline, policy
    from countersign.path.quota import Quota
    from countersign.sidecar import server
    from countersign.sidecar.admission import Gate
    from countersign.store.redis_store import RedisStore

    server.GatewayServicer.Invoke = _entry(server.GatewayServicer.Invoke)  # type: ignore[method-assign]
    patch(Gate, "admit", "admit", False)
    patch(tracing, "server_span", "span", False)  # server.py calls it by the module
    patch(pipeline.Pipeline, "invoke", "pipeline", True)  # the handler's first step: admission and span done
    patch(policy, "authorize", "policy", False)
    patch(pipeline, "turn_key", "turn_key", False)
    patch(Quota, "take", "quota", True)
    patch(http.HttpAdapter, "execute", "adapter", True)
    patch(CallMeta, "wire_headers", "headers", False)
    patch(http, "render_url", "url", False)
    patch(http, "_read", "body", True)
    patch(http, "classify", "classify", False)
    patch(pipeline, "read_summary", "summary", False)
    patch(RedisStore, "remember", "remember", True)
    patch(pipeline, "_ANSWER", "encode", False)  # the answer's encoder (json.dumps before lean-read)


def reference() -> None:
    import reference_server

    reference_server.Reference.read = _entry(reference_server.Reference.read)  # type: ignore[method-assign]


def main() -> None:
    kind, out = sys.argv[1], Path(sys.argv[2])
    sys.argv = [sys.argv[0], *sys.argv[3:]]

    def dump(*_: Any) -> None:
        out.write_text(json.dumps(_calls))
        _calls.clear()

    signal.signal(signal.SIGUSR1, dump)
    if kind == "sidecar":
        sidecar()
        from countersign.sidecar import cli

        raise SystemExit(cli.main())
    reference()
    import reference_server

    raise SystemExit(reference_server.main())


if __name__ == "__main__":
    main()
