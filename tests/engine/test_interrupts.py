"""Interrupts: a thread stops with status ``interrupted`` and waits for ``resume``.

``interrupt_before``/``interrupt_after`` (compile time) stop around a node; ``ctx.interrupt(payload)`` stops inside
one, and ``resume(thread_id, answer)`` makes that call return ``answer``. Effects journaled before the interrupt are
not repeated when the node runs again.
"""

from __future__ import annotations

import threading
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from graphckpt import END, START, Context, Saver, SerializationError, StateGraph, ThreadStateError, append


class S(BaseModel):
    log: Annotated[list[str], append] = []
    approved: bool | None = None


def chain(saver: Saver, **options: Any) -> Any:
    g = StateGraph(S)
    for name in ("one", "two", "three"):
        g.add_node(name, lambda s, name=name: {"log": [name]})
    g.add_edge(START, "one")
    g.add_edge("one", "two")
    g.add_edge("two", "three")
    g.add_edge("three", END)
    return g.compile(saver=saver, **options)


async def test_interrupt_before(saver: Saver) -> None:
    app = chain(saver, interrupt_before=["two"])
    snap = await app.ainvoke({}, thread_id="b")
    assert snap.status == "interrupted"
    assert snap.next == ("two",)
    assert [(i.node, i.when) for i in snap.interrupts] == [("two", "before")]
    assert snap.values.log == ["one"]
    assert [t.status for t in await app.athreads(status="interrupted")] == ["interrupted"]
    done = await app.aresume("b")
    assert done.status == "done" and done.values.log == ["one", "two", "three"]


async def test_interrupt_after(saver: Saver) -> None:
    app = chain(saver, interrupt_after=["one"])
    snap = await app.ainvoke({}, thread_id="a")
    assert snap.status == "interrupted" and snap.values.log == ["one"] and snap.next == ("two",)
    assert [(i.node, i.when) for i in snap.interrupts] == [("one", "after")]
    with pytest.raises(ThreadStateError, match=r"thread 'a' is interrupted; call resume\('a', answer\).* or fork\('a'"):
        await app.ainvoke({}, thread_id="a")
    done = await app.aresume("a")
    assert done.values.log == ["one", "two", "three"]


async def test_ctx_interrupt_and_resume_with_answer(saver: Saver) -> None:
    effects: list[str] = []

    def approve(s: S, ctx: Context) -> dict[str, Any]:
        draft = ctx.effect(lambda: effects.append("drafted") or "draft-1")
        answer = ctx.interrupt({"question": f"ship {draft}?"})
        return {"approved": bool(answer), "log": [f"{draft}:{answer}"]}

    g = StateGraph(S)
    g.add_node("approve", approve)
    g.add_edge(START, "approve")
    g.add_edge("approve", END)
    app = g.compile(saver=saver)
    snap = await app.ainvoke({}, thread_id="h")
    assert snap.status == "interrupted"
    assert [(i.node, i.when, i.payload) for i in snap.interrupts] == [
        ("approve", "inside", {"question": "ship draft-1?"})
    ]
    assert (await app.aget_state("h")).interrupts == snap.interrupts

    with pytest.raises(ThreadStateError, match="waiting for an answer"):
        await app.aresume("h")
    done = await app.aresume("h", True)
    assert done.status == "done"
    assert done.values.approved is True and done.values.log == ["draft-1:True"]
    assert effects == ["drafted"]  # journaled before the interrupt: not repeated


async def test_two_interrupts_in_one_node(saver: Saver) -> None:
    def ask_twice(s: S, ctx: Context) -> dict[str, Any]:
        first = ctx.interrupt("first?")
        second = ctx.interrupt("second?")
        return {"log": [f"{first}+{second}"]}

    g = StateGraph(S)
    g.add_node("ask", ask_twice)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    app = g.compile(saver=saver)
    assert (await app.ainvoke({}, thread_id="q")).interrupts[0].payload == "first?"
    assert (await app.aresume("q", "A")).interrupts[0].payload == "second?"
    done = await app.aresume("q", "B")
    assert done.values.log == ["A+B"]


