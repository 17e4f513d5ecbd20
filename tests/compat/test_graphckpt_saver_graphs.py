"""LangGraph's own graphs, unchanged, on :class:`graphckpt.compat.langgraph.GraphckptSaver`: each scenario runs on
LangGraph's own SqliteSaver and on GraphckptSaver over graphckpt's SQLite and PostgreSQL savers, and what LangGraph
reports (values, next nodes, the whole state history with its metadata, tasks and interrupts) must be the same.

Terms: *resume* continues a thread from its latest checkpoint (``invoke(None, config)``, or ``Command(resume=...)``
after an ``interrupt()``); *time travel* re-runs from a past checkpoint (``invoke(None, past_config)``); a *fork* is
``update_state`` on a past checkpoint, which starts a branch of the same thread from there."""

from __future__ import annotations

import operator
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver as LangGraphSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Send, interrupt
from support.postgres import PG_DSN, require_postgres

from graphckpt.compat.langgraph import GraphckptSaver
from graphckpt.savers.postgres import PostgresSaver
from graphckpt.savers.sqlite import SqliteSaver

Observe = Callable[[Any], list[Any]]


# -- the checkpointers ---------------------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def ours(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[GraphckptSaver]:
    if request.param == "sqlite":
        saver = GraphckptSaver(SqliteSaver(tmp_path / "graphckpt.db"))
        yield saver
        saver.close()
        return
    require_postgres()
    import psycopg

    schema = f"gc_test_{uuid.uuid4().hex[:12]}"
    saver = GraphckptSaver(PostgresSaver(PG_DSN, schema=schema))
    try:
        yield saver
    finally:
        saver.close()
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def theirs(tmp_path: Path) -> Iterator[LangGraphSqliteSaver]:
    conn = sqlite3.connect(tmp_path / "langgraph.db", check_same_thread=False)
    yield LangGraphSqliteSaver(conn)
    conn.close()


def _plain(value: Any) -> Any:
    """A value with messages reduced to what a reader compares (type, content, id, tool calls)."""
    if isinstance(value, BaseMessage):
        calls = [(c["name"], c["args"], c["id"]) for c in getattr(value, "tool_calls", [])]
        return (value.type, value.content, value.id, calls)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _history(graph: Any, config: dict[str, Any]) -> list[Any]:
    out = []
    for snap in graph.get_state_history(config):
        meta = snap.metadata or {}
        tasks = [(t.name, _plain(t.result) if t.result is not None else None, repr(t.error)) for t in snap.tasks]
        interrupts = [_plain(i.value) for i in snap.interrupts]
        out.append((_plain(snap.values), snap.next, meta.get("source"), meta.get("step"), tasks, interrupts))
    return out


def _same(scenario: Callable[[Any], list[Any]], ours: GraphckptSaver, theirs: LangGraphSqliteSaver) -> list[Any]:
    got, expected = scenario(ours), scenario(theirs)
    assert got == expected
    return got


# -- a tool loop with add_messages (create_react_agent's shape) ---------------------------------------------------


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _agent_graph(checkpointer: Any) -> Any:
    def model(state: Chat) -> dict[str, Any]:
        last = state["messages"][-1]
        n = len(state["messages"])
        if isinstance(last, HumanMessage):
            call = {"name": "add", "args": {"a": n, "b": 2}, "id": f"call-{n}"}
            return {"messages": [AIMessage(content="", id=f"ai-{n}", tool_calls=[call])]}
        return {"messages": [AIMessage(content=f"the answer is {last.content}", id=f"ai-{n}")]}

    def tools(state: Chat) -> dict[str, Any]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        out = [
            ToolMessage(content=str(c["args"]["a"] + c["args"]["b"]), tool_call_id=c["id"], id=f"tool-{c['id']}")
            for c in last.tool_calls
        ]
        return {"messages": out}

    def route(state: Chat) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    builder = StateGraph(Chat)
    builder.add_node("model", model)
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=checkpointer)


def test_tool_loop_with_add_messages(ours: GraphckptSaver, theirs: LangGraphSqliteSaver) -> None:
    def scenario(checkpointer: Any) -> list[Any]:
        graph = _agent_graph(checkpointer)
        config = {"configurable": {"thread_id": "agent"}}
        graph.invoke({"messages": [HumanMessage(content="what is 1 + 2?", id="h1")]}, config)
        graph.invoke({"messages": [HumanMessage(content="and again?", id="h2")]}, config)
        state = graph.get_state(config)
        return [_plain(state.values), state.next, _history(graph, config)]

    got = _same(scenario, ours, theirs)
    assert got[0]["messages"][-1][1] == "the answer is 7"  # 5 messages + 2
    assert len(got[2]) == 10  # per invoke: the input checkpoint, its first step (-1, 0) and model, tools, model


