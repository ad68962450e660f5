"""What the RED/USE series and the JSON log formatter add to one Confirm, in CPU microseconds, measured in-process.

    .venv/bin/python bench/red_use_cost.py [--calls 200000]

Per Confirm the sidecar now does, on top of what it did before:
  rpc       two perf_counter() reads and one observation of countersign_rpc_server_duration_seconds{method,code}
  redis     per Lua script round trip (claim and settle on the caller's path; audit in the background): two
            perf_counter() reads and one observation of countersign_redis_duration_seconds{script}
  log       the decision line through python-json-logger (with the trace/span stamp on the record) instead of a
            hand-written json.dumps line, written to /dev/null
The in-flight gauges cost nothing per call (read when scraped). Compare the sum with the sidecar's CPU per
Confirm from bench/telemetry.py (about 1.3-1.5 ms on this machine).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from countersign.observability import logs
from countersign.observability.metrics import Metrics

ROOT = Path(__file__).resolve().parent.parent


def per_call_us(fn: object, calls: int) -> float:
    assert callable(fn)
    start = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - start) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args(argv)
    metrics = Metrics(frozenset({"create_todo"}))
    observe = metrics.redis_observer()
    assert observe is not None
    clock = time.perf_counter

    def rpc() -> None:
        start = clock()
        metrics.rpc_duration.labels("Confirm", "OK").observe(clock() - start)

    def redis() -> None:
        start = clock()
        observe("claim", clock() - start)

    sink = open("/dev/null", "w")  # noqa: SIM115 - closed below
    old, new = logging.getLogger("bench.old"), logging.getLogger("bench.new")
    for logger, formatter in ((old, _Legacy()), (new, logs.JsonLines())):
        handler = logging.StreamHandler(sink)
        handler.setFormatter(formatter)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    fields = {
        "event": "decision",
        "action_id": "0" * 32,
        "tool": "create_todo",
        "decision": "executed",
        "reason": "SUCCEEDED",
        "outcome": "succeeded",
    }

    def log_old() -> None:
        old.info(json.dumps({**fields, "trace_id": ""}))

    def log_new() -> None:
        new.info("decision", extra=fields)

    logs.stamp_trace_ids()
    results = {
        "rpc": per_call_us(rpc, args.calls),
        "redis_per_script": per_call_us(redis, args.calls),
        "log_old": per_call_us(log_old, args.calls // 4),
        "log_new": per_call_us(log_new, args.calls // 4),
    }
    sink.close()
    added = results["rpc"] + 2 * results["redis_per_script"] + results["log_new"] - results["log_old"]
    for name, value in results.items():
        print(f"{name:<18} {value:7.2f} µs")
    print(
        f"added per Confirm (rpc + 2 scripts on the caller's path + log delta): {added:.1f} µs "
        f"= {added / 1350 * 100:.2f} % of a 1.35 ms Confirm"
    )
    out = ROOT / "bench" / "results" / f"red_use_cost-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps({"us_per_call": results, "added_us_per_confirm": added, "calls": args.calls}, indent=1))
    print(f"results: {out.relative_to(ROOT)}")
    return 0


class _Legacy(logging.Formatter):
    """The hand-written formatter this replaced (cli._JsonLog): JSON messages passed through as they are."""

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if msg.startswith("{"):
            return msg
        return json.dumps({"level": record.levelname.lower(), "logger": record.name, "message": msg})


if __name__ == "__main__":
    sys.exit(main())
