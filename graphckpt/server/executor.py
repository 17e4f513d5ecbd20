"""How the server runs threads: the :class:`RunExecutor` interface, and :class:`InProcessRuns`, which runs them on
the server's own event loop.

A run is one request to advance a thread (an input, an answer, or a recovery). The server only ever talks to the
interface: ``submit`` (with the multitask strategy: ``reject`` refuses a thread that already has a run with
:class:`RunConflict`, 409; ``enqueue`` queues after it), ``get``/``list``, ``cancel`` and ``join``. What a client
streams does not come from here but from the durable event log, so the process that runs a thread need not be the
one serving its stream.

``InProcessRuns`` keeps run records in memory (a restart forgets them; the threads and their events stay) and resumes
the threads a crash left behind: every ``recover_interval`` seconds it takes over the ``crashed`` ones (``running``
with an expired lease: their process died), through the engine's lease claim, so a thread another live process runs
is never touched. The server uses :class:`~graphckpt.server.queue_runs.QueueRuns` (the durable run queue and
``graphckpt.Worker``) by default; this class remains for an app whose saver has no run queue."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from graphckpt import ids
from graphckpt.errors import GraphckptError, ThreadStateError
from graphckpt.records import NO_ANSWER
from graphckpt.server.errors import ApiError
from graphckpt.subgraph import link_of

if TYPE_CHECKING:
    from graphckpt.server.service import Service

__all__ = [
    "InProcessRuns",
    "RunConflict",
    "RunExecutor",
    "RunInfo",
    "RunRequest",
    "RunStatus",
    "check_request",
    "inherited_tags",
]

logger = logging.getLogger("graphckpt.server")

RunStatus = Literal["pending", "running", "success", "error", "interrupted", "cancelled"]
"""LangGraph's run statuses (``cancelled`` where it says ``interrupted`` for a cancel: ours is the thread's)."""

UI_TAGS = frozenset({"via", "ui_action", "ui_by"})
"""The tags the web UI adds to the runs it starts (see :mod:`graphckpt.server.ui.data`)."""

_FINISHED = frozenset({"success", "error", "interrupted", "cancelled"})


class RunConflict(ApiError):
    """The thread already has a run and the strategy is ``reject`` (409)."""

    def __init__(self, message: str) -> None:
        super().__init__(409, "RunConflict", message)


@dataclass(frozen=True)
class RunRequest:
    """What a run does: ``input`` on a new or done thread, or (``resume``) continue it with ``answer``."""

    thread_id: str
    """The stored thread id."""
    graph_id: str
    input: Mapping[str, Any] | None = None
    resume: bool = False
    answer: Any = NO_ANSWER
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """The thread's metadata, kept in the run's checkpoints (``tags.metadata``)."""
    recursion_limit: int | None = None
    tags: Mapping[str, Any] | None = None
    """Tags a resume records in its checkpoints (the web UI's ``via``/``ui_action``); ``None``: the thread's own."""


@dataclass
class RunInfo:
    run_id: str
    request: RunRequest
    multitask_strategy: str
    start: tuple[int, int] | None
    """The event cursor before the run: its stream is the thread's events after it (``None``: not known here, a
    run read back from the queue after a restart)."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """The run's own metadata."""
    status: RunStatus = "pending"
    error: str | None = None
    created_at: float = field(default_factory=ids.now)
    updated_at: float = field(default_factory=ids.now)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def finished(self) -> bool:
        return self.status in _FINISHED


