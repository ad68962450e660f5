#!/opt/venv/bin/python
"""gRPC health probe of the Countersign sidecar: the image's HEALTHCHECK and the Helm chart's exec probes.

    countersign-healthcheck [--address ADDR] [--service NAME] [--timeout SECONDS]

ADDR defaults to $COUNTERSIGN_LISTEN (``host:port`` or ``unix:/path``; a wildcard host such as 0.0.0.0
or [::] is dialled on loopback). NAME defaults to "" (the whole server). Exits 0 when the answer is
SERVING, 1 otherwise (NOT_SERVING while draining after SIGTERM, unreachable, timed out).
"""

from __future__ import annotations

import argparse
import os
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

WILDCARDS = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]", "": "127.0.0.1"}


def target(address: str) -> str:
    if address.startswith("unix:"):
        return address
    host, _, port = address.rpartition(":")
    return f"{WILDCARDS.get(host, host)}:{port}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="countersign-healthcheck", description=__doc__.splitlines()[0])
    parser.add_argument("--address", default=os.environ.get("COUNTERSIGN_LISTEN", "127.0.0.1:50051"))
    parser.add_argument("--service", default="")
    parser.add_argument("--timeout", type=float, default=3.0)
    args = parser.parse_args(argv)
    try:
        with grpc.insecure_channel(target(args.address)) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout)
    except grpc.RpcError as exc:
        print(f"countersign-healthcheck: {args.address}: {exc.code().name}", file=sys.stderr)
        return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        print(f"countersign-healthcheck: {args.address}: {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
