"""The reply guard, built when a reply is first checked rather than at start.

Compiling the packaged lexicons (several hundred regular expressions, the verb tables) and importing the guard's
modules took about half of the sidecar's start-up and 23 MB of its resident memory (notes/lean.md), which every
pod paid although many agents never ask for a reply check. The build runs in a worker thread, so the event loop
keeps serving while it runs; callers that need the guard meanwhile wait for it. A lexicon folder given with
--guard-lexicon is still built and checked at start (app.py), so a faulty one stops the start, naming its fault.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from countersign.guard import ReplyGuard


class GuardLoader:
    """One ReplyGuard, built once on first need (``get``), or handed in built (``ready``)."""

    def __init__(self, folder: str | None = None, unsupported: str = "flag", use_veto: bool = False) -> None:
        self.folder, self.unsupported, self.use_veto = folder, unsupported, use_veto
        self._future: Future[ReplyGuard] = Future()
        self._started = False
        self._lock = threading.Lock()

    @classmethod
    def ready(cls, guard: ReplyGuard) -> GuardLoader:
        loader = cls()
        loader._started = True
        loader._future.set_result(guard)
        return loader

    def start(self) -> None:
        """Begin the build in a daemon thread (once; later calls do nothing)."""
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._build, name="countersign-guard-build", daemon=True).start()

    def _build(self) -> None:
        try:
            from countersign.guard import ReplyGuard

            self._future.set_result(ReplyGuard.load(self.folder, unsupported=self.unsupported, use_veto=self.use_veto))
        except BaseException as exc:  # handed to every caller that waits (a broken install, never a lexicon fault)
            self._future.set_exception(exc)

    async def get(self) -> ReplyGuard:
        if self._future.done():
            return self._future.result()
        self.start()
        return await asyncio.wrap_future(self._future)
