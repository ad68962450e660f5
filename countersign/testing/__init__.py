"""Processes and faults for the tests and the benchmarks alike (imported, never copied; no sys.path edits).

    processes       redis-server (also a persistent one), the todo service, the sidecar: real processes, stopped by PID
    stack           one test stack (Redis, the todo service, a sidecar) and what a test sees of the downstream
    calls           a CallContext, and the ErrorInfo / BadRequest of a failed call
    downstreams     raw HTTP downstreams that answer byte for byte as scripted; the sidecar in-process over them
    faults          a controllable TCP proxy, a listener that cuts every request
    topologies      Redis Cluster and Sentinel on loopback
    charts          the Helm chart rendered without a helm binary
    approvals       a test issuer: keys, JWKS files, signed tokens valid or hostile (issue 13)
    approval_issuer the approvals tests' shared issuer and verifier

Runs from a source checkout (it starts ``examples/`` as processes); the image does not ship it.
"""
