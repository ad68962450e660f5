import hashlib, _sha256
from countersign.keyring import _Pads
key = b"k" * 32
P = _Pads(key)
class _Pads2:
    __slots__ = ("inner", "outer")
    def __init__(self, key, sha):
        block = key.ljust(64, b"\0")
        self.inner = sha(block.translate(bytes(x ^ 0x36 for x in range(256))))
        self.outer = sha(block.translate(bytes(x ^ 0x5C for x in range(256))))
    def digest(self, message):
        inner = self.inner.copy()
        inner.update(message)
        outer = self.outer.copy()
        outer.update(inner.digest())
        return outer.digest()
P2 = _Pads2(key, _sha256.sha256)
m40 = b"bind:" + b'["tenant", "actor", "subject", "session", ""]'
m250 = b"record:outcome:" + b"x" * 235
assert P.digest(m250) == P2.digest(m250)
