"""An OTLP/gRPC trace endpoint in a process of its own, for bench/telemetry.py: a collector runs elsewhere,
so its parsing must not share the load generator's interpreter.

    python bench/otlp_sink.py     prints {"event": "listening", "port": N}; on SIGTERM {"spans": n, ...}

Each Export is counted by parsing it with the C protobuf runtime (upb), the cheapest honest count.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from concurrent import futures
from types import FrameType

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class Sink(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans = self.exports = self.bytes = 0
        self.lock = threading.Lock()

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: object
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        spans = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
        with self.lock:
            self.spans += spans
            self.exports += 1
            self.bytes += request.ByteSize()
        return trace_service_pb2.ExportTraceServiceResponse()


def main() -> int:
    sink = Sink()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    done = threading.Event()

    def stop(_signum: int, _frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(json.dumps({"event": "listening", "port": port}), flush=True)
    done.wait()
    server.stop(1).wait()
    print(json.dumps({"spans": sink.spans, "exports": sink.exports, "bytes": sink.bytes}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
