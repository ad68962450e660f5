import asyncio, os, signal, sys, time
sys.path.insert(0, "bench")
from telemetry import FLAGS, SLOW, confirm_all, prepare, sidecar_cmd
from countersign.testing import processes
work = processes.workdir("lean-cpu8-prof-")
procs = []
try:
    redis, todo, registry, keys = processes.start_backends(work)
    procs += [redis, todo]
    cmd = sidecar_cmd(registry, redis.info["url"], keys, [*FLAGS, *SLOW])
    cmd = [cmd[0], "notes/lean-cpu8-count/prof_sidecar.py"] + cmd[3:]
    os.environ["PROF_OUT"] = "/tmp/lean-cpu8/confirm.prof"
    sc = processes._start(cmd, work, "sidecar", timeout=60)
    procs.append(sc)
    addr = str(sc.info["grpc"])
    cards = asyncio.run(prepare(addr, 1100))
    asyncio.run(confirm_all(addr, cards[:100], 16))
    os.kill(sc.pid, signal.SIGUSR1)
    asyncio.run(confirm_all(addr, cards[100:], 16))
    time.sleep(1)
    os.kill(sc.pid, signal.SIGUSR2)
    time.sleep(2)
finally:
    for p in reversed(procs):
        p.stop(timeout=30)
