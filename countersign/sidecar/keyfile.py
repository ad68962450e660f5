"""`countersign keys generate`: a keys file the sidecars and the operator CLI share.

    {"active": "<kid>", "keys": {"<kid>": "<64 hex digits>"}}

With ``--from FILE`` the keys already there are kept, the new one becomes active, and the old file's id key
(its ``id_key``, else its key with the smallest key id) is written as ``id_key``: action ids never change with
a rotation, whatever the new key is called, and the old key may go later (docs/runbook.md, "Rotating keys").
The file is written 0600 and never overwritten.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time

from countersign.errors import SettingsError
from countersign.keyring import MIN_KEY_BYTES, Keyring


def generate(kid: str = "", previous: str = "") -> dict[str, object]:
    kid = kid or time.strftime("k%Y%m%d%H%M%S", time.gmtime())
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", kid):  # what Keyring.from_file accepts
        raise SettingsError(f"--kid {kid!r}: 1 to 32 letters, digits, '-' or '_'")
    keys: dict[str, str] = {}
    pinned: dict[str, str] = {}
    if previous:
        old = Keyring.from_file(previous)  # validated like a sidecar would
        keys = {k: v.hex() for k, v in old.keys.items()}
        if kid in keys:
            raise SettingsError(f"keys file {previous}: key id {kid!r} is already there; pick another --kid")
        pinned = {"id_key": old.id_key.hex()}  # a new smallest key id would otherwise change every id
    keys[kid] = secrets.token_hex(MIN_KEY_BYTES)
    return {"active": kid, **pinned, "keys": keys}


def write(doc: dict[str, object], path: str) -> None:
    """Create ``path`` 0600 with the keys; refuse to overwrite (an overwritten key orphans every card)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise SettingsError(f"{path} exists: not overwriting keys (use --from {path} --out NEW to rotate)") from exc
    except OSError as exc:
        raise SettingsError(f"{path}: cannot write: {exc}") from exc
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(doc, indent=2) + "\n")
