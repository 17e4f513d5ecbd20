"""What an app offers over its data's lifecycle: erasing a thread and pruning threads by policy (mixed into
:class:`~graphckpt.app.App`; the work is :mod:`graphckpt.erase` and :mod:`graphckpt.prune`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from graphckpt.erase import erase_thread
from graphckpt.prune import PruneReport, prune
from graphckpt.savers.base import Saver, Status
from graphckpt.sync import SyncFacade, sync_twin

__all__ = ["DataLifecycle"]


class DataLifecycle(SyncFacade):
    """Deleting and pruning threads; needs ``saver``."""

    saver: Saver

    async def adelete_thread(self, thread_id: str, *, cascade: bool = False) -> list[str]:
        """Erase a thread and the child threads its subgraphs ran; refused (naming them) when forks depend on it,
        unless ``cascade`` deletes them too. Returns the deleted ids (see :func:`graphckpt.erase.erase_thread`)."""
        return await erase_thread(self.saver, thread_id, cascade=cascade)

    async def aprune(
        self,
        *,
        older_than: Any = None,
        status: Iterable[Status] | None = None,
        thread_ids: Iterable[str] | None = None,
        expired: bool = False,
        keep_last: int | None = None,
        dry_run: bool = False,
    ) -> PruneReport:
        """Remove the threads matching every policy given: last activity older than ``older_than`` (seconds or
        ``"30d"``), a status in ``status``, an id in ``thread_ids``, an expired TTL; with ``keep_last`` the threads
        chosen (every thread when no other policy is given) keep their last ``keep_last`` checkpoints instead of
        going. ``dry_run`` only reports. What surviving threads need stays (see :mod:`graphckpt.prune`)."""
        return await prune(
            self.saver,
            older_than=older_than,
            status=status,
            thread_ids=thread_ids,
            expired=expired,
            keep_last=keep_last,
            dry_run=dry_run,
        )

    delete_thread, prune = sync_twin(adelete_thread), sync_twin(aprune)
