"""MemorySaver's run queue: the reference of :mod:`graphckpt.savers.queue`'s rules, in dictionaries."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from graphckpt import ids
from graphckpt.errors import ThreadBusyError
from graphckpt.savers._checks import brief, check_storable, thread_busy
from graphckpt.savers.base import Lease, Owner
from graphckpt.savers.queue import FAIR_WINDOW, GRAPHLESS, RunQueue, RunRecord, RunStatus, namespace_of


class MemoryRuns(RunQueue):
    """Mixed into :class:`~graphckpt.savers.memory.MemorySaver` (whose ``_threads`` it reads)."""

    if TYPE_CHECKING:
        _threads: dict[str, Any]

    @property
    def _runs(self) -> dict[str, RunRecord]:
        runs: dict[str, RunRecord] | None = self.__dict__.get("_run_rows")
        if runs is None:
            runs = self.__dict__["_run_rows"] = {}
        return runs

    def _active(self, thread_id: str) -> RunRecord | None:
        return next(
            (r for r in self._runs.values() if r.thread_id == thread_id and r.status in ("queued", "running")), None
        )

    def _live_lease(self, thread_id: str, now: float) -> Lease | None:
        thread = self._threads.get(thread_id)
        if thread is None or thread.deleted or thread.record.status != "running":
            return None
        lease: Lease | None = thread.record.lease
        return lease if lease is not None and lease.live(now) else None

    def end_run(self, thread_id: str, fence: str, status: str, error: str | None, now: float) -> None:
        """The commit's part: the running run of this claim ends with the thread's stop."""
        for run in self._runs.values():
            if run.thread_id == thread_id and run.status == "running" and run.fence == fence:
                self._runs[run.run_id] = dataclasses.replace(run, status=status, ended_at=now, error=error)  # type: ignore[arg-type]

    def renew_run(self, thread_id: str, fence: str, lease_until: float) -> None:
        for run in self._runs.values():
            if run.thread_id == thread_id and run.status == "running" and run.fence == fence:
                self._runs[run.run_id] = dataclasses.replace(run, lease_until=lease_until)

    async def enqueue_run(self, run: RunRecord, *, reject_busy: bool) -> None:
        check_storable(thread_id=run.thread_id, run_id=run.run_id, graph=run.graph)
        now = ids.now()
        if reject_busy:
            active = self._active(run.thread_id)
            if active is not None:
                raise ThreadBusyError(
                    f"thread {brief(run.thread_id)!r} already has run {active.run_id} {active.status} "
                    "(multitask='reject'; use multitask='enqueue' to run after it)",
                    thread_id=run.thread_id,
                )
            lease = self._live_lease(run.thread_id, now)
            if lease is not None:
                raise thread_busy(run.thread_id, lease, now)
        self._runs[run.run_id] = dataclasses.replace(run, status="queued", created_at=run.created_at or now)

    async def claim_run(
        self, owner: Owner, *, graphs: Sequence[str], fence: str, lease_until: float
    ) -> RunRecord | None:
        now = ids.now()
        running = {r.thread_id for r in self._runs.values() if r.status == "running"}
        busy = Counter(namespace_of(t) for t in running)
        queued = sorted(
            (r for r in self._runs.values() if r.status == "queued"), key=lambda r: (r.created_at, r.run_id)
        )
        claimable = [
            (rank, run)
            for rank, run in enumerate(queued)
            if run.graph in graphs and run.thread_id not in running and self._live_lease(run.thread_id, now) is None
        ]
        fair = [(busy[namespace_of(run.thread_id)], rank, run) for rank, run in claimable if rank < FAIR_WINDOW]
        if fair:
            run = min(fair, key=lambda item: item[:2])[2]
        elif claimable:
            run = claimable[0][1]
        else:
            return None
        claimed = dataclasses.replace(
            run,
            status="running",
            attempt=run.attempt + 1,
            worker=owner.worker_id,
            fence=fence,
            lease_until=lease_until,
            started_at=now,
        )
        self._runs[run.run_id] = claimed
        return claimed

    async def finish_run(self, run_id: str, *, fence: str, status: RunStatus, error: str | None = None) -> None:
        run = self._runs.get(run_id)
        if run is None or run.status != "running" or run.fence != fence:
            return
        if status == "queued":
            self._runs[run_id] = dataclasses.replace(run, status="queued", fence=None, lease_until=None, error=error)
        else:
            self._runs[run_id] = dataclasses.replace(run, status=status, error=error, ended_at=ids.now())

    async def cancel_run(self, run_id: str) -> bool:
        run = self._runs.get(run_id)
        if run is None or run.status != "queued":
            return False
        self._runs[run_id] = dataclasses.replace(run, status="cancelled", ended_at=ids.now())
        return True

    @property
    def _cancel_asked(self) -> set[str]:
        asked: set[str] | None = self.__dict__.get("_cancel_rows")
        if asked is None:
            asked = self.__dict__["_cancel_rows"] = set()
        return asked

    async def request_cancel(self, run_id: str) -> bool:
        run = self._runs.get(run_id)
        if run is None or run.status != "running":
            return False
        self._cancel_asked.add(run_id)
        return True

    async def cancel_requested(self, run_id: str) -> bool:
        run = self._runs.get(run_id)
        return run is not None and run.status == "running" and run_id in self._cancel_asked

    async def delete_run(self, run_id: str) -> bool:
        run = self._runs.get(run_id)
        if run is None or run.status in ("queued", "running"):
            return False
        del self._runs[run_id]
        return True

    async def get_run(self, run_id: str) -> RunRecord | None:
        return self._runs.get(run_id)

    async def list_runs(self, *, thread_id: str | None = None, status: RunStatus | None = None) -> list[RunRecord]:
        rows = sorted(self._runs.values(), key=lambda r: (r.created_at, r.run_id))
        return [r for r in rows if thread_id in (None, r.thread_id) and status in (None, r.status)]

    async def requeue_expired(self, now: float) -> int:
        moved = 0
        for run in list(self._runs.values()):
            if run.status == "running" and run.lease_until is not None and run.lease_until < now:
                self._runs[run.run_id] = dataclasses.replace(run, status="queued", fence=None, lease_until=None)
                moved += 1
            elif run.status == "queued" and run.graph is None:  # nothing can claim it (see GRAPHLESS)
                self._runs[run.run_id] = dataclasses.replace(run, status="cancelled", ended_at=now, error=GRAPHLESS)
        for thread_id, thread in self._threads.items():
            record = thread.record
            lease = record.lease
            if thread.deleted or record.status != "running" or lease is None or lease.lease_until >= now:
                continue
            if isinstance(record.metadata.get("subgraph"), dict):  # a child thread: its parent's resume continues it
                continue
            if self._active(thread_id) is None:
                tags = record.metadata.get("tags")
                graph = tags.get("graph") if isinstance(tags, dict) else None
                if not isinstance(graph, str):  # run outside the queue: it stays crashed (no worker could claim it)
                    continue
                run_id = ids.new_id()
                self._runs[run_id] = RunRecord(run_id, thread_id, "resume", "queued", graph, created_at=now)
                moved += 1
        return moved

    @property
    def _created(self) -> dict[str, tuple[str, float]]:
        created: dict[str, tuple[str, float]] | None = self.__dict__.get("_created_rows")
        if created is None:
            created = self.__dict__["_created_rows"] = {}
        return created

    async def put_created_thread(self, thread_id: str, tags: str, created_at: float) -> bool:
        check_storable(thread_id=thread_id)
        if thread_id in self._created:
            return False
        self._created[thread_id] = (tags, created_at)
        return True

    async def get_created_thread(self, thread_id: str) -> tuple[str, float] | None:
        return self._created.get(thread_id)

    async def delete_created_thread(self, thread_id: str) -> None:
        self._created.pop(thread_id, None)

    def forget_runs(self, thread_id: str) -> None:
        """Drop the thread's runs and its created-thread row (a delete erases them)."""
        for run_id in [r.run_id for r in self._runs.values() if r.thread_id == thread_id]:
            del self._runs[run_id]
        self._created.pop(thread_id, None)
