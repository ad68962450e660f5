import json
from countersign.store import connect
body = json.dumps({"action_id": "a"*32, "kid": "k1", "tool": "create_todo", "capability": "todo.create", "risk": "low", "confirmation": "default", "policy_version": "v1", "arguments": {"title": "0123456789ab"}, "binding": "b"*32, "tenant_binding": "c"*32, "resource_version": "", "preview": {"title": "Create a to-do", "target": "0123456789ab", "impact": "Confirming creates the to-do."}, "issued_at": 1764700000000, "expires_at": 1764700300000, "approval": "none", "approval_digest": "", "grant": ""}, separators=(",", ":")).encode()
try:
    from countersign.canonical import loads
except ImportError:
    loads = json.loads
class _Base:
    def pack_command(self, *args): return None
P = connect.packed_by_hiredis(_Base)()
cargs = ("EVALSHA", "a"*40, 2, "k:a", "k:b", "a"*32, "b"*32, "", "c"*24, 30000, "none")
