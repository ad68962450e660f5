import argparse, asyncio, os, sys
sys.path[:0] = ["/work/wt/lean-read", "/work/wt/lean-read/bench"]
import read_gap
from countersign.testing import processes
ap = argparse.ArgumentParser(); ap.add_argument("variants"); ap.add_argument("--rounds", type=int, default=8); ap.add_argument("--seconds", type=float, default=1.5)
ap.add_argument("--concurrency", type=int, default=1); ap.add_argument("--warmup", type=float, default=0.3)
args = ap.parse_args()
work = processes.workdir("lean-read-abl-")
redis, todo, registry, keys = processes.start_backends(work)
procs = [redis, todo]
try:
    ref = processes._start([sys.executable, "bench/reference_server.py", "--redis-url", redis.info["url"], "--todo-url", todo.info["url"]], work, "reference"); procs.append(ref)
    series = [read_gap.Series("direct", None), read_gap.Series("reference", ref)]
    for v in args.variants.split(","):
        cmd = [sys.executable, "/tmp/lean-read/ablate.py", v, "serve", "--registry", str(registry), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--redis-url", redis.info["url"], "--keys-file", str(keys), *read_gap.FLAGS]
        p = processes._start(cmd, work, v); procs.append(p); series.append(read_gap.Series(v, p))
    pids = {"todo": todo.pid, "redis": redis.pid, "bench": os.getpid(), **{s.name: s.proc.pid for s in series if s.proc}}
    asyncio.run(read_gap.bench(args, todo.info["url"], series, pids))
finally:
    for p in reversed(procs): p.stop()
d = series[0]
print(f"loadavg {os.getloadavg()}")
for s in series:
    c = s.per_call_cpu()
    print(f"{s.name:<22} n={s.calls:6d} p50 {s.p(0.5):.3f} mean {s.mean:.3f} gap {s.p(0.5)-d.p(0.5):.3f}  cpu server {c.get(s.name, float('nan')):.3f} todo {c['todo']:.3f} redis {c['redis']:.3f} bench {c['bench']:.3f}")
