"""Durable waits inside subgraphs, with a real worker on every saver: a ``ctx.sleep`` in a subgraph's node makes the
*root* thread wait (its wait row carries the child's wake-up time; the child's own row is never fired, since the
worker could not run a child thread alone), and the root's firing resumes the chain once: the subgraph node's work
before the sleep is not repeated. An interrupt deadline two subgraphs deep answers with its default the same way, and
a person's answer before the deadline still wins."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel
from support.waiting import await_for

from graphckpt import END, START, StateGraph, Worker
from graphckpt.errors import ThreadNotFoundError
from graphckpt.waiting import OnTimeout

GRAPH = "tests:subgraph_waits"


class State(BaseModel):
    path: list[str] = []
    answer: str = ""


def _chain(node: Any, depth: int) -> StateGraph:
    """A graph whose node ``n`` is ``node`` wrapped in ``depth`` subgraphs."""
    inner = StateGraph(State)
    inner.add_node("n", node)
    inner.add_edge(START, "n")
    inner.add_edge("n", END)
    for _ in range(depth):
        outer = StateGraph(State)
        outer.add_node("sub", inner.compile())
        outer.add_edge(START, "sub")
        outer.add_edge("sub", END)
        inner = outer
    return inner


async def _run(app: Any, body: Any) -> None:
    worker = Worker({GRAPH: app}, poll=0.05)
    loop = asyncio.ensure_future(worker.run())
    try:
        await body()
    finally:
        worker.stop()
        await loop


async def _status(app: Any, thread_id: str) -> str:
    try:
        return str((await app.athread(thread_id)).status)
    except ThreadNotFoundError:  # its run is queued, not started yet
        return "missing"


async def test_a_sleep_in_a_subgraph_makes_the_root_wait_and_wakes_it_once(saver: Any) -> None:
    calls: list[int] = []

    async def nap(state: State, ctx: Any) -> dict[str, Any]:
        await ctx.aeffect(lambda: calls.append(1))  # before the sleep: journaled, never repeated
        ctx.sleep(0.5)
        return {"path": [*state.path, "napped"]}

    app = _chain(nap, 1).compile(saver=saver)

    async def body() -> None:
        await app.asubmit({}, thread_id="r", graph=GRAPH)

        async def waiting() -> bool:
            return await _status(app, "r") == "interrupted" and bool(await saver.list_waits(thread_id="r"))

        await await_for(waiting, 10, what="the root to wait")
        [root] = await saver.list_waits(thread_id="r")
        [child] = [w for w in await saver.list_waits() if w.thread_id.startswith("r|")]
        assert root.status == "pending" and root.wake_at == child.wake_at  # the child's time, on the root
        assert (await app.athread("r")).lease is None
        waiting = await app.athreads(status="waiting")  # the root, not the child thread its wait stands for
        assert [i.thread_id for i in waiting] == ["r"] and waiting[0].wake_at is not None
        assert waiting[0].wake_at.timestamp() == pytest.approx(root.wake_at, abs=1e-5)
        await await_for(lambda: _is(_status(app, "r"), "done"), 10, what="the wake-up")

    await _run(app, body)
    assert (await app.aget_state("r")).values.path == ["napped"]
    assert calls == [1]
    runs = await saver.list_runs(thread_id="r")
    assert [(r.kind, r.status) for r in runs] == [("input", "interrupted"), ("resume", "done")]  # woken once
    assert [w.status for w in await saver.list_waits(thread_id="r")] == ["fired"]
    assert all(w.status != "fired" for w in await saver.list_waits() if w.thread_id.startswith("r|"))
    assert all(not r.thread_id.startswith("r|") for r in await saver.list_runs())  # nothing queued for a child


async def test_an_interrupt_deadline_two_subgraphs_deep_answers_its_default(saver: Any) -> None:
    def ask(state: State, ctx: Any) -> dict[str, Any]:
        return {"answer": ctx.interrupt("ok?", timeout=0.4, on_timeout=OnTimeout.answer("default"))}

    app = _chain(ask, 2).compile(saver=saver)

    async def body() -> None:
        await app.asubmit({}, thread_id="d", graph=GRAPH)
        await await_for(lambda: _in(_status(app, "d"), ("done", "failed")), 10, what="the deadline")

    await _run(app, body)
    state = await app.aget_state("d")
    assert state.status == "done" and state.values.answer == "default"
    assert len(await saver.list_runs(thread_id="d")) == 2


async def test_a_person_answering_a_subgraph_question_before_its_deadline_wins(saver: Any) -> None:
    def ask(state: State, ctx: Any) -> dict[str, Any]:
        return {"answer": ctx.interrupt("ok?", timeout=30, on_timeout=OnTimeout.answer("late"))}

    app = _chain(ask, 1).compile(saver=saver)
    await app.asubmit({}, thread_id="p", graph=GRAPH)

    async def body() -> None:
        await await_for(lambda: _is(_status(app, "p"), "interrupted"), 10, what="the question")
        [wait] = await saver.list_waits(thread_id="p")
        assert wait.status == "pending" and wait.wake_at > 0
        await app.asubmit(None, thread_id="p", graph=GRAPH, resume=True, answer="person")
        await await_for(lambda: _is(_status(app, "p"), "done"), 10, what="the answer")

    await _run(app, body)
    assert (await app.aget_state("p")).values.answer == "person"


async def _is(value: Any, expected: str) -> bool:
    return bool(await value == expected)


async def _in(value: Any, expected: tuple[str, ...]) -> bool:
    return bool(await value in expected)
