"""What a stream shows of a run: the run driven at most one step ahead of its reader (:func:`ahead_by_one`), with
the ephemeral events it emits in between, and each committed step rendered in the stream modes asked for
(:func:`chunks`); :func:`stream` is all of it, shaped as ``App.astream`` yields it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Iterator, Sequence
from typing import Any, Literal

from graphckpt.compiled import CompiledGraph
from graphckpt.control import START
from graphckpt.engine import Run, Step, debug_event
from graphckpt.store import ThreadStore
from graphckpt.subgraph import SubEvent

__all__ = ["EPHEMERAL", "STREAM_MODES", "StreamMode", "ahead_by_one", "chunks", "check_modes", "stream"]

StreamMode = Literal["updates", "values", "checkpoints", "custom", "tasks", "messages", "debug"]
STREAM_MODES: tuple[StreamMode, ...] = ("updates", "values", "checkpoints", "custom", "tasks", "messages", "debug")
EPHEMERAL = frozenset({"custom", "tasks", "messages", "debug"})
"""The modes whose events a run emits as they happen (not read from committed checkpoints)."""


def check_modes(mode: StreamMode | Sequence[StreamMode]) -> list[StreamMode]:
    """The modes ``mode`` asks for (one, or a list); ``ValueError`` for an unknown one."""
    modes = [mode] if isinstance(mode, str) else list(mode)
    unknown = [m for m in modes if m not in STREAM_MODES]
    if unknown or not modes:
        raise ValueError(f"stream mode must be one of {', '.join(STREAM_MODES)} (or a list of them), not {mode!r}")
    return modes


async def stream(
    run: Run,
    mode: StreamMode | Sequence[StreamMode],
    *,
    subgraphs: bool,
    graph: CompiledGraph,
    store: ThreadStore,
) -> AsyncGenerator[Any, None]:
    """``run``'s chunks as ``App.astream`` yields them (see there): a chunk for one mode, ``(mode, chunk)`` for a
    list of modes, with the namespace in front when ``subgraphs``. Closing it stops the run (see
    :func:`ahead_by_one`)."""
    wanted: set[str] = set(check_modes(mode))
    ephemeral = (wanted & EPHEMERAL) | ({"subgraph"} if subgraphs else set())
    # closed with this stream (not when collected): a stream left midway stops its run and releases its lease
    async with contextlib.aclosing(ahead_by_one(run, ephemeral=ephemeral)) as items:
        async for item in items:
            for namespace, chunk_mode, chunk in chunks(item, wanted, graph, store):
                if isinstance(mode, str):
                    yield (namespace, chunk) if subgraphs else chunk
                else:
                    yield (namespace, chunk_mode, chunk) if subgraphs else (chunk_mode, chunk)


def chunks(
    item: Step | tuple[str, Any],
    wanted: set[str],
    graph: CompiledGraph,
    store: ThreadStore,
    namespace: tuple[str, ...] = (),
) -> Iterator[tuple[tuple[str, ...], str, Any]]:
    """What one committed step (or one ephemeral event) shows in each wanted mode, as ``(namespace, mode, chunk)``;
    a subgraph's step or event (a ``subgraph`` event) in its own namespace, rendered with its own graph."""
    if isinstance(item, tuple):
        mode, payload = item
        if mode == "subgraph":
            sub: SubEvent = payload
            yield from chunks(sub.item, wanted, sub.graph, sub.store, sub.namespace)
        elif mode in wanted:
            yield namespace, mode, payload
        return
    for mode, chunk in _step_chunks(item, wanted, graph, store):
        yield namespace, mode, chunk


def _step_chunks(item: Step, wanted: set[str], graph: CompiledGraph, store: ThreadStore) -> Iterator[tuple[str, Any]]:
    results = [r for r in item.results if r.task.node != START]
    if "tasks" in wanted:
        for r in results:
            yield "tasks", {"id": r.task.id, "name": r.task.node, "result": r.update}
    if "updates" in wanted:
        for r in results:
            yield "updates", {r.task.node: r.update or None}
    if "values" in wanted and (not results or any(r.update for r in results)):
        yield "values", graph.output(item.head.values)
    if "checkpoints" in wanted:
        yield "checkpoints", store.snapshot(item.head, item.head.cp.status, None)
    if "debug" in wanted:
        step = item.head.cp.step
        for r in results:
            yield (
                "debug",
                debug_event(
                    "task_result",
                    step,
                    id=r.task.id,
                    name=r.task.node,
                    error=None,
                    result=list(r.update.items()),
                    interrupts=[],
                ),
            )
        snap = store.snapshot(item.head, item.head.cp.status, None)
        yield (
            "debug",
            debug_event(
                "checkpoint",
                step,
                thread_id=snap.thread_id,
                checkpoint_id=snap.checkpoint_id,
                parent=list(snap.parent) if snap.parent else None,
                values=graph.output(item.head.values),
                metadata=dict(snap.metadata),
                next=list(snap.next),
                tasks=[{"id": t.id, "name": t.node} for t in snap.tasks],
            ),
        )


_DONE: Any = object()


async def ahead_by_one(run: Run, *, ephemeral: set[str]) -> AsyncGenerator[Step | tuple[str, Any], None]:
    """``run``'s committed steps, the run going on in a task of its own at most one step ahead of this iterator's
    reader: the next step runs while the reader handles this one, and the one after waits until the reader takes
    it. Events of the ``ephemeral`` modes the run emits meanwhile come in between, in the order they happened.
    Closing this iterator midway cancels the run and has stopped it when the close returns (what it committed
    stays)."""
    queue: asyncio.Queue[Any] = asyncio.Queue()
    taken = asyncio.Event()
    if ephemeral:
        run.listener = lambda mode, payload: queue.put_nowait((mode, payload)) if mode in ephemeral else None
        run.wanted = frozenset(ephemeral)

    async def produce() -> None:
        try:
            async with contextlib.aclosing(run.steps()) as steps:  # closed when cancelled: it releases the lease
                async for step in steps:
                    taken.clear()
                    queue.put_nowait(step)
                    await taken.wait()  # the reader took it: run the next step
        except BaseException as exc:
            queue.put_nowait(exc)
            raise
        queue.put_nowait(_DONE)

    producer = asyncio.ensure_future(produce())
    try:
        while True:
            item = await queue.get()
            if item is _DONE:
                break
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, Step):
                taken.set()
            yield item
        await producer
    finally:
        run.listener = None
        if not producer.done():
            producer.cancel()
            await _ended(producer)
        elif not producer.cancelled():
            producer.exception()  # seen: it was raised to the reader above


async def _ended(task: asyncio.Task[None]) -> None:
    """Wait until ``task`` has ended, even when this wait is cancelled meanwhile (that cancel is raised once it
    has): a close that returns, or is cancelled, never leaves the run's task behind half-stopped, where the loop's
    end would destroy it mid-step (its generator's cleanup would then never run)."""
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
