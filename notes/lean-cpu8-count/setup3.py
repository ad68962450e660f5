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
from countersign.path import policy
from countersign.path.policy import _path_arguments, validate
from countersign.registry.templates import path_fields
args = {"title": "0123456789ab"}
from countersign.v1 import common_pb2
ctx = common_pb2.CallContext(tenant_id="bench", actor_id="u", subject_id="u", session_id="s", role="user", locale="en")
import json
rawb = b'{"id":"t_1a2b3c4d5e6f","title":"0123456789ab","dueAt":null,"priority":null,"status":"open","version":1,"owner":"u_bench"}'
raw = bytearray(rawb)
_D = json.JSONDecoder()
from countersign.registry.templates import render
values = {**card.arguments, "action_id": aid, "idempotency_key": aid, "receipt.resource_id": "t_1", "receipt.resource_version": "1"}
from countersign.path.policy import resolve, _boundary, _normalise, _session_mode
