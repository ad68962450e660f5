"""Statement counter: callgrind of a fresh python running SETUP then STMT N times, minus 0 times, / N.
usage: count.py [--repo DIR] [--n 200] SETUPFILE 'stmt' ['stmt2' ...]"""
import argparse, os, re, subprocess, sys, tempfile
p = argparse.ArgumentParser()
p.add_argument("--repo", default="/work/wt/lean-cpu8")
p.add_argument("--n", type=int, default=200)
p.add_argument("setup")
p.add_argument("stmts", nargs="+")
a = p.parse_args()
py = "/work/wt/lean-cpu8/.venv/bin/python"
def run(stmt, n):
    src = open(a.setup).read().replace("/work/wt/lean-cpu8", a.repo)
    code = src + f"\nfor _i in range({n}):\n    {stmt}\n"
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "s.py"); open(f, "w").write(code)
        out = os.path.join(d, "cg.out")
        env = dict(os.environ, PYTHONPATH=a.repo, PYTHONHASHSEED="0")
        r = subprocess.run(["valgrind", "--tool=callgrind", "--dump-line=no", f"--callgrind-out-file={out}", py, f],
                           cwd=a.repo, env=env, capture_output=True, text=True)
        if r.returncode: sys.exit(r.stderr[-3000:])
        tot = re.search(r"^totals:\s+(\d+)", open(out).read(), re.M)
        return int(tot.group(1))
base = run("pass", a.n)
for s in a.stmts:
    t = run(s, a.n)
    print(f"{(t - base) / a.n:>12,.0f}  {s}")
