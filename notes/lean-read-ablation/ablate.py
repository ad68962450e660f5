"""The sidecar CLI with one piece of the read path cut out (for measuring what each piece costs; never safe)."""
import sys, json
variant = sys.argv[1]; sys.argv = [sys.argv[0], *sys.argv[2:]]
sys.path[:0] = ["/work/wt/lean-read"]
from countersign.path import pipeline
from countersign.store.redis_store import RedisStore
from countersign.adapters import http
from countersign.adapters.base import Outcome, Kind
for v in variant.split("+"):
    if v == "noremember":
        async def remember(self, *a, **k): return None
        RedisStore.remember = remember
    elif v == "bareget":
        async def execute(self, tool, arguments, meta, timeout):
            async with self._client().get("http://" + tool.adapter.execute.url.split("//")[1].split("/")[0] + "/todos", params={"status": "done"}, headers={"X-Countersign-Subject": meta.subject_id}) as r:
                body = await r.read()
            return Outcome(Kind.SUCCEEDED, status="200", body=json.loads(body))
        http.HttpAdapter.execute = execute
    elif v == "noget":
        async def execute(self, tool, arguments, meta, timeout):
            return Outcome(Kind.SUCCEEDED, status="200", body={"todos": [], "count": 0})
        http.HttpAdapter.execute = execute
    elif v == "nogate":
        from countersign.sidecar import admission
        admission.Gate.admit = lambda self, caller=("", ""), quick=False: (caller, quick)
        admission.Gate.release = lambda self, lane=None: None
    elif v == "fewheaders":
        from countersign.adapters.base import CallMeta
        CallMeta.wire_headers = lambda self: {"X-Countersign-Subject": self.subject_id}
    elif v == "notimeout":
        import aiohttp
        class _T:
            def ClientTimeout(total=None): return aiohttp.ClientTimeout()
            def __getattr__(self, n): return getattr(aiohttp, n)
        import types
        fake = types.SimpleNamespace(**{k: getattr(aiohttp, k) for k in dir(aiohttp) if not k.startswith("__")})
        fake.ClientTimeout = lambda total=None: aiohttp.ClientTimeout()
        http.aiohttp = fake
    elif v in ("asis", "asis2"):
        pass
    else:
        raise SystemExit(f"unknown variant {v}")
from countersign.sidecar import cli
sys.exit(cli.main())