# -- a subgraph ----------------------------------------------------------------------------------------------------


class Outer(TypedDict):
    log: Annotated[list[str], operator.add]


def _subgraph_graph(checkpointer: Any) -> Any:
    inner = StateGraph(Outer)
    inner.add_node("inner_a", lambda s: {"log": ["inner_a"]})
    inner.add_node("inner_b", lambda s: {"log": [f"inner_b saw {len(s['log'])}"]})
    inner.add_edge(START, "inner_a")
    inner.add_edge("inner_a", "inner_b")
    outer = StateGraph(Outer)
    outer.add_node("before", lambda s: {"log": ["before"]})
    outer.add_node("sub", inner.compile())
    outer.add_node("after", lambda s: {"log": ["after"]})
    outer.add_edge(START, "before")
    outer.add_edge("before", "sub")
    outer.add_edge("sub", "after")
    return outer.compile(checkpointer=checkpointer)


def test_subgraph(ours: GraphckptSaver, theirs: LangGraphSqliteSaver) -> None:
    def scenario(checkpointer: Any) -> list[Any]:
        graph = _subgraph_graph(checkpointer)
        config = {"configurable": {"thread_id": "sub"}}
        out = graph.invoke({"log": ["start"]}, config)
        return [out, _history(graph, config)]

    got = _same(scenario, ours, theirs)
    assert got[0]["log"][-1] == "after"


# -- interrupt() and Command(resume=...) ---------------------------------------------------------------------------


class Review(TypedDict):
    draft: str
    verdict: str


def _review_graph(checkpointer: Any) -> Any:
    def write(state: Review) -> dict[str, Any]:
        return {"draft": f"draft of {state['draft']}"}

    def review(state: Review) -> dict[str, Any]:
        answer = interrupt({"question": "approve?", "draft": state["draft"]})
        return {"verdict": f"{answer} ({state['draft']})"}

    builder = StateGraph(Review)
    builder.add_node("write", write)
    builder.add_node("review", review)
    builder.add_edge(START, "write")
    builder.add_edge("write", "review")
    return builder.compile(checkpointer=checkpointer)


def test_interrupt_and_resume(ours: GraphckptSaver, theirs: LangGraphSqliteSaver) -> None:
    def scenario(checkpointer: Any) -> list[Any]:
        graph = _review_graph(checkpointer)
        config = {"configurable": {"thread_id": "review"}}
        first = graph.invoke({"draft": "a poem", "verdict": ""}, config)
        paused = graph.get_state(config)
        seen = [
            _plain({k: v for k, v in first.items() if k != "__interrupt__"}),
            [i.value for i in first["__interrupt__"]],
            paused.next,
            [i.value for i in paused.interrupts],
        ]
        done = graph.invoke(Command(resume="yes"), config)
        return [*seen, done, graph.get_state(config).next, _history(graph, config)]

    got = _same(scenario, ours, theirs)
    assert got[2] == ("review",) and got[4]["verdict"] == "yes (draft of a poem)"


# -- update_state on a past checkpoint, and time travel -------------------------------------------------------------


class Count(TypedDict):
    steps: Annotated[list[str], operator.add]
    total: int


def _count_graph(checkpointer: Any) -> Any:
    builder = StateGraph(Count)
    builder.add_node("a", lambda s: {"steps": ["a"], "total": s["total"] + 1})
    builder.add_node("b", lambda s: {"steps": ["b"], "total": s["total"] * 10})
    builder.add_node("c", lambda s: {"steps": ["c"], "total": s["total"] + 5})
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", "c")
    return builder.compile(checkpointer=checkpointer)


def test_fork_from_a_past_checkpoint_and_time_travel(ours: GraphckptSaver, theirs: LangGraphSqliteSaver) -> None:
    def scenario(checkpointer: Any) -> list[Any]:
        graph = _count_graph(checkpointer)
        config = {"configurable": {"thread_id": "count"}}
        graph.invoke({"steps": [], "total": 1}, config)
        history = list(graph.get_state_history(config))
        before_b = next(s for s in history if s.next == ("b",))
        forked = graph.update_state(before_b.config, {"total": 100})  # a branch from the past
        branch_state = graph.get_state(forked)
        after_fork = graph.invoke(None, forked)
        before_c = next(s for s in graph.get_state_history(config) if s.next == ("c",))
        replayed = graph.invoke(None, before_c.config)  # time travel: re-run c from there
        latest = graph.get_state(config)
        return [
            _plain(branch_state.values),
            branch_state.next,
            after_fork,
            replayed,
            _plain(latest.values),
            _history(graph, config),
        ]

    got = _same(scenario, ours, theirs)
    assert got[1] == ("b",) and got[2]["total"] == 1005


