"""``QueueRuns``: the server's :class:`~graphckpt.server.execution.base.RunExecutor` over the durable run queue.

A run the server creates is a ``runs`` row (:func:`graphckpt.runs.submit`); a :class:`~graphckpt.worker.Worker`
claims and executes it: by default ``workers`` in-process ones started with the server, or none (``workers=0``,
``graphckpt serve --no-workers``) when separate ``graphckpt worker`` processes on the same database execute them.
Either way the stream a client reads comes from the event log, so the process serving it need not be the one
running the thread. Run records are read from the ``runs`` table and survive a restart; the Worker's sweeper is the
recovery (a run whose worker died is re-queued, a crashed thread gets a resume queued), so the server has no scan of
its own.

Statuses are LangGraph's: ``queued`` is ``pending``, ``done`` is ``success``, ``failed`` is ``error``;
``running``, ``interrupted`` and ``cancelled`` keep their names. Cancel: a queued run is cancelled in the queue; a
running run stops after its current step (lease released, run ``cancelled``): at once when this server's own
worker runs it (and within :data:`~graphckpt.worker.CANCEL_GRACE` seconds even when its step does not end: the task is
cancelled), else through the queue's cancel request (``cancel_requested``), which the run's worker reads between
steps (at most every :data:`~graphckpt.worker.CANCEL_CHECK` seconds). A cancel answers once the run has stopped.
A run keeps the request's tags (the UI's ``via``, ``ui_action``) in its payload (:data:`~graphckpt.runs.ENVELOPE`).

What the API adds to a run (its own metadata, its multitask strategy, the event cursor its stream starts at, its
recursion limit) travels in the run's payload (:data:`~graphckpt.runs.ENVELOPE`): the worker that runs it applies
the recursion limit, and any server reads the rest back from the row, after a restart too (a run's stream is
replayed from its start). Only a resume the sweeper queued has none of them (strategy ``enqueue``, no start). The
decoded facts of recent runs are cached here (a payload never changes)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from graphckpt.errors import ThreadBusyError
from graphckpt.prune import TTL_SWEEP_EVERY
from graphckpt.runs import Multitask, submit, submitted
from graphckpt.savers.queue import TERMINAL, RunQueue, RunRecord
from graphckpt.savers.queue import RunStatus as QueueStatus
from graphckpt.server.errors import ApiError
from graphckpt.server.events.ephemeral import Ephemera
from graphckpt.server.execution.base import (
    RunConflict,
    RunInfo,
    RunRequest,
    RunStatus,
    Thread,
    check_request,
    inherited_tags,
    refuse_unended,
)
from graphckpt.server.graphs import Graphs
from graphckpt.server.records import PendingThread, thread_tags

if TYPE_CHECKING:
    from graphckpt.worker import Worker

__all__ = ["KEEP_LOCAL", "STATUS", "WATCH_EVERY", "QueueRuns"]

logger = logging.getLogger("graphckpt.server")

STATUS: Mapping[str, RunStatus] = {
    "queued": "pending",
    "running": "running",
    "done": "success",
    "failed": "error",
    "interrupted": "interrupted",
    "cancelled": "cancelled",
}
"""The queue's run statuses as LangGraph's."""

WATCH_EVERY = 0.05
"""How often (seconds) the runs someone waits for are read back from the queue."""

KEEP_LOCAL = 10_000
"""How many recent runs' decoded facts (metadata, strategy, stream start, recursion limit) this process caches."""


@dataclass(frozen=True)
class _Facts:
    """What a run was submitted with, decoded from its payload once (it never changes)."""

    multitask: str
    start: tuple[int, int] | None
    metadata: Mapping[str, Any]
    recursion_limit: int | None
    stream_mode: tuple[str, ...] = ()


