"""MemorySaver's durable waits: the reference of :mod:`graphckpt.savers.waits`' rules, in one dictionary."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from graphckpt import ids
from graphckpt.savers.queue import RunRecord
from graphckpt.savers.waits import WaitRecord, WaitStatus, WaitTable


class MemoryWaits(WaitTable):
    """Mixed into :class:`~graphckpt.savers.memory.MemorySaver` (whose threads and runs it reads and writes)."""

    if TYPE_CHECKING:
        _threads: dict[str, Any]

        @property
        def _runs(self) -> dict[str, RunRecord]: ...

    @property
    def _waits(self) -> dict[str, WaitRecord]:
        waits: dict[str, WaitRecord] | None = self.__dict__.get("_wait_rows")
        if waits is None:
            waits = self.__dict__["_wait_rows"] = {}
        return waits

    async def put_wait(self, thread_id: str, checkpoint_id: str, wake_at: float, answer: bytes | None) -> None:
        old = self._waits.get(thread_id)
        if old is not None and old.status == "pending" and old.checkpoint_id == checkpoint_id:
            wake_at = min(wake_at, old.wake_at)
        self._waits[thread_id] = WaitRecord(thread_id, checkpoint_id, wake_at, "pending", answer, ids.now())

    async def wake_due(self, now: float) -> list[str]:
        woken = []
        for wait in list(self._waits.values()):
            if wait.status != "pending" or wait.wake_at > now:
                continue
            thread = self._threads.get(wait.thread_id)
            record = None if thread is None or thread.deleted else thread.record
            if record is not None and record.status == "running" and record.head_checkpoint_id == wait.checkpoint_id:
                continue  # the node wrote its wait and is about to stop: fire after the stop commits
            graph = (record.metadata.get("tags") or {}).get("graph") if record is not None else None
            if record is not None and "subgraph" in record.metadata:
                graph = None  # a child thread's wait: its parent's stands for it
            if (
                record is None
                or record.status != "interrupted"
                or record.head_checkpoint_id != wait.checkpoint_id
                or not isinstance(graph, str)
            ):
                self._waits[wait.thread_id] = dataclasses.replace(wait, status="stale")
                continue
            run_id = ids.new_id()
            self._runs[run_id] = RunRecord(
                run_id, wait.thread_id, "resume", "queued", graph, wait.answer, created_at=now
            )
            self._waits[wait.thread_id] = dataclasses.replace(wait, status="fired", fired_at=now, run_id=run_id)
            woken.append(wait.thread_id)
        return woken

    async def list_waits(self, *, status: WaitStatus | None = None, thread_id: str | None = None) -> list[WaitRecord]:
        rows = [w for w in self._waits.values() if status in (None, w.status) and thread_id in (None, w.thread_id)]
        return sorted(rows, key=lambda w: (w.wake_at, w.thread_id))
