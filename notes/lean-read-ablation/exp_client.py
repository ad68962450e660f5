import asyncio, json, os, sys, time, statistics, math
sys.path[:0] = ["/work/wt/lean-read"]
import grpc
from countersign.testing import processes
from countersign.v1 import gateway_pb2, common_pb2
VARIANTS = sys.argv[1].split(",")
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 6
SECS = float(sys.argv[3]) if len(sys.argv) > 3 else 1.5
CLK = os.sysconf("SC_CLK_TCK")
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split(); return (int(f[11]) + int(f[12])) / CLK
work = processes.workdir("lean-read-exp-")
redis, todo, registry, keys = processes.start_backends(work)
lat = {v: [] for v in VARIANTS}; cp = {v: [0.0, 0.0] for v in VARIANTS}
async def go():
    ch = grpc.aio.insecure_channel(srv.info["grpc"])
    call = ch.unary_unary("/x.E/Read", request_serializer=gateway_pb2.InvokeRequest.SerializeToString, response_deserializer=gateway_pb2.InvokeResponse.FromString)
    ctx = common_pb2.CallContext(tenant_id="t", actor_id="a", subject_id="a", session_id="s", request_id="r", role="user")
    for n in range(ROUNDS):
        k = n % len(VARIANTS)
        for v in VARIANTS[k:] + VARIANTS[:k]:
            req = gateway_pb2.InvokeRequest(context=ctx, tool_name=v)
            end = time.perf_counter() + 0.2
            while time.perf_counter() < end: await call(req)
            c0 = (cpu(srv.pid), cpu(todo.pid)); end = time.perf_counter() + SECS
            while time.perf_counter() < end:
                t0 = time.perf_counter_ns(); await call(req); lat[v].append(time.perf_counter_ns() - t0)
            cp[v][0] += cpu(srv.pid) - c0[0]; cp[v][1] += cpu(todo.pid) - c0[1]
    await ch.close()
try:
    srv = processes._start([sys.executable, "/tmp/lean-read/exp_server.py", str(registry), todo.info["url"]], work, "exp")
    asyncio.run(go())
finally:
    ("srv" in globals()) and srv.stop(); todo.stop(); redis.stop()
print(f"loadavg {os.getloadavg()}")
for v in VARIANTS:
    l = sorted(lat[v]); n = len(l)
    print(f"{v:<16} n={n:6d} p50 {l[n//2]/1e6:.3f} mean {statistics.fmean(l)/1e6:.3f} server cpu {1000*cp[v][0]/n:.3f} todo cpu {1000*cp[v][1]/n:.3f} ms/call")
