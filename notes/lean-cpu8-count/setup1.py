import json, yarl, os
from countersign.adapters.base import CallMeta, render_url
from countersign.observability import tracing
from countersign.keyring import Keyring, _json_strings
from countersign.path.cards import owner
from countersign.v1 import common_pb2
raw = bytearray(b'{"id":"t_1a2b3c4d5e6f","title":"0123456789ab","dueAt":null,"priority":null,"status":"open","version":1,"owner":"u_bench"}')
rawb = bytes(raw)
url = "http://127.0.0.1:40000/todos"
meta = CallMeta("a"*32, 1, "v1", "bench", "u", "u", "en", "", tracing.outgoing_headers)
kr = Keyring("k1", {"k1": b"k"*32})
ctx = common_pb2.CallContext(tenant_id="bench", actor_id="u", subject_id="u", session_id="s", role="user", locale="en")
