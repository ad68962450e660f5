"""Redis key names (docs/design.md §7). Every key of one action carries the action id as a hash tag
(``cs:{A}:card``, ``cs:{A}:run``, ...), so every script of an action touches one slot and runs unchanged on
Redis Cluster; a turn's list and a tenant's quota have tags of their own."""

from __future__ import annotations

ID_KEY = "cs:id-key"  # the fingerprint of the id key the actions in this Redis were derived with
OPEN_KEY = "cs:{open}"  # actions that may need reconciling, scored by when to look (one key: fine per deployment)
RUN_PATTERN = "cs:{*}:run"
EVENTS_PATTERN = "cs:{*}:events"
ACTION_PATTERN = "cs:{*}:*"


def card_key(action_id: str) -> str:
    """The READY card (a hash; expires with the card)."""
    return f"cs:{{{action_id}}}:card"


def run_key(action_id: str) -> str:
    """The run record from the claim on (a hash; a settled one lives for the replay TTL, an unresolved one
    forever)."""
    return f"cs:{{{action_id}}}:run"


def cont_key(action_id: str) -> str:
    """The action's reply continuation (a hash)."""
    return f"cs:{{{action_id}}}:cont"


def audit_key(action_id: str) -> str:
    """The action's audit anchor: seq, head, kid, mac (a hash)."""
    return f"cs:{{{action_id}}}:audit"


def events_key(action_id: str) -> str:
    """The action's audit events (a stream)."""
    return f"cs:{{{action_id}}}:events"


def turn_list_key(turn: str) -> str:
    """The read facts and proposed actions of one user turn (a list), under the turn's key (a keyed hash)."""
    return f"cs:req:{{{turn}}}"


def quota_key(tenant: str) -> str:
    """What one tenant keeps, for its quota (a sorted set, under a keyed hash of the tenant id)."""
    return f"cs:quota:{{{tenant}}}"


def action_of(key: str, kind: str) -> str:
    """The action id in a key ``cs:{A}:<kind>`` (as SCAN returns it)."""
    return key[4 : -(len(kind) + 2)]


def grants_key(owner: str) -> str:
    """One owner's standing grants (a hash: each grant sealed, its expiry, the uses taken, whether revoked), under
    a keyed hash of tenant and actor that never changes when keys rotate: every grant script of one owner touches
    one slot."""
    return f"cs:grants:{{{owner}}}"


def grant_used_key(owner: str, grant_id: str) -> str:
    """The actions that took a use of one grant (a set), in its owner's slot."""
    return f"cs:grants:{{{owner}}}:{grant_id}:used"
