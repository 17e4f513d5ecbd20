"""The run queue as an app sees it: :func:`submit` queues a run, :func:`list_runs` and :func:`cancel` read and
cancel them; :class:`~graphckpt.worker.Worker` executes them.

The queue's rows and the invariants its statements keep are in :mod:`graphckpt.savers.queue` (one running run per
thread by a partial unique index, one worker per run, completion committed with the run's last checkpoint, nothing
stranded); each saver keeps its SQL as named constants beside a docstring saying which invariant it protects
(``savers/_sqlite_runs.py``, ``savers/_pg_runs.py``, and the ``-- runs`` parts of the commit).

``multitask`` says what a run submitted to a busy thread does (busy: a queued or running run, or a live lease):
``"reject"`` raises :class:`~graphckpt.errors.ThreadBusyError` at once; ``"enqueue"`` queues it behind (a worker
runs it when the thread's current run has ended).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from graphckpt import ids
from graphckpt.errors import GraphckptError
from graphckpt.records import NO_ANSWER
from graphckpt.savers.queue import RunQueue, RunRecord, RunStatus

if TYPE_CHECKING:
    from graphckpt.app import App

__all__ = ["ENVELOPE", "MULTITASK", "Multitask", "cancel", "list_runs", "queue_of", "submit", "unpack"]

Multitask = Literal["reject", "enqueue"]
MULTITASK: tuple[Multitask, ...] = ("reject", "enqueue")

ENVELOPE = "__graphckpt_run__"
"""The key that marks a run's payload as an envelope ``{ENVELOPE: 1, "tags": {...}, "value": ...}`` (``value``
absent: a resume with no answer): how a run submitted with ``tags`` carries them to its worker in the opaque payload
(no column of its own); a payload without it is the input or the answer itself (the run keeps the thread's tags)."""


def queue_of(app: App) -> RunQueue:
    """The app's saver as a run queue (every shipped saver is one)."""
    if not isinstance(app.saver, RunQueue):
        raise GraphckptError(f"{type(app.saver).__name__} has no run queue: submit and workers need one")
    return app.saver


async def submit(
    app: App,
    input: Any = None,
    *,
    thread_id: str | None = None,
    multitask: Multitask = "reject",
    resume: bool = False,
    answer: Any = NO_ANSWER,
    graph: str | None = None,
    tags: Mapping[str, Any] | None = None,
) -> RunRecord:
    """Queue a run of ``graph`` (``module:attr``, what workers load; default: ``app.graph_ref``) on ``thread_id``
    (a new id when ``None``): ``input`` starts it (or a new turn of a ``done`` thread), ``resume=True`` continues
    it (with ``answer`` for an open interrupt). ``tags`` (when not ``None``) are the run's checkpoints' tags instead of
    the thread's (see :data:`ENVELOPE`). Values are checked storable now, not when a worker runs them."""
    if multitask not in MULTITASK:
        raise ValueError(f"multitask must be one of {', '.join(MULTITASK)}, not {multitask!r}")
    graph = graph or app.graph_ref
    if not graph:
        raise ValueError("submit needs graph='module:attr' (what a worker loads to run it), or app.graph_ref set")
    if thread_id is None:
        if resume:
            raise ValueError("submit(resume=True) needs thread_id")
        thread_id = ids.new_id()
    elif not isinstance(thread_id, str) or not thread_id:
        raise ValueError(f"thread_id must be a non-empty string (or None for a new thread), not {thread_id!r}")
    value: Any = answer if resume else dict(app.graph.validate_input(input))
    if tags is not None:
        envelope = {ENVELOPE: 1, "tags": dict(tags), **({} if value is NO_ANSWER else {"value": value})}
        payload: bytes | None = app.codec.serde.dumps(envelope)
    else:
        payload = None if value is NO_ANSWER else app.codec.serde.dumps(value)
    run = RunRecord(ids.new_id(), thread_id, "resume" if resume else "input", "queued", graph, payload)
    await queue_of(app).enqueue_run(run, reject_busy=multitask == "reject")
    return run


def unpack(app: App, run: RunRecord) -> tuple[Any, Mapping[str, Any] | None]:
    """The run's input or answer (:data:`~graphckpt.records.NO_ANSWER`: none) and the tags it was submitted with
    (``None``: none, it keeps the thread's)."""
    if run.payload is None:
        return NO_ANSWER, None
    value = app.codec.serde.loads(run.payload)
    if isinstance(value, dict) and value.get(ENVELOPE) == 1 and isinstance(value.get("tags"), dict):
        return value.get("value", NO_ANSWER), value["tags"]
    return value, None


async def list_runs(app: App, *, thread_id: str | None = None, status: RunStatus | None = None) -> list[RunRecord]:
    return await queue_of(app).list_runs(thread_id=thread_id, status=status)


async def cancel(app: App, run_id: str) -> bool:
    """Cancel a queued run; ``False`` when it is not queued any more."""
    return await queue_of(app).cancel_run(run_id)
