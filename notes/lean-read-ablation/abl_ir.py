import asyncio, os, sys, time
sys.path[:0] = ["/work/wt/lean-read", "/work/wt/lean-read/bench"]
import counted
from read_ir import reads
from read_gap import FLAGS
from telemetry import sidecar_cmd
from countersign.testing import processes
variants = sys.argv[1].split(","); N = int(sys.argv[2]); rounds = int(sys.argv[3])
work = processes.workdir("lean-read-ablir-")
redis, todo, registry, keys = processes.start_backends(work)
procs = [redis, todo]
os.environ["PYTHONHASHSEED"] = "0"
try:
    cmd = sidecar_cmd(registry, redis.info["url"], keys, FLAGS)
    servers = {}
    for v in variants:
        if v == "reference":
            c = [sys.executable, "/work/wt/lean-read/bench/reference_server.py", "--redis-url", redis.info["url"], "--todo-url", todo.info["url"]]
        else:
            c = [sys.executable, "/tmp/lean-read/ablate.py", v, *cmd[3:]]
        p, out = counted.start(c, work, v); procs.append(p); servers[v] = (p, out)
    for v, (p, out) in servers.items():
        asyncio.run(reads(p.info["grpc"], 150, v == "reference")); counted.instrument(p.pid)
    per = {v: [] for v in variants}
    for n in range(rounds):
        for v in (variants if n % 2 == 0 else variants[::-1]):
            p, out = servers[v]
            counted.zero(p.pid); asyncio.run(reads(p.info["grpc"], N, v == "reference")); time.sleep(0.5)
            per[v].append(counted.measures(counted.dump(p.pid, out)))
    for v in variants:
        print(f"{v:<22}" + "  ".join(f"{m} {sum(w[m] for w in per[v]) / len(per[v]) / N:,.0f}" for m in counted.MEASURES))
finally:
    for p in reversed(procs): p.stop(timeout=60)
