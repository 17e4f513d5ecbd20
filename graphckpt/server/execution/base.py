"""The run-executor interface (:class:`RunExecutor`) and the checks every executor makes before it accepts a run.
A run's request and record (:class:`~graphckpt.server.records.RunRequest`, :class:`~graphckpt.server.records.RunInfo`)
are kept with the server's other records.

A run is one request to advance a thread (an input, an answer, or a recovery). The server only ever talks to the
interface: ``submit`` (with the multitask strategy: ``reject`` refuses a thread that already has a run with
:class:`RunConflict`, 409; ``enqueue`` queues after it), ``get``/``list``, ``cancel`` and ``join``. What a client
streams does not come from here but from the durable event log, so the process that runs a thread need not be the
one serving its stream. The implementations: :mod:`.inline` (this process's event loop) and :mod:`.queued` (the
durable run queue and workers); ``create_app`` chooses one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from graphckpt.errors import ThreadStateError
from graphckpt.savers.base import ThreadRecord
from graphckpt.server.errors import ApiError
from graphckpt.server.graphs import Graphs
from graphckpt.server.records import PendingThread, RunInfo, RunRequest, RunStatus, thread_tags

__all__ = [
    "UI_TAGS",
    "RunConflict",
    "RunExecutor",
    "RunInfo",
    "RunRequest",
    "RunStatus",
    "Thread",
    "check_request",
    "inherited_tags",
]

Thread = ThreadRecord | PendingThread | None
"""A thread as a request found it: stored, created but not stored yet, or none."""

UI_TAGS = frozenset({"via", "ui_action", "ui_by"})
"""The tags the web UI adds to the runs it starts (see :mod:`graphckpt.server.ui.data`)."""


class RunConflict(ApiError):
    """The thread already has a run and the strategy is ``reject`` (409)."""

    def __init__(self, message: str) -> None:
        super().__init__(409, "RunConflict", message)


class RunExecutor(Protocol):
    """What the service and the routes ask of a run executor (see the module docstring)."""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def active(self, thread_id: str) -> bool: ...
    async def submit(
        self,
        request: RunRequest,
        *,
        thread: Thread,
        multitask: str,
        start: tuple[int, int],
        metadata: Mapping[str, Any] | None = ...,
    ) -> RunInfo:
        """Start or queue ``request`` with the multitask strategy ``multitask``; ``thread`` is the thread as the
        caller read it for this request (``None``: there is none), so the executor does not read it again."""

    async def get(self, run_id: str) -> RunInfo | None: ...
    async def list(self, thread_id: str) -> list[RunInfo]: ...
    async def cancel(self, run_id: str) -> RunInfo: ...
    async def cancel_thread(self, thread_id: str) -> None: ...
    async def join(self, run_id: str) -> RunInfo: ...
    async def delete(self, run_id: str) -> None:
        """Forget the ended run ``run_id`` (404 when there is none; 409 when it has not ended)."""


def check_request(graphs: Graphs, thread: Thread, request: RunRequest, *, validate: bool = True) -> None:
    """Refuse at once what the run would refuse: a resume of no (stored) thread (404); input for a thread that waits
    for an answer or a resume, or that another process runs or that crashed (:class:`ThreadStateError`); with
    ``validate``, input that does not fit the graph (an executor whose submit checks it itself passes ``False``)."""
    record = thread if isinstance(thread, ThreadRecord) else None
    if request.resume:
        if record is None:
            raise ApiError(404, "ThreadNotFoundError", f"no thread {request.thread_id!r} to resume")
        return
    if record is not None and record.status != "done":
        hint = "answer it with command.resume" if record.status == "interrupted" else "resume it with a command"
        raise ThreadStateError(f"thread {request.thread_id!r} is {record.status}: {hint}")
    if validate:
        graphs.app(request.graph_id).graph.validate_input(request.input or {})


def inherited_tags(thread: Thread) -> Mapping[str, Any] | None:
    """The tags a run without its own keeps: the stored thread's, less the marks of a web UI action
    (:data:`UI_TAGS`: an API run after a UI cancel is not a UI action); ``None`` when the thread has no such marks
    (it keeps them all) or is not stored."""
    found = thread_tags(thread) if isinstance(thread, ThreadRecord) else {}
    if not UI_TAGS & found.keys():
        return None
    return {k: v for k, v in found.items() if k not in UI_TAGS}
