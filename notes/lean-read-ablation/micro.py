import sys, timeit, json
sys.path.insert(0, "/work/wt/lean-read")
from countersign.registry.load import load
from countersign.path import policy, turn
from countersign.keyring import Keyring
from countersign.testing import processes
from countersign.v1 import common_pb2
from countersign.adapters.base import CallMeta, render_url
from countersign.observability import tracing
reg = load("/work/wt/lean-read/examples/registry.yaml")
ctx = common_pb2.CallContext(tenant_id="bench-tenant", actor_id="bench-reader", subject_id="bench-reader", session_id="bench-session", request_id="0"*32, role="user", locale="en")
import inspect
print(inspect.signature(Keyring.__init__))
kr = Keyring.generate()
tool = reg.tools["list_todos"]
def t(name, stmt, n=20000):
    s = min(timeit.repeat(stmt, number=n, repeat=5, globals=globals())) / n * 1e6
    print(f"{name:<40} {s:8.2f} us")
t("policy.authorize", "policy.authorize(reg, ctx, 'list_todos', '{\"status\": \"done\"}', policy.Phase.INVOKE)")
t("decode_arguments", "policy.decode_arguments('{\"status\": \"done\"}')")
t("json.loads plain", "json.loads('{\"status\": \"done\"}')")
t("validate", "policy.validate(tool, {'status': 'done'})")
t("canonical", "policy.canonical({'status': 'done'})")
t("check_context", "policy.check_context(ctx)")
t("turn_key", "turn.turn_key(kr, ctx)")
t("quota derived_id", "kr.derived_id('quota', ctx.tenant_id)")
meta = CallMeta(policy_version=reg.policy_version, tenant_id="t", actor_id="a", subject_id="a", locale="en", trace_headers=tracing.outgoing_headers)
t("CallMeta()", "CallMeta(policy_version=reg.policy_version, tenant_id='t', actor_id='a', subject_id='a', locale='en', trace_headers=tracing.outgoing_headers)")
t("wire_headers", "meta.wire_headers()")
t("outgoing_headers", "tracing.outgoing_headers()")
t("render_url", "render_url(tool.adapter.execute.url, {'status': 'done', 'idempotency_key': '', 'action_id': ''})")
import yarl, aiohttp
t("yarl.URL encoded", "yarl.URL('http://127.0.0.1:8081/todos?status=done', encoded=True)")
t("ClientTimeout", "aiohttp.ClientTimeout(total=5.0)")
t("fact_entry", "turn.fact_entry('list_todos', 'succeeded', '0 result(s)')")
t("read_summary", "turn.read_summary(tool, {'todos': [], 'count': 0})")
t("json.dumps answer", "json.dumps({'todos': [], 'count': 0}, ensure_ascii=False)")
from countersign.v1 import gateway_pb2
t("InvokeResponse", "gateway_pb2.InvokeResponse(result=gateway_pb2.ToolResult(tool_name='list_todos', result_json='{}'))")
