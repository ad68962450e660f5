import json, time
from countersign.registry.load import load
from countersign.path.cards import Card
from countersign.adapters.base import Kind, Outcome, receipt_problem, field_of
from countersign.adapters.http import classify
from countersign.adapters.http import Answer
from countersign.path import receipts
from countersign.path.receipts import to_action, evidence, seal_action
from countersign.canonical import canonical, compact, _plain
from countersign.keyring import Keyring
from countersign.v1 import common_pb2
import countersign.adapters.http as H
reg = load("examples/registry.yaml")
tool = reg.tools["create_todo"] if hasattr(reg, "tools") and isinstance(reg.tools, dict) else reg.tool("create_todo")
raw = b'{"id":"t_1a2b3c4d5e6f","title":"0123456789ab","dueAt":null,"priority":null,"status":"open","version":1,"owner":"u_bench"}'
body = json.loads(raw)
aid = "a_" + "0"*43
card = Card(aid, "k1", "b"*43, "create_todo", "todo.create", "low", "default", "v1", {"title": "0123456789ab"}, "", {}, 1, 2)
outcome = Outcome(Kind.SUCCEEDED, status="201", body=body, resource_id="t_1a2b3c4d5e6f", resource_version="1")
now_ms = 1764700000000
answer = Answer(201, body)
from countersign.adapters.base import CallMeta
from countersign.observability import tracing
from countersign.store import states
kr = Keyring(active="k1", keys={"k1": b"x" * 32})
act = to_action(aid, tool, card, outcome, now_ms)
out = act.SerializeToString(deterministic=True)
meta = CallMeta(idempotency_key=aid, attempt=1, policy_version="v1", tenant_id="t", actor_id="a", subject_id="s", locale="zh-CN", if_match="", trace_headers=tracing.outgoing_headers)
