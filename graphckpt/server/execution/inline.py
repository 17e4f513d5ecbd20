"""``InProcessRuns``: the :class:`~graphckpt.server.execution.base.RunExecutor` that runs threads on the server's own
event loop, for an app whose saver has no run queue (the server uses :mod:`.queued` otherwise).

It keeps run records in memory (a restart forgets them; the threads and their events stay) and resumes the threads a
crash left behind: every ``recover_interval`` seconds it takes over the ``crashed`` ones (``running`` with an
expired lease: their process died), through the engine's lease claim, so a thread another live process runs is
never touched."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from graphckpt import begin, ids
from graphckpt.engine import Run
from graphckpt.errors import GraphckptError
from graphckpt.prune import TTL_SWEEP_EVERY, sweep_expired, with_ttl
from graphckpt.runs import with_options
from graphckpt.savers.queue import RunQueue
from graphckpt.server.errors import ApiError
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
from graphckpt.server.records import thread_tags
from graphckpt.subgraph import link_of
from graphckpt.worker import CANCEL_PAID_WAIT

__all__ = ["InProcessRuns"]

logger = logging.getLogger("graphckpt.server")


class InProcessRuns:
    """Runs on this process's loop, one at a time per thread (a queue per thread for ``enqueue``)."""

    def __init__(
        self,
        graphs: Graphs,
        *,
        recover: bool = True,
        recover_interval: float = 1.0,
        ttl_sweep_every: float | None = TTL_SWEEP_EVERY,
    ) -> None:
        self.graphs = graphs
        self.recover = recover
        self.recover_interval = recover_interval
        self.ttl_sweep_every = ttl_sweep_every
        self._recovery: asyncio.Task[None] | None = None
        self._ttl: asyncio.Task[None] | None = None
        self._runs: dict[str, RunInfo] = {}
        self._queues: dict[str, list[RunInfo]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._current: dict[str, RunInfo] = {}
        self._engines: dict[str, Run] = {}
        self._stop_as: dict[str, RunStatus] = {}
        """How a run cancelled while running ends (``interrupted`` when another run's strategy stopped it)."""
        """Thread id -> the engine run of its current run (what a cancel reads the calls in flight from)."""

    async def start(self) -> None:
        """Take over crashed threads now and every ``recover_interval`` seconds (unless ``recover`` is off); sweep
        expired threads every ``ttl_sweep_every`` seconds (default :data:`~graphckpt.prune.TTL_SWEEP_EVERY`; ``None``:
        never)."""
        if self.recover:
            self._recovery = asyncio.create_task(self._recover_loop(), name="graphckpt-recovery")
        if self.ttl_sweep_every:
            self._ttl = asyncio.create_task(self._ttl_loop(self.ttl_sweep_every), name="graphckpt-ttl-sweep")

    async def _recover_loop(self) -> None:
        while True:
            try:
                await self.recover_crashed()
            except Exception as exc:  # the store is unreachable for a moment: try again next time
                logger.warning("recovery scan failed: %s", exc)
            await asyncio.sleep(self.recover_interval)

    async def _ttl_loop(self, every: float) -> None:
        while True:
            try:
                await sweep_expired(self.graphs.saver)
            except Exception as exc:  # the store is unreachable for a moment: try again next time
                logger.warning("ttl sweep failed: %s", exc)
            await asyncio.sleep(every)

    async def recover_crashed(self) -> None:
        """Resume each ``crashed`` thread of a served graph that no run of ours holds (the claim is the engine's:
        it refuses a live lease, so two servers never run one thread)."""
        for record in await self.graphs.saver.list_threads(status="crashed"):
            if self.active(record.thread_id) or link_of(record.metadata) is not None:  # a child: its parent's resume
                continue
            graph = self.graphs.graph_of(record)
            logger.info("recovering thread %s (graph %s) at step %d", record.thread_id, graph, record.head_step)
            request = RunRequest(record.thread_id, graph, resume=True)
            await self.submit(request, thread=record, multitask="enqueue", start=(record.head_step, -1), recovery=True)

    async def stop(self) -> None:
        for loop in (self._recovery, self._ttl):
            if loop is not None:
                loop.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await loop
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def active(self, thread_id: str) -> bool:
        return thread_id in self._tasks

    async def submit(
        self,
        request: RunRequest,
        *,
        thread: Thread,
        multitask: str,
        start: tuple[int, int],
        metadata: Mapping[str, Any] | None = None,
        recovery: bool = False,
    ) -> RunInfo:
        sid = request.thread_id
        if self.active(sid):
            if multitask != "enqueue":  # interrupt/rollback stopped the run before: another one came meanwhile
                raise RunConflict(f"thread {sid!r} already has a run (multitask_strategy 'enqueue' queues after it)")
        elif not recovery:
            check_request(self.graphs, thread, request)
        info = RunInfo(ids.new_uuid(), request, multitask, start, dict(metadata or {}))
        self._runs[info.run_id] = info
        self._queues.setdefault(sid, []).append(info)
        if sid not in self._tasks:
            self._tasks[sid] = asyncio.create_task(self._drain(sid), name=f"graphckpt-run-{sid}")
        return info

    async def get(self, run_id: str) -> RunInfo | None:
        return self._runs.get(run_id)

    async def list(self, thread_id: str) -> list[RunInfo]:
        runs = [r for r in self._runs.values() if r.request.thread_id == thread_id]
        return sorted(runs, key=lambda r: r.created_at, reverse=True)

    async def cancel(self, run_id: str, *, immediate: bool = False, interrupted: bool = False) -> RunInfo:
        info = self._runs[run_id]
        sid = info.request.thread_id
        if info.status == "pending":
            self._queues.get(sid, []).remove(info)
            self._finish(info, "cancelled")
        elif info.status == "running" and self._current.get(sid) is info:
            engine = self._engines.get(sid)
            if not immediate and engine is not None:  # its calls in flight return and are recorded first
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(engine.journal.settled(), CANCEL_PAID_WAIT)
            if self._current.get(sid) is info and not info.finished:
                self._stop_as[run_id] = "interrupted" if interrupted else "cancelled"
                self._tasks[sid].cancel()
            await info.done.wait()
        return info

    async def delete(self, run_id: str) -> None:
        info = self._runs.get(run_id)
        if info is None:
            raise ApiError(404, "NotFound", f"no run {run_id!r}")
        if not info.finished:
            raise refuse_unended(run_id)
        del self._runs[run_id]

    async def cancel_thread(self, thread_id: str) -> None:
        for info in list(self._queues.get(thread_id, [])) + [
            r for r in self._current.values() if r.request.thread_id == thread_id
        ]:
            await self.cancel(info.run_id)

    async def join(self, run_id: str) -> RunInfo:
        info = self._runs[run_id]
        await info.done.wait()
        return info

    def _finish(self, info: RunInfo, status: RunStatus, error: str | None = None) -> None:
        info.status, info.error, info.updated_at = status, error, ids.now()
        info.done.set()

    async def _drain(self, sid: str) -> None:
        queue = self._queues[sid]
        try:
            while queue:
                info = queue.pop(0)
                self._current[sid] = info
                try:
                    await self._execute(info)
                except asyncio.CancelledError:
                    self._finish(info, self._stop_as.pop(info.run_id, "cancelled"))
                    for left in queue:
                        self._finish(left, "cancelled")
                    queue.clear()
                    raise
                finally:
                    self._current.pop(sid, None)
        finally:
            self._tasks.pop(sid, None)
            self._queues.pop(sid, None)

    async def _ttl_tag(self, thread_id: str) -> dict[str, Any]:
        """The TTL tag a new input run keeps: the thread's (its head's, or given when it was created)."""
        saver = self.graphs.saver
        record = await saver.get_thread(thread_id)
        if record is not None:
            ttl = thread_tags(record).get("ttl")
        elif isinstance(saver, RunQueue) and (created := await saver.get_created_thread(thread_id)) is not None:
            ttl = json.loads(created[0]).get("ttl")
        else:
            ttl = None
        return {"ttl": ttl} if ttl is not None else {}

    async def _execute(self, info: RunInfo) -> None:
        request = info.request
        app = self.graphs.app(request.graph_id)
        info.status, info.updated_at = "running", ids.now()
        options = with_options(app.run_options, request.options)  # its interrupt points, configurable, context
        try:
            if request.resume:
                tags = request.tags
                if tags is None:  # the thread as it is now (a run queued after another sees that one's tags)
                    tags = inherited_tags(await self.graphs.saver.get_thread(request.thread_id))
                run = await begin.resume(
                    options,
                    request.thread_id,
                    request.answer,
                    request.recursion_limit,
                    await with_ttl(dict(tags) if tags is not None else None, request.ttl, app.saver, request.thread_id),
                    app.runner,
                )
            else:
                tags = {
                    "graph": request.graph_id,
                    "metadata": dict(request.metadata),
                    **await self._ttl_tag(request.thread_id),
                }
                tags = await with_ttl(tags, request.ttl, app.saver, request.thread_id)
                run = await begin.start(
                    options, request.input or {}, request.thread_id, request.recursion_limit, tags, app.runner
                )
            self._engines[request.thread_id] = run
            try:
                await run.drain()
            finally:
                self._engines.pop(request.thread_id, None)
            snap = app.store.snapshot(run.head, run.status, run.recorded)
        except GraphckptError as exc:
            self._finish(info, "error", f"{type(exc).__name__}: {exc}")
            return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug or a store failure the engine did not wrap: the run fails, the server stays
            logger.error("run %s of thread %s failed", info.run_id, request.thread_id, exc_info=exc)
            self._finish(info, "error", type(exc).__name__)
            return
        status: RunStatus = "interrupted" if snap.status == "interrupted" else "success"
        self._finish(info, "error" if snap.status == "failed" else status)
