"""Leases as the API shows them, on every saver: a running thread names its owner, a finished one holds no lease, a
fresh fork holds none and is ``running`` (not ``crashed``), a stream closed midway releases its lease, a second run
of a held thread is refused naming the owner, and ``submit`` refuses or queues behind a busy thread."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

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