class RunExecutor(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def active(self, thread_id: str) -> bool: ...
    async def submit(
        self, request: RunRequest, *, multitask: str, start: tuple[int, int], metadata: Mapping[str, Any] | None = ...
    ) -> RunInfo: ...
    async def get(self, run_id: str) -> RunInfo | None: ...
    async def list(self, thread_id: str) -> list[RunInfo]: ...
    async def cancel(self, run_id: str) -> RunInfo: ...
    async def cancel_thread(self, thread_id: str) -> None: ...
    async def join(self, run_id: str) -> RunInfo: ...


async def check_request(service: Service, request: RunRequest) -> None:
    """Refuse at once what the run would refuse: a resume of no thread (404); input for a thread that waits for an
    answer or a resume, or that another process runs or that crashed (:class:`ThreadStateError`); input that does not
    fit the graph."""
    record = await service.saver.get_thread(request.thread_id)
    if request.resume:
        if record is None:
            raise ApiError(404, "ThreadNotFoundError", f"no thread {request.thread_id!r} to resume")
        return
    if record is not None and record.status != "done":
        hint = "answer it with command.resume" if record.status == "interrupted" else "resume it with a command"
        raise ThreadStateError(f"thread {request.thread_id!r} is {record.status}: {hint}")
    service.app(request.graph_id).graph.validate_input(request.input or {})


async def inherited_tags(service: Service, thread_id: str) -> Mapping[str, Any] | None:
    """The tags a run without its own keeps: the thread's, less the marks of a web UI action (:data:`UI_TAGS`: an
    API run after a UI cancel is not a UI action); ``None`` when the thread has no such marks (it keeps them all)."""
    record = await service.saver.get_thread(thread_id)
    found = record.metadata.get("tags") if record is not None else None
    if not isinstance(found, Mapping) or not UI_TAGS & found.keys():
        return None
    return {k: v for k, v in found.items() if k not in UI_TAGS}


class InProcessRuns:
    """Runs on this process's loop, one at a time per thread (a queue per thread for ``enqueue``)."""

    def __init__(self, service: Service, *, recover: bool = True, recover_interval: float = 1.0) -> None:
        self.service = service
        self.recover = recover
        self.recover_interval = recover_interval
        self._recovery: asyncio.Task[None] | None = None
        self._runs: dict[str, RunInfo] = {}
        self._queues: dict[str, list[RunInfo]] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._current: dict[str, RunInfo] = {}

    async def start(self) -> None:
        """Take over crashed threads now and every ``recover_interval`` seconds (unless ``recover`` is off)."""
        if self.recover:
            self._recovery = asyncio.create_task(self._recover_loop(), name="graphckpt-recovery")

    async def _recover_loop(self) -> None:
        while True:
            try:
                await self.recover_crashed()
            except Exception as exc:  # the store is unreachable for a moment: try again next time
                logger.warning("recovery scan failed: %s", exc)
            await asyncio.sleep(self.recover_interval)

    async def recover_crashed(self) -> None:
        """Resume each ``crashed`` thread of a served graph that no run of ours holds (the claim is the engine's:
        it refuses a live lease, so two servers never run one thread)."""
        for record in await self.service.saver.list_threads(status="crashed"):
            if self.active(record.thread_id) or link_of(record.metadata) is not None:  # a child: its parent's resume
                continue
            graph = self.service.graph_of(record)
            logger.info("recovering thread %s (graph %s) at step %d", record.thread_id, graph, record.head_step)
            request = RunRequest(record.thread_id, graph, resume=True)
            await self.submit(request, multitask="enqueue", start=(record.head_step, -1), recovery=True)

    async def stop(self) -> None:
        if self._recovery is not None:
            self._recovery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._recovery
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
        multitask: str,
        start: tuple[int, int],
        metadata: Mapping[str, Any] | None = None,
        recovery: bool = False,
    ) -> RunInfo:
        sid = request.thread_id
        if self.active(sid):
            if multitask == "reject":
                raise RunConflict(f"thread {sid!r} already has a run (multitask_strategy 'enqueue' queues after it)")
        elif not recovery:
            await check_request(self.service, request)
        info = RunInfo(ids.new_id(), request, multitask, start, dict(metadata or {}))
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

    async def cancel(self, run_id: str) -> RunInfo:
        info = self._runs[run_id]
        sid = info.request.thread_id
        if info.status == "pending":
            self._queues.get(sid, []).remove(info)
            self._finish(info, "cancelled")
        elif info.status == "running" and self._current.get(sid) is info:
            self._tasks[sid].cancel()
            await info.done.wait()
        return info

    async def cancel_thread(self, thread_id: str) -> None:
        for info in list(self._queues.get(thread_id, [])) + [r for r in self._current.values()
                                                              if r.request.thread_id == thread_id]:  # fmt: skip
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
                    self._finish(info, "cancelled")
                    for left in queue:
                        self._finish(left, "cancelled")
                    queue.clear()
                    raise
                finally:
                    self._current.pop(sid, None)
        finally:
            self._tasks.pop(sid, None)
            self._queues.pop(sid, None)

    async def _execute(self, info: RunInfo) -> None:
        request = info.request
        app = self.service.app(request.graph_id)
        info.status, info.updated_at = "running", ids.now()
        try:
            if request.resume:
                tags = (
                    request.tags if request.tags is not None else await inherited_tags(self.service, request.thread_id)
                )
                snap = await app.aresume(
                    request.thread_id, request.answer, recursion_limit=request.recursion_limit,
                    **({"tags": dict(tags)} if tags is not None else {}),
                )  # fmt: skip
            else:
                tags = {"graph": request.graph_id, "metadata": dict(request.metadata)}
                snap = await app.ainvoke(
                    request.input or {}, thread_id=request.thread_id, tags=tags,
                    recursion_limit=request.recursion_limit,
                )  # fmt: skip
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
