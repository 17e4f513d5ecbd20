"""The double answer: a person answers an interrupt with a deadline at the same moment its deadline fires. Exactly
one of the two takes effect; the other is refused with a clear error (:class:`InterruptClosedError`, its run ends
``cancelled``) or never queued (the wait went stale): never both, and never the loser answering the thread's next
question. The waker's answer and a person's answer by interrupt id are both bound to the interrupt they answer.

Once the deadline has passed (no worker up meanwhile), the waker is called and the person submits, in both orders and
at once, on every saver; then a real worker runs the queued runs in their order."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel
from support.waiting import await_for

from graphckpt import END, START, StateGraph, Worker, ids
from graphckpt.errors import InterruptClosedError, ThreadNotFoundError
from graphckpt.waiting import OnTimeout

GRAPH = "tests:double_answer"


class State(BaseModel):
    first: str = ""
    second: str = ""


def ask(state: State, ctx: Any) -> dict[str, Any]:
    return {"first": ctx.interrupt("approve?", timeout=0.5, on_timeout=OnTimeout.answer("timeout"))}


def then(state: State, ctx: Any) -> dict[str, Any]:
    return {"second": ctx.interrupt("and then?")}


def _app(saver: Any) -> Any:
    g = StateGraph(State)
    g.add_node("ask", ask)
    g.add_node("then", then)
    g.add_edge(START, "ask")
    g.add_edge("ask", "then")
    g.add_edge("then", END)
    return g.compile(saver=saver)


async def _question(app: Any, thread_id: str) -> str | None:
    try:
        snap = await app.aget_state(thread_id)
    except ThreadNotFoundError:
        return None
    return str(snap.interrupts[0].payload) if snap.status == "interrupted" and snap.interrupts else None


ORDERS = ["deadline-then-person", "person-then-deadline", "together"]


@pytest.mark.parametrize("order", ORDERS)
async def test_a_person_and_the_deadline_answering_at_once_exactly_one_counts(saver: Any, order: str) -> None:
    app = _app(saver)
    thread_id = f"race-{order}"

    async def worker_until(condition: Any, what: str) -> None:
        worker = Worker({GRAPH: app}, poll=0.02)
        loop = asyncio.ensure_future(worker.run())
        try:
            await await_for(condition, 15, what=what)
        finally:
            worker.stop()
            await loop

    await app.asubmit({}, thread_id=thread_id, graph=GRAPH)
    await worker_until(lambda: _is(_question(app, thread_id), "approve?"), "the question")
    [interrupt] = (await app.aget_state(thread_id)).interrupts
    [wait] = await saver.list_waits(thread_id=thread_id)
    assert wait.status == "pending"
    await await_for(lambda: ids.now() > wait.wake_at, 5, what="the deadline to pass")  # no worker is up
    refused: list[BaseException] = []

    async def deadline() -> None:
        await saver.wake_due(ids.now())  # the deadline fires

    async def person() -> None:
        try:
            await app.asubmit(
                None, thread_id=thread_id, graph=GRAPH, resume=True, answer={interrupt.id: "person"},
                multitask="enqueue",
            )  # fmt: skip
        except InterruptClosedError as exc:  # the deadline's run already answered it
            refused.append(exc)

    if order == "deadline-then-person":
        await deadline()
        await person()
    elif order == "person-then-deadline":
        await person()
        await deadline()
    else:
        await asyncio.gather(deadline(), person())

    async def settled() -> bool:
        runs = await saver.list_runs(thread_id=thread_id)
        next_question = await _question(app, thread_id) == "and then?"
        return next_question and all(r.status not in ("queued", "running") for r in runs)

    await worker_until(settled, "both answers to be dealt with")  # the two queued runs, in their order
    state = await app.aget_state(thread_id)
    assert state.values.first in ("timeout", "person")  # one of the two took effect
    assert state.values.second == "" and state.status == "interrupted"  # the loser did not answer the next question
    assert [i.payload for i in state.interrupts] == ["and then?"]
    runs = [(r.kind, r.status, r.error) for r in await saver.list_runs(thread_id=thread_id)]
    answered = [r for r in runs if r[0] == "resume" and r[1] == "interrupted"]
    assert len(answered) == 1, runs  # exactly one resume answered the question
    losers = [r for r in runs if r[0] == "resume" and r[1] != "interrupted"]
    for _, status, error in losers:  # a loser's run was refused, naming the interrupt
        assert status == "cancelled" and error is not None and interrupt.id in error and "not open" in error, runs
    [fired] = await saver.list_waits(thread_id=thread_id)
    if state.values.first == "timeout":
        assert fired.status == "fired"
    assert len(losers) + len(refused) + (fired.status == "stale") == 1, (runs, refused, fired)  # one loser, named
    if order == "deadline-then-person":  # both queued; the deadline's run ran first
        assert state.values.first == "timeout"
    if order == "person-then-deadline":
        assert state.values.first == "person"


async def test_an_answer_by_the_id_of_a_closed_interrupt_is_refused_not_given_to_the_next(saver: Any) -> None:
    app = _app(saver)
    await app.ainvoke({}, thread_id="closed")
    [first] = (await app.aget_state("closed")).interrupts
    await app.aresume("closed", {first.id: "yes"})
    with pytest.raises(InterruptClosedError, match=rf"thread 'closed': interrupt {first.id} is not open"):
        await app.aresume("closed", {first.id: "again"})
    state = await app.aget_state("closed")
    assert (state.values.first, state.values.second) == ("yes", "")  # the next question is still open
    [second] = state.interrupts
    await app.aresume("closed", {second.id: "done"})
    with pytest.raises(InterruptClosedError, match="open: none"):
        await app.aresume("closed", {second.id: "late"})
    assert (await app.aget_state("closed")).values.second == "done"


async def _is(value: Any, expected: str) -> bool:
    return bool(await value == expected)
