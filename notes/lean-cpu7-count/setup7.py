from countersign.store.records import CardRecord, Anchor, Chained
from countersign.store.results import Won
from countersign.path.claim import Claimed
from countersign.path.policy import Allowed
rec = CardRecord("k1", "create_todo", b"x" * 500, "m" * 43, "b" * 32, "none", "", "low")
anc = Anchor("k1", "m" * 43)
