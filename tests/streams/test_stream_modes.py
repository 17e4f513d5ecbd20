"""Stream modes as LangGraph users know them: ``updates`` is one chunk per task, ``values`` skips a
step that changed nothing, a list of modes yields ``(mode, chunk)`` pairs, ``custom`` carries what nodes write as
they run, ``tasks`` shows each task starting and finishing."""

from __future__ import annotations

import operator
import threading
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END as LG_END
from langgraph.graph import START as LG_START
from langgraph.graph import StateGraph as LGStateGraph
from langgraph.types import Send as LGSend

from graphckpt import END, START, Context, Send, StateGraph, get_stream_writer
from graphckpt.savers.base import Saver


class S(TypedDict, total=False):
    log: Annotated[list[Any], operator.add]
    x: int


def build(builder: Any = StateGraph, start: Any = START, end: Any = END, send: Any = Send) -> Any:
    g = builder(S)
    g.add_node("a", lambda s: {"log": ["a"]})
    g.add_node("b", lambda s: {})
    g.add_node("c", lambda s: None)
    g.add_node("w", lambda s: {"log": [s["x"]]})
    g.add_edge(start, "a")
    g.add_edge(start, "b")
    g.add_edge("a", "c")
    g.add_edge("b", "c")
    g.add_conditional_edges("c", lambda s: [send("w", {"x": 1}), send("w", {"x": 2})])
    g.add_edge("w", end)
    return g


def langgraph_stream(mode: Any) -> list[Any]:
    app = build(LGStateGraph, LG_START, LG_END, LGSend).compile(checkpointer=InMemorySaver())
    return list(app.stream({"log": []}, {"configurable": {"thread_id": "t"}}, stream_mode=mode))


@pytest.mark.parametrize("mode", ["updates", "values", ["updates", "values"]])
def test_the_stream_is_langgraphs(mode: Any) -> None:
    """The same chunks. LangGraph yields a step's updates as its tasks finish (``a`` and ``b`` in either order);
    graphckpt yields them in task order, so the comparison is of the chunks, and graphckpt's order is pinned."""
    app = build().compile()
    try:
        ours = list(app.stream({}, thread_id="t", mode=mode))
        assert sorted(map(repr, ours)) == sorted(map(repr, langgraph_stream(mode)))
        if mode == "updates":
            assert ours == [{"a": {"log": ["a"]}}, {"b": None}, {"c": None}, {"w": {"log": [1]}}, {"w": {"log": [2]}}]
    finally:
        app.close()


async def test_custom_writes_arrive_while_the_node_runs(saver: Saver) -> None:
    """The node writes, then waits until the reader has seen the write: it arrives before the step commits."""
    seen = threading.Event()

    def slow(s: S) -> dict[str, Any]:  # sync, in a worker thread
        get_stream_writer()({"progress": 1})
        assert seen.wait(30)
        return {"log": ["slow"]}

    async def fast(s: S, ctx: Context) -> dict[str, Any]:
        ctx.write("fast says hi")
        return {}

    g = StateGraph(S)
    g.add_node("slow", slow)
    g.add_node("fast", fast)
    g.add_edge(START, "slow")
    g.add_edge(START, "fast")
    g.add_edge("slow", END)
    g.add_edge("fast", END)
    app = g.compile(saver=saver)
    got: list[Any] = []
    async for mode, chunk in app.astream({}, thread_id="t", mode=["custom", "updates"]):
        got.append((mode, chunk))
        if chunk == {"progress": 1}:
            seen.set()
    assert ("custom", "fast says hi") in got and ("custom", {"progress": 1}) in got
    assert got.index(("custom", {"progress": 1})) < got.index(("updates", {"slow": {"log": ["slow"]}}))
    await app.aclose()


def test_tasks_show_each_start_and_result() -> None:
    app = build().compile()
    events = list(app.stream({}, thread_id="t", mode="tasks"))
    app.close()
    starts = [e for e in events if "input" in e]
    results = [e for e in events if "result" in e]
    assert [e["name"] for e in starts] == ["a", "b", "c", "w", "w"]
    assert [e["name"] for e in results] == ["a", "b", "c", "w", "w"]
    assert {e["id"] for e in starts} == {e["id"] for e in results}
    assert [e["input"] for e in starts if e["name"] == "w"] == [{"x": 1}, {"x": 2}]


def test_an_unknown_mode_names_the_modes() -> None:
    app = build().compile()
    modes = "updates, values, checkpoints, custom, tasks, messages, debug"
    with pytest.raises(ValueError, match=f"stream mode must be one of {modes}"):
        list(app.stream({}, thread_id="t", mode="token"))  # type: ignore[arg-type]
    app.close()
