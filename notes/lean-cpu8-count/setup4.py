import json
from countersign.registry.load import load
from countersign.path import policy
from countersign.keyring import Keyring
from countersign.path.cards import owner
from countersign.v1 import common_pb2
from countersign.store import connect
from countersign.adapters import http as H
reg = load("examples/registry.yaml")
tool = reg.tools["create_todo"] if hasattr(reg, "tools") and isinstance(reg.tools, dict) else reg.tool("create_todo")
args = {"title": "0123456789ab"}
ctx = common_pb2.CallContext(tenant_id="bench", actor_id="u", subject_id="u", session_id="s", role="user", locale="en")
kr = Keyring("k1", {"k1": b"k"*32})
raw = bytearray(b'{"id":"t_1a2b3c4d5e6f","title":"0123456789ab","dueAt":null,"priority":null,"status":"open","version":1,"owner":"u_bench"}')
class _Base:
    def pack_command(self, *args): return None
P = connect.packed_by_hiredis(_Base)()
sargs = ("EVALSHA", "a"*40, 3, "k:a", "k:b", "k:c") + tuple("x%d" % i for i in range(14)) + (b"o"*200, 86400000)
class _R:
    content_length = len(raw)
    headers = {}
    async def read(self): return bytes(raw)
R = _R()
import asyncio
def rd():
    c = H._read(R, 1 << 20)
    try:
        c.send(None)
    except StopIteration as e:
        return e.value
