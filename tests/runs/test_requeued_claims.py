"""A run re-queued by a sweeper while its attempt still ran (its lease lapsed on a loaded machine), every saver, the
states driven directly (no timing: leases of 10 minutes, the sweep called with a clock an hour ahead):

- the attempt went on to stop the thread ``interrupted``: the retry ends the run ``interrupted`` (as that attempt
  did), it does not fail with "waiting for an answer"; an answer then finishes the thread;
- the attempt's next heartbeat fails (:class:`LeaseLostError`) instead of renewing the thread's lease, the attempt
  stops before its next node and gives the thread up, and the retry finishes the run.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, TypedDict

import pytest
from support.waiting import await_for

from graphckpt import END, START, StateGraph, Worker, ids, lease
from graphckpt.errors import LeaseLostError
from graphckpt.runs import begin_queued
from graphckpt.savers.base import Saver

LEASE = 600.0
HOUR = 3600.0


class S(TypedDict):
    n: int
    said: str


def _asking() -> StateGraph:
    graph = StateGraph(S)
    graph.add_node("first", lambda s: {"n": s["n"] + 1})
    graph.add_node("ask", lambda s, ctx: {"said": str(ctx.interrupt("ok?"))})
    graph.add_edge(START, "first")
    graph.add_edge("first", "ask")
    graph.add_edge("ask", END)
    return graph


async def _claim(saver: Saver, run_id: str) -> tuple[Any, str]:
    queue: Any = saver
    fence = ids.new_id()
    claimed = await queue.claim_run(lease.owner(), graphs=["g"], fence=fence, lease_until=ids.now() + LEASE)
    assert claimed is not None and claimed.run_id == run_id
    return claimed, fence


async def _first_attempt(saver: Saver, app: Any, thread_id: str) -> tuple[Any, str, Any]:
    """A run of ``app`` submitted on ``thread_id``, claimed, and its engine begun: (run, fence, engine)."""
    run = await app.asubmit({"n": 0, "said": ""}, thread_id=thread_id, graph="g")
    claimed, fence = await _claim(saver, run.run_id)
    engine = await begin_queued(app.run_options, app.runner, claimed, fence, {"graph": "g", "run": run.run_id})
    assert engine is not None
    return run, fence, engine


async def _work_until(saver: Saver, app: Any, run_id: str, *statuses: str) -> Any:
    queue: Any = saver
    worker = Worker({"g": app}, poll=0.05)
    loop = asyncio.ensure_future(worker.run())
    try:

        async def ended() -> bool:
            return (await queue.get_run(run_id)).status in statuses

        await await_for(ended, 60, what=f"run {run_id} to end {statuses}")
    finally:
        worker.stop()
        await loop
    return await queue.get_run(run_id)


async def test_a_retry_after_the_attempt_stopped_interrupted_ends_interrupted(saver: Saver) -> None:
    app = _asking().compile(saver=saver, lease_seconds=LEASE)
    queue: Any = saver
    run, fence, engine = await _first_attempt(saver, app, "t")
    async with contextlib.aclosing(engine.steps()) as steps:
        await anext(steps)  # the input step is committed
        assert await queue.requeue_expired(ids.now() + HOUR) == 1  # the sweeper: its lease looked lapsed
        assert (await queue.get_run(run.run_id)).status == "queued"
        async for _ in steps:  # the attempt goes on and stops at the interrupt
            pass
    assert engine.status == "interrupted"
    await queue.finish_run(run.run_id, fence=fence, status="interrupted")  # its fence moved: changes nothing
    assert (await queue.get_run(run.run_id)).status == "queued"

    ended = await _work_until(saver, app, run.run_id, "interrupted", "failed", "done")
    assert (ended.status, ended.error, ended.attempt) == ("interrupted", None, 2)
    state = await app.aget_state("t")
    assert state.values == {"n": 1, "said": ""}
    assert [i.payload for i in state.interrupts] == ["ok?"]

    answer = await app.asubmit(thread_id="t", resume=True, answer="yes", graph="g")
    assert (await _work_until(saver, app, answer.run_id, "done", "failed")).status == "done"
    assert (await app.aget_state("t")).values == {"n": 1, "said": "yes"}
    assert len(await queue.list_runs(thread_id="t")) == 2


async def test_a_late_heartbeat_of_a_requeued_run_loses_the_lease(saver: Saver) -> None:
    gate = asyncio.Event()
    engines: list[Any] = []

    async def slow(s: S) -> dict[str, Any]:
        if len(engines) == 1:  # the first attempt waits here until the test has re-queued its run
            await gate.wait()
        return {"n": s["n"] + 1}

    graph = StateGraph(S)
    graph.add_node("slow", slow)
    graph.add_node("after", lambda s: {"n": s["n"] + 10})
    graph.add_edge(START, "slow")
    graph.add_edge("slow", "after")
    graph.add_edge("after", END)
    app = graph.compile(saver=saver, lease_seconds=LEASE)
    queue: Any = saver
    run = await app.asubmit({"n": 0, "said": ""}, thread_id="h", graph="g")
    worker = Worker({"g": app}, poll=0.05)
    worker.on_begin.append(lambda r, engine: engines.append(engine))
    loop = asyncio.ensure_future(worker.run())
    try:
        await await_for(lambda: len(engines) == 1, 60, what="the first attempt to begin")
        first = engines[0]
        await first.lease.renew()  # still this claim's: renews
        thread = await saver.get_thread("h")
        assert thread is not None and thread.lease is not None
        held_until = thread.lease.lease_until
        assert await queue.requeue_expired(ids.now() + HOUR) == 1  # the sweeper, after a late heartbeat
        with pytest.raises(LeaseLostError, match="re-queued"):
            await first.lease.renew()
        thread = await saver.get_thread("h")
        assert thread is not None and thread.lease is not None and thread.lease.lease_until == held_until
        gate.set()  # the attempt stops before its next node, gives the thread up; the retry finishes the run

        async def done() -> bool:
            return (await queue.get_run(run.run_id)).status in ("done", "failed")

        await await_for(done, 60, what="the retry to finish the run")
    finally:
        worker.stop()
        await loop
    ended = await queue.get_run(run.run_id)
    assert (ended.status, ended.attempt) == ("done", 2)
    assert (await app.aget_state("h")).values == {"n": 11, "said": ""}


async def test_a_retry_whose_claim_loses_to_its_earlier_attempts_step_begins_from_the_new_head(saver: Saver) -> None:
    """The earlier attempt (its run re-queued, its thread's lease expired: crashed) commits one more step between
    the retry's read of the thread and the retry's claim: the claim loses (the head moved); the retry reads the
    thread again and begins from that step instead of failing the run (CI's kill campaign with concurrency saw
    "thread ... was claimed first by run ... (it is crashed at step 2 now)")."""
    ran: list[str] = []

    def node(name: str) -> Any:
        def step(s: S) -> dict[str, Any]:
            ran.append(name)
            return {"n": s["n"] * 10 + "abc".index(name) + 1}

        return step

    graph = StateGraph(S)
    for name in ("a", "b", "c"):
        graph.add_node(name, node(name))
    graph.add_edge(START, "a")
    graph.add_edge("a", "b")
    graph.add_edge("b", "c")
    graph.add_edge("c", END)
    app = graph.compile(saver=saver, lease_seconds=LEASE)
    queue: Any = saver
    run, _, first = await _first_attempt(saver, app, "r")
    async with contextlib.aclosing(first.steps()) as steps:
        await anext(steps)  # the input step
        await anext(steps)  # node a
        assert ran == ["a"]
        assert await queue.requeue_expired(ids.now() + HOUR) == 1  # the sweeper: the run's lease looked lapsed
        thread = await saver.get_thread("r")
        assert thread is not None and thread.lease is not None
        assert await saver.expire_lease("r", epoch=thread.lease.epoch)  # and the thread's: it reads crashed
        retry, retry_fence = await _claim(saver, run.run_id)
        assert retry.attempt == 2

        real_claim = saver.claim
        raced: list[int] = []

        async def claim(*args: Any, **kwargs: Any) -> int:
            if not raced:  # the retry has read the thread; the earlier attempt commits node b before the claim
                raced.append(1)
                await anext(steps)
                assert ran == ["a", "b"]
                raced.append(first.step)
            return await real_claim(*args, **kwargs)

        saver.claim = claim  # type: ignore[method-assign]
        try:
            engine = await begin_queued(app.run_options, app.runner, retry, retry_fence, {"graph": "g"})
        finally:
            del saver.claim
        assert len(raced) == 2 and engine is not None
        assert engine.step == raced[1]  # begins after b: the earlier attempt's step is kept
        with pytest.raises(LeaseLostError):  # the earlier attempt is fenced off at its next write
            await anext(steps)
    async with contextlib.aclosing(engine.steps()) as retry_steps:
        async for _ in retry_steps:
            pass
    assert engine.status == "done"
    assert ran == ["a", "b", "c", "c"]  # a and b once; c by the fenced attempt (its commit refused), then the retry
    assert (await app.aget_state("r")).values == {"n": 123, "said": ""}