# -- map-reduce with Send ------------------------------------------------------------------------------------------


class Topics(TypedDict):
    topics: list[str]
    jokes: Annotated[list[str], operator.add]


class One(TypedDict):
    topic: str


def _map_reduce_graph(checkpointer: Any) -> Any:
    def fan_out(state: Topics) -> list[Send]:
        return [Send("joke", {"topic": t}) for t in state["topics"]]

    builder = StateGraph(Topics)
    builder.add_node("plan", lambda s: {"topics": [*s["topics"], "owls"]})
    builder.add_node("joke", lambda s: {"jokes": [f"a joke about {s['topic']}"]})
    builder.add_node("best", lambda s: {"jokes": [f"best: {sorted(s['jokes'])[0]}"]})
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", fan_out, ["joke"])
    builder.add_edge("joke", "best")
    builder.add_edge("best", END)
    return builder.compile(checkpointer=checkpointer)


def test_map_reduce_with_send(ours: GraphckptSaver, theirs: LangGraphSqliteSaver) -> None:
    def scenario(checkpointer: Any) -> list[Any]:
        graph = _map_reduce_graph(checkpointer)
        config = {"configurable": {"thread_id": "jokes"}}
        out = graph.invoke({"topics": ["cats", "dogs"], "jokes": []}, config)
        return [sorted(out["jokes"]), _history(graph, config)]

    got = _same(scenario, ours, theirs)
    assert len(got[0]) == 4


# -- a task that fails ---------------------------------------------------------------------------------------------


def test_a_failed_task_is_shown_in_history_and_the_rerun_succeeds(
    ours: GraphckptSaver, theirs: LangGraphSqliteSaver
) -> None:
    def scenario(checkpointer: Any) -> list[Any]:
        attempts: list[int] = []

        def flaky(state: Count) -> dict[str, Any]:
            attempts.append(1)
            if len(attempts) == 1:
                raise ValueError("boom on the first attempt")
            return {"steps": ["flaky"], "total": state["total"] + 1}

        builder = StateGraph(Count)
        builder.add_node("ok", lambda s: {"steps": ["ok"]})
        builder.add_node("flaky", flaky)
        builder.add_edge(START, "ok")
        builder.add_edge(START, "flaky")
        graph = builder.compile(checkpointer=checkpointer)
        config = {"configurable": {"thread_id": "flaky"}}
        with pytest.raises(ValueError, match="boom"):
            graph.invoke({"steps": [], "total": 0}, config)
        failed = graph.get_state(config)
        seen = [failed.next, [(t.name, repr(t.error)) for t in failed.tasks]]
        out = graph.invoke(None, config)
        return [*seen, out, len(attempts), _history(graph, config)]

    got = _same(scenario, ours, theirs)
    assert ("flaky", repr("ValueError('boom on the first attempt')")) in got[1]  # the error, as text
    assert got[3] == 2 and sorted(got[2]["steps"]) == ["flaky", "ok"]


def test_kept_writes_become_references_only_where_a_rewrite_frees_the_row(ours: GraphckptSaver) -> None:
    """A task's appended items are stored in its write row and in the next checkpoint's delta. SQLite reuses the
    space of a rewritten row, so there the write becomes a reference to the delta; PostgreSQL would keep the whole old
    row version until VACUUM, so there the write stays as stored (compressed). LangGraph reads the same either way."""
    import asyncio

    from graphckpt.compat._lgvalues import unpack

    graph = _count_graph(ours)
    config = {"configurable": {"thread_id": "stored"}}
    assert graph.invoke({"steps": [], "total": 1}, config, durability="sync") == {"steps": ["a", "b", "c"], "total": 25}
    results = {s.next: s.tasks[0].result for s in graph.get_state_history(config) if s.next}
    assert results[("b",)] == {"steps": ["b"], "total": 20}
    assert results[("c",)] == {"steps": ["c"], "total": 25}

    async def stored_entries() -> list[str]:
        kinds = []
        for cp in await ours.saver.list_checkpoints("stored"):
            for row in await ours.saver.get_kept_writes("stored", cp.checkpoint_id):
                raw = ours.serializer.loads(unpack(row.data))
                kinds += [entry[0] for entry in raw[2] if entry[1] == "steps"] if raw[0] == "p" else []
        return kinds

    kinds = asyncio.run_coroutine_threadsafe(stored_entries(), ours._loop.loop).result(timeout=30)
    # the nodes' three appends, and the input's empty list (nothing to refer to: it stays whole everywhere)
    whole = ["w"] * 4 if ours.saver.keeps_dead_rows else ["r", "r", "r", "w"]
    assert sorted(kinds) == whole
