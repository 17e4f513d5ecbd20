"""Editing state as a node: ``fork(..., as_node=)`` and ``update_state(thread, update, as_node=)``
apply an update as that node's writes and evaluate its edges again, as LangGraph's ``update_state`` does. Without
``as_node`` the stored frontier is kept. History is never rewritten: ``update_state`` adds a checkpoint (source
``update``) to the same thread; ``fork`` starts a new thread."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END as LG_END
from langgraph.graph import START as LG_START
from langgraph.graph import StateGraph as LGStateGraph

from graphckpt import END, START, InvalidUpdateError, StateGraph
from graphckpt.savers.base import Saver


class S(TypedDict, total=False):
    choice: str
    log: Annotated[list[str], operator.add]


def _say(name: str) -> Any:
    return lambda s: {"log": [name]}


def _pick(s: S) -> str:
    return "b" if s.get("choice") == "b" else "c"


def build(builder: Any = StateGraph, start: Any = START, end: Any = END) -> Any:
    g = builder(S)
    for name in ("a", "b", "c"):
        g.add_node(name, _say(name))
    g.add_edge(start, "a")
    g.add_conditional_edges("a", _pick, ["b", "c"])
    g.add_edge("b", end)
    g.add_edge("c", end)
    return g


async def test_fork_as_node_routes_again_from_that_node(saver: Saver) -> None:
    app = build().compile(saver=saver, interrupt_before=["b", "c"])
    await app.ainvoke({"choice": "c"}, thread_id="t")
    head = await app.aget_state("t")
    assert head.next == ("c",) and head.status == "interrupted"
    kept = await app.afork("t", head.checkpoint_id, update={"choice": "b"}, new_thread_id="kept")
    assert kept.next == ("c",)  # without as_node the stored frontier stays
    rerouted = await app.afork("t", head.checkpoint_id, update={"choice": "b"}, as_node="a", new_thread_id="re")
    assert rerouted.next == ("b",) and rerouted.metadata["writes"] == {"a": ["choice"]}
    done = await app.aresume("re")
    assert done.values["log"] == ["a", "b"] and done.status == "done"
    assert (await app.aget_state("t")).next == ("c",)  # the source is untouched
    await app.aclose()


async def test_update_state_adds_a_checkpoint_and_keeps_history(saver: Saver) -> None:
    app = build().compile(saver=saver, interrupt_before=["b", "c"])
    await app.ainvoke({"choice": "c"}, thread_id="t")
    before = [s.checkpoint_id for s in await app.ahistory("t")]
    edited = await app.aupdate_state("t", {"choice": "b", "log": ["edit"]}, as_node="a")
    assert edited.thread_id == "t" and edited.next == ("b",) and edited.metadata["source"] == "update"
    assert edited.values["log"] == ["a", "edit"]  # through the reducer
    after = [s.checkpoint_id for s in await app.ahistory("t")]
    assert after[1:] == before and after[0] == edited.checkpoint_id  # appended, nothing rewritten
    done = await app.aresume("t")
    assert done.values["log"] == ["a", "edit", "b"]
    await app.aclose()


async def test_update_state_without_as_node_keeps_the_frontier(saver: Saver) -> None:
    app = build().compile(saver=saver, interrupt_before=["b", "c"])
    await app.ainvoke({"choice": "c"}, thread_id="t")
    edited = await app.aupdate_state("t", {"choice": "b"})
    assert edited.next == ("c",) and edited.metadata["writes"] == {"update": ["choice"]}
    assert (await app.aresume("t")).values["log"] == ["a", "c"]
    await app.aclose()


def test_bad_as_node_is_refused_before_anything_is_written() -> None:
    app = build().compile(interrupt_before=["c"])
    app.invoke({"choice": "c"}, thread_id="t")
    with pytest.raises(InvalidUpdateError, match="as_node 'nope' is not a node"):
        app.update_state("t", {"choice": "b"}, as_node="nope")
    with pytest.raises(InvalidUpdateError, match="not both"):
        app.fork("t", step=1, update={"choice": "b"}, as_node="a", goto="b")
    assert len(app.history("t")) == 2
    app.close()


def test_update_state_as_node_matches_langgraph() -> None:
    """The same edit on both engines gives the same next node and the same final values."""
    lg = build(LGStateGraph, LG_START, LG_END).compile(checkpointer=InMemorySaver(), interrupt_before=["b", "c"])
    config: Any = {"configurable": {"thread_id": "t"}}
    lg.invoke({"choice": "c", "log": []}, config)
    config = lg.update_state(config, {"choice": "b", "log": ["edit"]}, as_node="a")
    assert lg.get_state(config).next == ("b",)
    lg_final = lg.invoke(None, config)

    app = build().compile(interrupt_before=["b", "c"])
    app.invoke({"choice": "c"}, thread_id="t")
    assert app.update_state("t", {"choice": "b", "log": ["edit"]}, as_node="a").next == ("b",)
    assert app.resume("t").values == lg_final
    app.close()