class QueueRuns:
    """Runs through the queue of ``graphs.saver``, executed by ``workers`` in-process workers (0: by others) whose
    runs' ephemeral events go to ``ephemera`` (while a stream wants them)."""

    def __init__(
        self,
        graphs: Graphs,
        ephemera: Ephemera,
        *,
        workers: int = 1,
        concurrency: int = 8,
        ttl_sweep_every: float | None = TTL_SWEEP_EVERY,
    ) -> None:
        if type(workers) is not int or workers < 0:
            raise ValueError(f"workers must be a number of in-process workers (0 or more), not {workers!r}")
        if not isinstance(graphs.saver, RunQueue):
            raise TypeError(f"{type(graphs.saver).__name__} has no run queue")
        self.graphs, self.ephemera = graphs, ephemera
        self.queue: RunQueue = graphs.saver
        self.workers: list[Worker] = []
        self._count, self._concurrency = workers, concurrency
        self.ttl_sweep_every = ttl_sweep_every
        """How often each in-process worker sweeps expired threads (one sweeper at a time per store)."""
        self._tasks: list[asyncio.Task[None]] = []
        self._facts: dict[str, _Facts] = {}
        self._active: dict[str, str] = {}
        """Thread id -> run id of the unfinished runs this process created (what :meth:`active` answers)."""
        self._waiters: dict[str, asyncio.Event] = {}
        self._watcher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        from graphckpt.worker import Worker

        for n in range(self._count):
            worker = Worker(
                self.graphs.by_ref(), concurrency=self._concurrency, poll=0.25, ttl_sweep_every=self.ttl_sweep_every
            )
            worker.on_end.append(self._ended)
            worker.on_begin.append(self.ephemera.attach)  # its ephemeral events, while streamed
            worker.on_end.append(self.ephemera.ended)
            self.workers.append(worker)
            self._tasks.append(asyncio.create_task(worker.run(), name=f"graphckpt-worker-{n}"))
        self._watcher = asyncio.create_task(self._watch(), name="graphckpt-run-watcher")

    async def stop(self) -> None:
        """Stop the in-process workers gracefully: each running run stops after its step and goes back to the
        queue (another server or worker takes it from there)."""
        for worker in self.workers:
            worker.stop()
        for task in self._tasks:
            with contextlib.suppress(Exception):
                await task
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher

    def active(self, thread_id: str) -> bool:
        return thread_id in self._active

    async def submit(
        self,
        request: RunRequest,
        *,
        thread: Thread,
        multitask: str,
        start: tuple[int, int],
        metadata: Mapping[str, Any] | None = None,
    ) -> RunInfo:
        """Queue ``request`` (see :meth:`RunExecutor.submit`): the thread's state is checked here (unless it has a
        run: this one queues after it), its input once, by :func:`graphckpt.runs.submit`."""
        sid = request.thread_id
        app = self.graphs.app(request.graph_id)
        busy = [r for r in await app.aruns(thread_id=sid) if r.status in ("queued", "running")]
        if busy and multitask == "reject":
            raise RunConflict(f"thread {sid!r} already has a run (multitask_strategy 'enqueue' queues after it)")
        if not busy:
            check_request(self.graphs, thread, request, validate=False)
        mode: Multitask = "enqueue" if multitask == "enqueue" else "reject"
        options: dict[str, Any] = {
            "multitask": mode,
            "graph": request.graph_id,
            "tags": self._run_tags(request, thread),
            "recursion_limit": request.recursion_limit,
            "metadata": metadata,
            "start": start,
            "stream_mode": request.stream_mode,
            "options": request.options,
        }
        parts = (self.queue, app.graph, app.codec.serde)
        try:
            if request.resume:
                run = await submit(*parts, thread_id=sid, resume=True, answer=request.answer, **options)
            else:
                run = await submit(*parts, request.input or {}, thread_id=sid, **options)
        except ThreadBusyError as exc:
            raise RunConflict(str(exc)) from None
        self._active[sid] = run.run_id
        for worker in self.workers:
            worker.wake()
        self._waiters[run.run_id] = asyncio.Event()
        return self._info(run)

    def _run_tags(self, request: RunRequest, thread: Thread) -> Mapping[str, Any] | None:
        """The tags the run's checkpoints take: the request's; else a resume keeps the thread's (see
        :func:`~graphckpt.server.execution.base.inherited_tags`), and an input gets the thread's (its head's, or
        those of a thread created before its first checkpoint) with ``metadata`` the request's (the thread's
        metadata, which its checkpoints keep as ``tags.metadata``). A request's ``ttl`` replaces the thread's."""
        ttl = {"ttl": dict(request.ttl)} if request.ttl is not None else {}
        if request.tags is not None:
            return {**request.tags, **ttl}
        inherited = inherited_tags(thread)
        base = inherited
        if base is None and (ttl or not request.resume):
            base = thread.tags if isinstance(thread, PendingThread) else thread_tags(thread) if thread else {}
        if request.resume:
            return None if base is None else {**base, **ttl}
        return {**(base or {}), "metadata": dict(request.metadata), **ttl}

    def _info(self, run: RunRecord) -> RunInfo:
        graph = self.graphs.served(run.graph)
        facts = self._facts_of(run, graph)
        info = RunInfo(
            run.run_id,
            RunRequest(
                run.thread_id,
                graph,
                resume=run.kind == "resume",
                recursion_limit=facts.recursion_limit,
                stream_mode=facts.stream_mode,
            ),
            facts.multitask,
            facts.start,
            dict(facts.metadata),
            STATUS.get(run.status, "error"),
            run.error,
            run.created_at,
            run.ended_at or run.started_at or run.created_at,
        )
        if run.status in TERMINAL:
            info.done.set()
            self._settle(info)
        return info

    def _facts_of(self, run: RunRecord, graph: str) -> _Facts:
        """The run's submitted facts from its payload (cached); a payload this server cannot read has none (the
        run is still listed: its row is what matters)."""
        facts = self._facts.get(run.run_id)
        if facts is None:
            try:
                found = submitted(self.graphs.apps[graph].codec.serde, run)
            except Exception as exc:
                logger.warning("run %s: its payload cannot be read (%s); shown without its options", run.run_id, exc)
                facts = _Facts("enqueue", None, {}, None)
            else:
                facts = _Facts(
                    found.multitask or "enqueue", found.start, found.metadata, found.recursion_limit, found.stream_mode
                )
            self._facts[run.run_id] = facts
            while len(self._facts) > KEEP_LOCAL:
                del self._facts[next(iter(self._facts))]
        return facts

    async def get(self, run_id: str) -> RunInfo | None:
        run = await self.queue.get_run(run_id)
        return None if run is None else self._info(run)

    async def list(self, thread_id: str) -> list[RunInfo]:
        runs = await self.queue.list_runs(thread_id=thread_id)
        return sorted((self._info(r) for r in runs), key=lambda r: (r.created_at, r.run_id), reverse=True)

    async def cancel(self, run_id: str, *, immediate: bool = False, interrupted: bool = False) -> RunInfo:
        saver = self.queue
        if not await saver.cancel_run(run_id):
            run = await saver.get_run(run_id)
            if run is not None and run.status == "running":
                end: QueueStatus = "interrupted" if interrupted else "cancelled"
                if not any(worker.cancel(run_id, immediate=immediate, status=end) for worker in self.workers):
                    await saver.request_cancel(run_id)  # another process's worker: it stops after its step
                return await self.join(run_id)
        info = await self.get(run_id)
        if info is None:
            raise ApiError(404, "NotFound", f"no run {run_id!r}")
        self._settle(info)
        return info

    async def delete(self, run_id: str) -> None:
        if not await self.queue.delete_run(run_id):
            if await self.queue.get_run(run_id) is None:
                raise ApiError(404, "NotFound", f"no run {run_id!r}")
            raise refuse_unended(run_id)
        self._facts.pop(run_id, None)
        self._waiters.pop(run_id, None)

    async def cancel_thread(self, thread_id: str) -> None:
        for run in await self.queue.list_runs(thread_id=thread_id):
            if run.status in ("queued", "running"):
                with contextlib.suppress(ApiError):
                    await self.cancel(run.run_id)

    async def join(self, run_id: str) -> RunInfo:
        event = self._waiters.setdefault(run_id, asyncio.Event())
        while True:
            event.clear()  # before the read: an end after it sets it again
            info = await self.get(run_id)
            if info is None or info.finished:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), 1.0)
        if info is None:
            raise ApiError(404, "NotFound", f"no run {run_id!r}")
        self._settle(info)
        return info

    def _ended(self, run_id: str) -> None:
        """An in-process worker ended ``run_id``: wake whoever waits for it now, not at the next watch."""
        waiter = self._waiters.get(run_id)
        if waiter is not None:
            waiter.set()

    def _settle(self, info: RunInfo) -> None:
        if info.finished:
            if self._active.get(info.request.thread_id) == info.run_id:
                del self._active[info.request.thread_id]
            waiter = self._waiters.pop(info.run_id, None)
            if waiter is not None:
                waiter.set()

    async def _watch(self) -> None:
        """Read back the unfinished runs this process created or someone waits for; wake their waiters."""
        while True:
            await asyncio.sleep(WATCH_EVERY)
            watched = set(self._waiters) | set(self._active.values())
            for run_id in watched:
                try:
                    info = await self.get(run_id)
                except Exception as exc:  # the store is unreachable for a moment: try again next time
                    logger.warning("reading run %s failed: %s", run_id, exc)
                    break
                if info is None:
                    self._waiters.pop(run_id, None)
                    self._active = {t: r for t, r in self._active.items() if r != run_id}
                else:
                    self._settle(info)
