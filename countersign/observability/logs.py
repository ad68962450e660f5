"""Logs: one JSON object per line on stderr, written by python-json-logger.

Every line has ``timestamp`` (ISO 8601, UTC), ``level``, ``logger``, ``message`` and, inside a call with a
trace, ``trace_id`` and ``span_id`` (W3C hex; the span is the sidecar's own, absent when spans are not recorded
and only the caller's trace is continued). A line's own fields come
from ``extra=``: ``log.info("refused", extra={"event": "refused", "reason": ...})``. Decision logs carry
keyed hashes (args_hmac), never arguments, tokens or reply text.

A message that is itself a JSON object (``log.info(json.dumps({...}))``, the older way some modules still
write) is merged into the line rather than quoted inside it, so every line parses the same way.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from opentelemetry import trace
from pythonjsonlogger.json import JsonFormatter

log = logging.getLogger("countersign.decision")


class JsonLines(JsonFormatter):
    """The sidecar's log line (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(
            ["levelname", "name", "message"],
            rename_fields={"levelname": "level", "name": "logger"},
            timestamp=True,
            json_ensure_ascii=False,
        )

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        super().add_fields(log_data, record, message_dict)
        log_data["level"] = str(log_data.get("level", "")).lower()
        message = log_data.get("message")
        if isinstance(message, str) and message.startswith("{"):
            try:
                fields = json.loads(message)
            except ValueError:
                fields = None
            if isinstance(fields, dict):
                del log_data["message"]
                log_data.update({k: v for k, v in fields.items() if k not in ("timestamp", "level", "logger")})


_stamping = False


def stamp_trace_ids() -> None:
    """Give every log record the trace_id and span_id current where it is MADE (a handler may format it later
    or elsewhere). Once per process; the formatter writes them as fields like any other."""
    global _stamping
    if _stamping:
        return
    _stamping = True
    make = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            record.trace_id = format(ctx.trace_id, "032x")
            if not ctx.is_remote:  # a remote context's span id is the caller's span, not one of ours
                record.span_id = format(ctx.span_id, "016x")
        return record

    logging.setLogRecordFactory(factory)


def configure(level: str) -> None:
    """JSON lines on stderr at this level (debug, info, warning, error), for the whole process."""
    stamp_trace_ids()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


def always(event: str, **fields: Any) -> None:
    """A lifecycle line (stopped) printed to stderr whatever the log level, in the same shape as every log line."""
    record = logging.getLogger("countersign").makeRecord(
        "countersign", logging.INFO, "", 0, event, (), None, extra={"event": event, **fields}
    )
    print(JsonLines().format(record), file=sys.stderr, flush=True)


def decision(action_id: str, tool: str, decision: str, reason: str, **extra: str) -> None:
    """Log what was decided about one call. Callers pass keyed hashes (args_hmac), never raw values."""
    if not log.isEnabledFor(logging.INFO):
        return
    log.info(
        "decision",
        extra={
            "event": "decision",
            "action_id": action_id,
            "tool": tool,
            "decision": decision,
            "reason": reason,
            **extra,
        },
    )
