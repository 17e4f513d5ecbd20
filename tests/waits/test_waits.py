"""Durable waits in a graph, with a real worker on every saver: ``ctx.sleep`` stops the thread (``interrupted``
with a pending wait, no lease held) and the worker's sweep resumes it at the time, once; the work before the sleep is
not repeated; an interrupt with a deadline answers with a default, goes to a node or fails when nobody answers in
time, and an answer before the deadline wins (the wait goes stale: no second run)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from pydantic import BaseModel
from support.waiting import await_for

from graphckpt import END, START, StateGraph, Worker, append
from graphckpt.waiting import OnTimeout

GRAPH = "tests:waits"


class State(BaseModel):
    calls: int = 0
    answer: str = ""
    path: list[str] = []


def _app(saver: Any, node: Any, extra: dict[str, Any] | None = None) -> Any:
    g = StateGraph(State)
    g.add_node("n", node, destinations=list(extra or {}))
    for name, fn in (extra or {}).items():
        g.add_node(name, fn)
        g.add_edge(name, END)
    g.add_edge(START, "n")
    g.add_edge("n", END)
    return g.compile(saver=saver)


async def _with_worker(app: Any, body: Any) -> Any:
    worker = Worker({GRAPH: app}, poll=0.05)
    loop = asyncio.ensure_future(worker.run())
    try:
        return await body()
    finally:
        worker.stop()
        await loop


async def _status(app: Any, thread_id: str) -> str:
    try:
        return str((await app.athread(thread_id)).status)
    except Exception:
        return "missing"


async def test_a_sleeping_thread_holds_nothing_and_wakes_once(saver: Any) -> None:
    calls: list[float] = []

    async def node(state: State, ctx: Any) -> dict[str, Any]:
        await ctx.aeffect(lambda: calls.append(1.0))  # work before the sleep: journaled, never repeated
        ctx.sleep(0.6)
        return {"calls": len(calls)}

    app = _app(saver, node)

    async def body() -> None:
        await app.asubmit({}, thread_id="s", graph=GRAPH)
        await await_for(lambda: _is(_status(app, "s"), "interrupted"), 10, what="the sleep")
        info = await app.athread("s")
        assert info.lease is None  # nothing holds the thread while it waits
        [wait] = [w for w in await saver.list_waits() if w.thread_id == "s"]
        assert wait.status == "pending" and wait.wake_at > 0
        await await_for(lambda: _is(_status(app, "s"), "done"), 10, what="the wake-up")
        [fired] = [w for w in await saver.list_waits() if w.thread_id == "s"]
        assert fired.status == "fired" and fired.fired_at is not None and fired.fired_at >= wait.wake_at
        runs = await saver.list_runs(thread_id="s")
        assert [(r.kind, r.status) for r in runs] == [("input", "interrupted"), ("resume", "done")]

    await _with_worker(app, body)
    assert len(calls) == 1
    assert (await app.aget_state("s")).values.calls == 1


async def test_interrupt_deadlines_answer_route_or_fail(saver: Any) -> None:
    def answer_node(state: State, ctx: Any) -> dict[str, Any]:
        return {"answer": ctx.interrupt("ok?", timeout=0.3, on_timeout=OnTimeout.answer("default"))}

    def route_node(state: State, ctx: Any) -> dict[str, Any]:
        return {"answer": ctx.interrupt("ok?", timeout=0.3, on_timeout=OnTimeout.goto("escalate"))}

    def fail_node(state: State, ctx: Any) -> dict[str, Any]:
        return {"answer": ctx.interrupt("ok?", timeout=0.3)}

    def escalate(state: State) -> dict[str, Any]:
        return {"path": ["escalated"]}

    for name, node in (("a", answer_node), ("r", route_node), ("f", fail_node)):
        app = _app(saver, node, {"escalate": escalate})

        async def body(app: Any = app, name: str = name) -> None:
            await app.asubmit({}, thread_id=name, graph=GRAPH)
            await await_for(
                lambda: _in(_status(app, name), ("done", "failed")), 15, what=f"thread {name} after its deadline"
            )

        await _with_worker(app, body)
        state = await app.aget_state(name)
        if name == "a":
            assert state.status == "done" and state.values.answer == "default"
        elif name == "r":
            assert state.status == "done" and state.values.path == ["escalated"] and state.values.answer == ""
        else:
            info = await app.athread(name)
            assert info.status == "failed" and "deadline" in str(info.error)


async def test_an_answer_before_the_deadline_wins_and_the_wait_goes_stale(saver: Any) -> None:
    def node(state: State, ctx: Any) -> dict[str, Any]:
        return {"answer": ctx.interrupt("ok?", timeout=0.5, on_timeout=OnTimeout.answer("late"))}

    app = _app(saver, node)

    async def body() -> None:
        await app.asubmit({}, thread_id="e", graph=GRAPH)
        await await_for(lambda: _is(_status(app, "e"), "interrupted"), 10, what="the question")
        await app.asubmit(None, thread_id="e", graph=GRAPH, resume=True, answer="person")
        await await_for(lambda: _is(_status(app, "e"), "done"), 10, what="the answer")

        async def stale() -> bool:
            return [w.status for w in await saver.list_waits() if w.thread_id == "e"] == ["stale"]

        await await_for(stale, 10, what="the wait going stale")

    await _with_worker(app, body)
    assert (await app.aget_state("e")).values.answer == "person"
    assert len(await saver.list_runs(thread_id="e")) == 2  # the question and the person's answer: no third


async def _is(value: Any, expected: str) -> bool:
    return bool(await value == expected)


async def _in(value: Any, expected: tuple[str, ...]) -> bool:
    return bool(await value in expected)


async def test_parallel_waits_share_one_wait_and_each_task_wakes_at_its_own_time(saver: Any) -> None:
    """Three tasks of one step wait (sleeps of 0.3 s and 1.2 s, an interrupt with a 0.7 s deadline): the thread's one
    wait fires at the earliest time and answers all three; those not due wait again (a new wait at the next time),
    so each goes on at its own time, its work before the wait done once."""
    calls: list[str] = []

    class Fan(BaseModel):
        path: Annotated[list[str], append] = []

    def sleeper(name: str, seconds: float) -> Any:
        async def node(state: Fan, ctx: Any) -> dict[str, Any]:
            await ctx.aeffect(lambda: calls.append(name))
            ctx.sleep(seconds)
            return {"path": [name]}

        return node

    def asker(state: Fan, ctx: Any) -> dict[str, Any]:
        return {"path": [ctx.interrupt("ok?", timeout=0.7, on_timeout=OnTimeout.answer("asked-timeout"))]}

    g = StateGraph(Fan)
    for name, fn in (("short", sleeper("short", 0.3)), ("long", sleeper("long", 1.2)), ("ask", asker)):
        g.add_node(name, fn)
        g.add_edge(START, name)
        g.add_edge(name, END)
    app = g.compile(saver=saver)

    async def body() -> None:
        await app.asubmit({}, thread_id="fan", graph=GRAPH)
        await await_for(lambda: _is(_status(app, "fan"), "done"), 20, what="every task to wake")

    await _with_worker(app, body)
    assert sorted((await app.aget_state("fan")).values.path) == ["asked-timeout", "long", "short"]
    assert sorted(calls) == ["long", "short"]  # the work before each sleep, once
    runs = [(r.kind, r.status) for r in await saver.list_runs(thread_id="fan")]
    assert runs[0] == ("input", "interrupted") and runs[-1] == ("resume", "done")
    assert 2 <= len(runs) <= 4 and all(k == "resume" and s in ("interrupted", "done") for k, s in runs[1:]), runs
