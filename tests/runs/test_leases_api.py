"""Leases as the API shows them, on every saver: a running thread names its owner, a finished one holds no lease, a
fresh fork holds none and is ``running`` (not ``crashed``), a stream closed midway releases its lease, a second run
of a held thread is refused naming the owner, and ``submit`` refuses or queues behind a busy thread."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from support.waiting import await_for

from graphckpt import END, START, StateGraph, ThreadBusyError, lease
from graphckpt.savers.base import Saver


def _graph() -> StateGraph:
    async def slow(state: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0.05)
        return {"n": state["n"] + 1}

    from typing import TypedDict

    class S(TypedDict):
        n: int

    g = StateGraph(S)
    g.add_node("slow", slow)
    g.add_edge(START, "slow")
    g.add_conditional_edges("slow", lambda s: "slow" if s["n"] < 3 else END)
    return g


async def test_owner_release_and_forks(saver: Saver) -> None:
    app = _graph().compile(saver=saver)
    stream = app.astream({"n": 0}, thread_id="t", mode="checkpoints")
    await anext(stream)  # the input step is committed: the run holds the thread
    info = await app.athread("t")
    me = lease.owner()
    assert info.status == "running" and info.lease is not None
    assert (info.lease.owner, info.lease.epoch) == (me, 1)
    with pytest.raises(ThreadBusyError, match=f"pid {os.getpid()}"):
        await app.aresume("t")
    await stream.aclose()  # a stream closed midway stops its run and releases the lease
    info = await app.athread("t")
    assert (info.status, info.lease) == ("running", None)
    done = await app.aresume("t")
    assert done.status == "done" and (await app.athread("t")).lease is None
    fork = await app.afork("t", step=1, new_thread_id="f")
    info = await app.athread("f")
    assert (fork.status, info.status, info.lease) == ("running", "running", None)  # nobody claimed it: not crashed
    assert [t.thread_id for t in await app.athreads("crashed")] == []


async def test_submit_rejects_a_busy_thread_or_queues_behind(saver: Saver) -> None:
    app = _graph().compile(saver=saver)
    app.graph_ref = "tests:graph"
    first = await app.asubmit({"n": 0}, thread_id="q")
    with pytest.raises(ThreadBusyError, match=f"already has run {first.run_id} queued"):
        await app.asubmit({"n": 0}, thread_id="q")
    behind = await app.asubmit(None, thread_id="q", resume=True, multitask="enqueue")
    assert [r.run_id for r in await app.aruns(thread_id="q")] == [first.run_id, behind.run_id]
    assert await app.acancel_run(behind.run_id) and not await app.acancel_run(behind.run_id)
    with pytest.raises(ValueError, match="multitask must be one of"):
        await app.asubmit({"n": 0}, thread_id="q2", multitask="sometimes")  # type: ignore[arg-type]


async def test_created_threads_and_cancel_requests_in_the_queue(saver: Saver) -> None:
    from graphckpt.savers.queue import RunQueue, RunRecord

    assert isinstance(saver, RunQueue)
    assert await saver.put_created_thread("c", '{"metadata": {"a": 1}}', 5.0)
    assert not await saver.put_created_thread("c", "{}", 6.0)  # the first one of an id wins
    assert await saver.get_created_thread("c") == ('{"metadata": {"a": 1}}', 5.0)
    await saver.delete_created_thread("c")
    assert await saver.get_created_thread("c") is None
    await saver.enqueue_run(RunRecord("r1", "t", "input", "queued", "g:g", None), reject_busy=True)
    assert not await saver.request_cancel("r1")  # queued: cancel_run is the way
    claimed = await saver.claim_run(lease.owner(), graphs=["g:g"], fence="f1", lease_until=1e12)
    assert claimed is not None and claimed.run_id == "r1"
    assert not await saver.cancel_requested("r1")
    assert await saver.cancels_requested(["r1", "nobody"]) == set()
    assert await saver.request_cancel("r1") and await saver.cancel_requested("r1")
    assert await saver.cancels_requested(["r1", "nobody"]) == {"r1"}  # one read for a worker's running runs
    assert await saver.cancels_requested([]) == set()
    await saver.finish_run("r1", fence="f1", status="cancelled")
    run = await saver.get_run("r1")
    assert run is not None and run.status == "cancelled"
    assert not await saver.request_cancel("r1") and not await saver.cancel_requested("r1")
    assert await saver.cancels_requested(["r1"]) == set()  # ended: no longer running


async def test_a_worker_keeps_the_thread_tags_and_stops_a_cancelled_run(saver: Saver) -> None:
    from graphckpt import Worker

    queue: Any = saver
    app = _graph().compile(saver=saver)
    await queue.put_created_thread("w", '{"metadata": {"owner": "ann"}, "graph": "old"}', 1.0)
    worker = Worker({"tests:graph": app}, poll=0.05)
    loop = asyncio.ensure_future(worker.run())

    async def status(run_id: str) -> str:
        return str((await queue.get_run(run_id)).status)

    try:
        run = await app.asubmit({"n": 0}, thread_id="w", graph="tests:graph")
        await await_for(lambda: _is(status(run.run_id), "done"), 10, what="the first run")
        tags = (await app.athread("w")).metadata["tags"]
        assert tags == {"metadata": {"owner": "ann"}, "graph": "tests:graph", "run": run.run_id}  # merged
        again = await app.asubmit({"n": -100}, thread_id="w", graph="tests:graph")

        async def stepping() -> bool:
            return await status(again.run_id) == "running" and (await app.athread("w")).step >= 5

        await await_for(stepping, 10, what="a few steps of the second run")
        assert await queue.request_cancel(again.run_id)
        await await_for(lambda: _is(status(again.run_id), "cancelled"), 10, what="the cancel")
        info = await app.athread("w")
        assert (info.status, info.lease) == ("running", None)  # stopped after a step; nobody on it
        assert info.metadata["tags"]["metadata"] == {"owner": "ann"} and info.step < 100
    finally:
        worker.stop()
        await loop


async def _is(value: Any, expected: str) -> bool:
    return bool(await value == expected)


async def test_a_worker_cancel_stops_a_blocked_node_and_a_run_keeps_its_submitted_tags(saver: Saver) -> None:
    from typing import TypedDict

    from graphckpt import Worker

    class S(TypedDict):
        n: int

    release = asyncio.Event()

    async def blocked(state: S) -> dict[str, Any]:
        await release.wait()  # never set: only a cancel stops it
        return {"n": state["n"] + 1}

    g = StateGraph(S)
    g.add_node("blocked", blocked)
    g.add_edge(START, "blocked")
    g.add_edge("blocked", END)
    queue: Any = saver
    app = g.compile(saver=saver)
    worker = Worker({"tests:blocked": app}, poll=0.05)
    loop = asyncio.ensure_future(worker.run())
    try:
        run = await app.asubmit({"n": 0}, thread_id="b", graph="tests:blocked", tags={"via": "test"})
        await await_for(lambda: _is(_status(queue, run.run_id), "running"), 10, what="the claim")
        await await_for(lambda: _has_head(app, "b"), 10, what="the input step")
        assert (await app.athread("b")).metadata["tags"] == {"via": "test", "graph": "tests:blocked", "run": run.run_id}
        assert worker.cancel(run.run_id)
        await await_for(lambda: _is(_status(queue, run.run_id), "cancelled"), 10, what="the cancel of a blocked node")
        info = await app.athread("b")
        assert (info.status, info.lease, info.step) == ("running", None, 0)  # the step never committed; released
        assert not worker.cancel(run.run_id)  # not running any more
    finally:
        worker.stop()
        await loop


async def _status(queue: Any, run_id: str) -> str:
    return str((await queue.get_run(run_id)).status)


async def _has_head(app: Any, thread_id: str) -> bool:
    try:
        await app.athread(thread_id)
    except Exception:
        return False
    return True
