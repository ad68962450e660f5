"""What the sidecar trusts (docs/design.md §12), loaded at start: its HMAC keys, the id key this Redis's actions
were derived with, the approval issuers, and a reply guard lexicon folder given with --guard-lexicon. Anything that
cannot be loaded stops the start."""

from __future__ import annotations

import json
import logging

from countersign.approvals import ApprovalSettingsError, Verifier
from countersign.errors import SettingsError, StoreUnavailable
from countersign.keyring import Keyring
from countersign.reply.guard_loader import GuardLoader
from countersign.sidecar.settings import Settings
from countersign.store.redis_store import RedisStore

log = logging.getLogger("countersign")


def load_keys(settings: Settings) -> Keyring:
    if settings.keys_file:
        return Keyring.from_file(settings.keys_file)
    log.warning(
        "COUNTERSIGN_KEYS_FILE is not set: a random key was generated. Tokens will not survive a "
        "restart and will not work across replicas. Do not run like this in production.",
        extra={"event": "generated_key"},
    )
    return Keyring.generate()


async def check_id_key(store: RedisStore, keyring: Keyring) -> None:
    """Refuse to start when this keys file derives action ids with another id key than the sidecars that used
    this Redis before (docs/design.md §7): one call would become two actions, and could run twice."""
    if keyring.generated:
        return
    mine = keyring.id_fingerprint()
    try:
        pinned = await store.pin_id_key(mine)
    except StoreUnavailable as exc:
        log.warning(
            json.dumps(
                {
                    "event": "id_key_unchecked",
                    "message": f"could not compare the id key with the one this Redis's actions use: {exc.message}",
                }
            )
        )
        return
    if pinned.rpartition(":")[2] != mine.rpartition(":")[2]:  # the same key, wherever it is written
        source = pinned.split(":", 1)[0]
        keep = (
            'the same "id_key"'
            if source == "id_key"
            else f'key {source!r} listed (it need not be active), or pin it as "id_key"'
        )
        raise SettingsError(
            f"the keys file derives action ids from {keyring.id_key_source!r} (fingerprint {mine}), but the actions "
            f"in this Redis were derived from {source!r} ({pinned}): two id keys on one Redis make one call two "
            f"actions. Keep {keep}; see docs/runbook.md, 'Rotating keys'"
        )


async def load_approvals(settings: Settings) -> Verifier | None:
    """The approval issuers and their keys (a key that cannot be loaded stops the start, as a bad registry does);
    None without any (``warn_without_issuer`` says so once the sidecar has started)."""
    if not settings.approvals:
        return None
    try:
        return await Verifier.load(settings.approvals)
    except ApprovalSettingsError as exc:
        raise SettingsError(f"--approvals: {exc}") from exc


def warn_without_issuer() -> None:
    """One loud warning, once the sidecar has started (a start that fails says only why): without an approval issuer
    writes are confirmable without proof that a user approved them."""
    log.warning(
        "NO APPROVAL ISSUER IS CONFIGURED (--approvals / COUNTERSIGN_APPROVALS): every write is confirmable by "
        "the confirmation token alone, which the agent holds; nothing proves that a user approved it. "
        "Configure the app backend or identity provider that signs approvals (docs/approvals.md).",
        extra={"event": "no_approval_issuer"},
    )


def load_guard(settings: Settings) -> GuardLoader:
    """The packaged lexicons are built on first need (reply/guard_loader.py); a folder given with --guard-lexicon
    is built and checked now, so a faulty one stops the start. With --guard-veto on the veto's weights are read
    and their digests checked now too: a changed byte stops the start."""
    use_veto = settings.guard_veto == "on"
    if use_veto:
        from countersign.guard.veto import VetoError, check

        try:
            check()
        except VetoError as exc:
            raise SettingsError(f"--guard-veto on: {exc}") from exc
    if not settings.guard_lexicon:
        return GuardLoader(None, unsupported=settings.guard_unsupported, use_veto=use_veto)
    from countersign.guard import LexiconError, ReplyGuard

    try:
        guard = ReplyGuard.load(settings.guard_lexicon, unsupported=settings.guard_unsupported, use_veto=use_veto)
        return GuardLoader.ready(guard)
    except LexiconError as exc:
        raise SettingsError(f"--guard-lexicon: {exc}") from exc
