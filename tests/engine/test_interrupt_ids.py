"""Several interrupts in one step: each open interrupt has an id; one resume may answer several
(``{interrupt.id: answer}``, or LangGraph's ``Command(resume={...})``), and a node still waiting for its answer is
not run again until it has one."""

from __future__ import annotations

import operator
from collections import Counter
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END as LG_END
from langgraph.graph import START as LG_START
from langgraph.graph import StateGraph as LGStateGraph
from langgraph.types import Command as LGCommand
from langgraph.types import interrupt as lg_interrupt

from graphckpt import END, START, Command, StateGraph, interrupt
from graphckpt.savers.base import Saver


class S(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def build(
    calls: Counter[str], builder: Any = StateGraph, start: Any = START, end: Any = END, ask: Any = interrupt
) -> Any:
    def asking(name: str) -> Any:
        def node(s: S) -> dict[str, Any]:
            calls[name] += 1
            return {"log": [f"{name}={ask(f'{name}?')}"]}

        return node

    g = builder(S)
    g.add_node("a", asking("a"))
    g.add_node("b", asking("b"))
    g.add_edge(start, "a")
    g.add_edge(start, "b")
    g.add_edge("a", end)
    g.add_edge("b", end)
    return g


async def test_one_resume_answers_both_interrupts_by_id(saver: Saver) -> None:
    calls: Counter[str] = Counter()
    app = build(calls).compile(saver=saver)
    waiting = await app.ainvoke({}, thread_id="t")
    assert waiting.status == "interrupted"
    ids = {i.payload: i.id for i in waiting.interrupts}
    assert set(ids) == {"a?", "b?"} and len(set(ids.values())) == 2
    done = await app.aresume("t", {ids["a?"]: "x", ids["b?"]: "y"})
    assert done.status == "done" and sorted(done.values["log"]) == ["a=x", "b=y"]
    assert calls == Counter(a=2, b=2)
    await app.aclose()


async def test_an_unanswered_node_waits_without_running_again(saver: Saver) -> None:
    calls: Counter[str] = Counter()
    app = build(calls).compile(saver=saver)
    waiting = await app.ainvoke({}, thread_id="t")
    b = next(i for i in waiting.interrupts if i.payload == "b?")
    half = await app.aresume("t", Command(resume={b.id: "y"}))
    assert half.status == "interrupted" and [i.payload for i in half.interrupts] == ["a?"]
    assert calls == Counter(a=1, b=2)  # a was not run again: it still waits for its answer
    done = await app.aresume("t", "x")
    assert sorted(done.values["log"]) == ["a=x", "b=y"] and calls == Counter(a=2, b=2)
    await app.aclose()


def test_the_same_node_calls_as_langgraph() -> None:
    lg_calls: Counter[str] = Counter()
    lg = build(lg_calls, LGStateGraph, LG_START, LG_END, lg_interrupt).compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t"}}
    lg.invoke({"log": []}, config)
    ids = {i.value: i.id for i in lg.get_state(config).interrupts}
    lg_final = lg.invoke(LGCommand(resume={ids["a?"]: "x", ids["b?"]: "y"}), config)

    calls: Counter[str] = Counter()
    app = build(calls).compile()
    waiting = app.invoke({}, thread_id="t")
    answers = {i.id: {"a?": "x", "b?": "y"}[i.payload] for i in waiting.interrupts}
    assert app.resume("t", Command(resume=answers)).values == lg_final
    assert calls == lg_calls
    app.close()
