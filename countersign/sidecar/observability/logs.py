"""Structured decision logs: one JSON line per decision, with the trace id; keyed hashes, never arguments."""

from __future__ import annotations

import json
import logging

from countersign.sidecar.observability import tracing

log = logging.getLogger("countersign.decision")


def decision(action_id: str, tool: str, decision: str, reason: str, **extra: str) -> None:
    """Log what was decided about one call. Callers pass keyed hashes (args_hmac), never raw values."""
    if not log.isEnabledFor(logging.INFO):
        return
    log.info(json.dumps({"event": "decision", "action_id": action_id, "tool": tool, "decision": decision,
                         "reason": reason, "trace_id": tracing.trace_id(), **extra}))