async def test_an_unstorable_interrupt_payload_fails_the_node_and_keeps_its_siblings(saver: Saver) -> None:
    """The payload of ``ctx.interrupt`` is stored with the stop: one the serializer refuses fails that node, naming
    it, and the thread is ``failed`` with its sibling's result kept (a bare SerializationError left it ``running``
    with nothing recorded)."""
    payload: list[Any] = [threading.Lock()]
    calls: list[str] = []

    def ask(s: S, ctx: Context) -> dict[str, Any]:
        return {"log": [f"ask:{ctx.interrupt(payload[0])}"]}

    def other(s: S) -> dict[str, Any]:
        calls.append("other")
        return {"log": ["other"]}

    g = StateGraph(S)
    g.add_node("ask", ask)
    g.add_node("other", other)
    for node in ("ask", "other"):
        g.add_edge(START, node)
        g.add_edge(node, END)
    app = g.compile(saver=saver)
    with pytest.raises(SerializationError, match=r"node 'ask': the payload of ctx.interrupt #0 cannot be stored"):
        await app.ainvoke({}, thread_id="p")
    snap = await app.aget_state("p")
    assert snap.status == "failed" and [e.node for e in snap.errors] == ["ask"] and snap.interrupts == ()
    payload[0] = "ok?"
    asked = await app.aresume("p")
    assert asked.status == "interrupted" and [i.payload for i in asked.interrupts] == ["ok?"]
    done = await app.aresume("p", "yes")
    assert done.values.log == ["ask:yes", "other"] and calls == ["other"]


async def test_an_unstorable_answer_is_refused_and_the_thread_still_waits(saver: Saver) -> None:
    g = StateGraph(S)
    g.add_node("ask", lambda s, ctx: {"log": [str(ctx.interrupt("q"))]})
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    app = g.compile(saver=saver)
    await app.ainvoke({}, thread_id="w")
    with pytest.raises(SerializationError, match=r"cannot store a value of type _thread\.lock"):
        await app.aresume("w", threading.Lock())
    snap = await app.aget_state("w")
    assert snap.status == "interrupted" and [i.payload for i in snap.interrupts] == ["q"]  # not marked running
    assert (await app.aresume("w", "fine")).values.log == ["fine"]


async def test_answer_without_open_interrupt_is_refused(saver: Saver) -> None:
    app = chain(saver, interrupt_before=["two"])
    await app.ainvoke({}, thread_id="x")
    with pytest.raises(ThreadStateError, match="not waiting for an answer"):
        await app.aresume("x", "yes")
    assert (await app.aget_state("x")).status == "interrupted"


async def test_command_resume_as_the_input_resumes(saver: Saver) -> None:
    """LangGraph's ``invoke(Command(resume=answer), config)`` / ``stream(Command(resume=...), config)``: the answer
    to the open interrupt, not a new input."""
    from graphckpt import Command, interrupt

    def ask(s: S) -> dict[str, Any]:
        return {"log": [interrupt("name?")]}

    app = StateGraph(S).add_node("ask", ask).add_edge(START, "ask").compile(saver)
    assert (await app.ainvoke({}, thread_id="t")).status == "interrupted"
    snap = await app.ainvoke(Command(resume="Ada"), thread_id="t")
    assert snap.status == "done" and snap.values.log == ["Ada"]
    await app.ainvoke({}, thread_id="u")
    assert [c async for c in app.astream(Command(resume="Bo"), thread_id="u")] == [{"ask": {"log": ["Bo"]}}]
    with pytest.raises(ValueError, match=r"only Command\(resume=answer\)"):
        await app.ainvoke(Command(goto="ask"), thread_id="t")
    with pytest.raises(ValueError, match="needs the thread_id"):
        await app.ainvoke(Command(resume="x"))
