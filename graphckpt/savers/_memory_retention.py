"""MemorySaver's retention inside a live thread (:meth:`~graphckpt.savers.base.Saver.drop_steps`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from graphckpt.savers.base import kept_key

if TYPE_CHECKING:
    from graphckpt.savers.base import Blob, StoredEvent, StoredWrite


class MemoryRetention:
    """Mixed into :class:`~graphckpt.savers.memory.MemorySaver`."""

    if TYPE_CHECKING:  # what the mixin needs of the saver
        _threads: dict[str, Any]
        _blobs: dict[tuple[str, str], dict[int, Blob]]
        _writes: dict[tuple[str, str], dict[tuple[str, str, int], StoredWrite]]
        _events: dict[str, list[StoredEvent]]
        _version: int

        def _needed_steps(self, thread_id: str) -> int | None: ...

    async def drop_steps(self, thread_id: str, below: int, blobs_from: Mapping[str, int]) -> int:
        thread = self._threads.get(thread_id)
        if thread is None or thread.deleted or thread.record.head_step < below:
            return 0
        needed = self._needed_steps(thread_id)
        above = -1 if needed is None else needed
        dropped = [s for s in thread.steps if above < s < below]
        for step in dropped:
            cp = thread.by_step.pop(step)
            del thread.by_id[cp.checkpoint_id]
            self._writes.pop((thread_id, cp.checkpoint_id), None)
            self._writes.pop((thread_id, kept_key(cp.checkpoint_id)), None)
        thread.steps = [s for s in thread.steps if not above < s < below]
        events = self._events.get(thread_id, [])
        events[:] = [e for e in events if not above < e.step < below]
        for (tid, channel), blobs in list(self._blobs.items()):
            if tid == thread_id:
                first = min(blobs_from.get(channel, below), below)
                for step in [s for s in blobs if above < s < first]:
                    del blobs[step]
                if not blobs:
                    del self._blobs[(tid, channel)]
        self._version += 1
        return len(dropped)
