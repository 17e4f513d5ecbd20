"""One ``Worker`` with ``concurrency=16`` holds 16 runs at once (every saver): each run's node waits on a barrier
that only opens when all 16 have reached it, so the runs end ``done`` only if all 16 were in flight together; a
sync node variant (``threading.Barrier``: each waiting node holds a thread of the pool) and an async one
(``asyncio.Barrier``). Not timed: a worker that held fewer at once breaks the barrier (its timeout) and the runs fail.
A run taken over by another process meanwhile fails alone (its next write finds the fence moved); the others end
``done``."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, TypedDict

from support.waiting import await_for

from graphckpt import END, START, StateGraph, Worker, ids
from graphckpt.savers.base import Saver

RUNS = 16
BARRIER_TIMEOUT = 60.0


class S(TypedDict):
    n: int
    met: bool


def _graph(node: Any) -> StateGraph:
    graph = StateGraph(S)
    graph.add_node("meet", node)
    graph.add_node("after", lambda s: {"n": s["n"] + 1})
    graph.add_edge(START, "meet")
    graph.add_edge("meet", "after")
    graph.add_edge("after", END)
    return graph


async def _all_in_flight(saver: Saver, graph: StateGraph, ref: str) -> None:
    app = graph.compile(saver=saver)
    runs = [await app.asubmit({"n": i, "met": False}, thread_id=f"c{i}", graph=ref) for i in range(RUNS)]
    worker = Worker({ref: app}, concurrency=RUNS, poll=0.05)
    loop = asyncio.ensure_future(worker.run())
    queue: Any = saver
    try:

        async def ended() -> bool:
            return [(await queue.get_run(r.run_id)).status in ("done", "failed") for r in runs] == [True] * len(runs)

        await await_for(ended, BARRIER_TIMEOUT + 30, what="every run to end")
    finally:
        worker.stop()
        await loop
    statuses = [(await queue.get_run(r.run_id)).status for r in runs]
    assert statuses == ["done"] * RUNS, statuses
    for i in range(RUNS):
        values = (await app.aget_state(f"c{i}")).values
        assert values == {"n": i + 1, "met": True}


async def test_sixteen_sync_runs_are_in_flight_at_once(saver: Saver) -> None:
    barrier = threading.Barrier(RUNS, timeout=BARRIER_TIMEOUT)

    def meet(state: S) -> dict[str, Any]:
        barrier.wait()  # blocks this pool thread until all 16 runs' nodes are here
        return {"met": True}

    await _all_in_flight(saver, _graph(meet), "tests:sync_barrier")


async def test_sixteen_async_runs_are_in_flight_at_once(saver: Saver) -> None:
    barrier = asyncio.Barrier(RUNS)

    async def meet(state: S) -> dict[str, Any]:
        async with asyncio.timeout(BARRIER_TIMEOUT):
            await barrier.wait()
        return {"met": True}

    await _all_in_flight(saver, _graph(meet), "tests:async_barrier")


async def test_a_run_taken_over_fails_alone_among_many(saver: Saver) -> None:
    """Fencing with many runs in one worker: 8 runs wait on a gate; another owner takes over one thread (a confirmed
    take-over: a claim of the epoch it read); when the gate opens, that run's next write is refused (its fence
    moved) and it ends ``failed``; the other seven end ``done``."""
    gate = asyncio.Event()
    reached: set[str] = set()

    async def meet(state: S) -> dict[str, Any]:
        reached.add(str(state["n"]))
        await gate.wait()
        return {"met": True}

    ref = "tests:fenced"
    app = _graph(meet).compile(saver=saver)
    runs = [await app.asubmit({"n": i, "met": False}, thread_id=f"f{i}", graph=ref) for i in range(8)]
    worker = Worker({ref: app}, concurrency=8, poll=0.05)
    loop = asyncio.ensure_future(worker.run())
    queue: Any = saver
    try:
        await await_for(lambda: len(reached) == 8, 30, what="all 8 runs inside their node")
        victim = await saver.get_thread("f3")
        assert victim is not None and victim.run_id is not None
        # another process takes the thread over (a confirmed take-over): a new run id fences this worker's run
        taken = await saver.claim(
            "f3",
            expected_head=victim.head_checkpoint_id,
            expected_run_id=victim.run_id,
            run_id=ids.new_id(),
            take_epoch=victim.epoch,
        )
        assert taken == victim.epoch + 1
        gate.set()

        async def ended() -> bool:
            return [(await queue.get_run(r.run_id)).status in ("done", "failed") for r in runs] == [True] * len(runs)

        await await_for(ended, 30, what="every run to end")
    finally:
        worker.stop()
        await loop
    statuses = {r.thread_id: (await queue.get_run(r.run_id)).status for r in runs}
    assert statuses == {f"f{i}": ("failed" if i == 3 else "done") for i in range(8)}, statuses
