"""Subgraphs: a compiled graph used as a node (``add_node("sub", child_app)``).

A subgraph task runs the child graph on a child thread of the parent's thread, in the parent's saver: resuming the
parent after a crash resumes the child from its head (its finished inner steps do not run again); an interrupt
inside the child stops the parent, whose answer resumes the child from inside; ``Command(graph=Command.PARENT)``
routes in the parent. The child's checkpoints are hidden from ``threads()`` and shown by
``history(..., subgraphs=True)`` and ``stream(..., subgraphs=True)``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import SUPPORT, child_env
from support.postgres import PG_DSN, require_postgres
from support.subgraphs import Inner, Outer, child_graph, parent_graph

from graphckpt import END, START, Command, NodeError, Send, StateGraph, interrupt
from graphckpt.app import App
from graphckpt.subgraph import child_thread_id

CHILD = SUPPORT / "subgraph_child.py"


async def test_shared_keys_in_and_out(saver: Any) -> None:
    calls: dict[str, int] = {}
    app = parent_graph(child_graph(calls), saver, calls)
    snap = await app.ainvoke({"log": ["in"], "x": 1, "only_outer": "p"}, thread_id="t")
    # the child got the parent's shared fields; its output (shared fields only) is the node's update, folded by
    # the parent's reducer: the input's log comes back once more, as in LangGraph
    assert snap.values == {"log": ["in", "a", "in", "a", "c1", "c2:-", "b"], "x": 2, "only_outer": "p"}
    assert calls == {"a": 1, "c1": 1, "c2": 1, "b": 1}
    assert [t.thread_id for t in await app.athreads()] == ["t"]  # the child thread is hidden
    history = await app.ahistory("t", subgraphs=True)
    assert [(s.namespace != (), s.step, s.next) for s in reversed(history)] == [
        (False, 0, ("a",)),
        (False, 1, ("sub",)),
        (True, 0, ("c1",)),
        (True, 1, ("c2",)),
        (True, 2, ()),
        (False, 2, ("b",)),
        (False, 3, ()),
    ]
    sub_task = next(s for s in history if s.next == ("sub",)).tasks[0]
    child_id = child_thread_id("t", "sub", sub_task.id)
    assert {s.thread_id for s in history if s.namespace} == {child_id}
    assert {s.namespace for s in history if s.namespace} == {(f"sub:{sub_task.id}",)}
    inner = await app.aget_state(child_id)  # read with the child's schema
    assert inner.values == {"log": ["in", "a", "c1", "c2:-"], "x": 2, "only_inner": "z"}
    assert len(await app.ahistory("t")) == 4  # without subgraphs=True: the thread's own checkpoints
    d = await app.adiff((child_id, history[-3].checkpoint_id), (child_id, None))
    assert [c.path for c in d.changes()] == [("log", 2), ("log", 3), ("x",), ("only_inner",)]
    await app.adelete_thread("t")
    assert await saver.get_thread(child_id) is None


async def test_interrupt_inside_surfaces_to_parent(saver: Any) -> None:
    calls: dict[str, int] = {}
    app = parent_graph(child_graph(calls, ask=True), saver, calls)
    snap = await app.ainvoke({"log": [], "x": 0}, thread_id="t")
    assert snap.status == "interrupted" and snap.next == ("sub",)
    [intr] = snap.interrupts
    assert (intr.node, intr.payload) == ("sub", "ok?")
    assert (await app.athread("t")).status == "interrupted"
    state = await app.aget_state("t", subgraphs=True)  # LangGraph's get_state(config, subgraphs=True)
    inner = state.subgraphs[state.tasks[0].id]
    assert inner.next == ("c2",) and inner.values["log"] == ["a", "c1"] and inner.namespace
    assert [i.payload for i in inner.interrupts] == ["ok?"] and inner.status == "interrupted"
    assert (await app.aget_state("t")).subgraphs == {}
    with pytest.raises(Exception, match="waiting for an answer"):
        await app.aresume("t")
    snap = await app.aresume("t", Command(resume="yes"))
    assert snap.status == "done"
    assert snap.values["log"] == ["a", "a", "c1", "c2:yes", "b"]
    assert calls == {"a": 1, "c1": 1, "c2": 2, "b": 1}  # c1 did not run again: the child resumed from inside


async def test_interrupt_answered_by_id(saver: Any) -> None:
    calls: dict[str, int] = {}
    app = parent_graph(child_graph(calls, ask=True), saver, calls)
    snap = await app.ainvoke({"log": []}, thread_id="t")
    snap = await app.aresume("t", {snap.interrupts[0].id: "by id"})
    assert snap.values["log"][-2:] == ["c2:by id", "b"]


async def test_two_interrupts_in_one_child_node(saver: Any) -> None:
    def ask_twice(s: Inner) -> dict[str, Any]:
        return {"log": [interrupt("first?"), interrupt("second?")]}

    inner = StateGraph(Inner).add_node("ask", ask_twice).add_edge(START, "ask").compile()
    app = StateGraph(Outer).add_node("sub", inner).add_edge(START, "sub").compile(saver)
    snap = await app.ainvoke({"log": []}, thread_id="t")
    assert [i.payload for i in snap.interrupts] == ["first?"]
    snap = await app.aresume("t", "one")
    assert [i.payload for i in snap.interrupts] == ["second?"] and snap.status == "interrupted"
    snap = await app.aresume("t", "two")
    assert snap.status == "done" and snap.values["log"] == ["one", "two"]


async def test_parallel_interrupts_in_a_child_surface_together(saver: Any) -> None:
    calls: dict[str, int] = {}

    def asker(name: str) -> Any:
        def node(s: Inner) -> dict[str, Any]:
            calls[name] = calls.get(name, 0) + 1
            return {"log": [f"{name}={interrupt(name + '?')}"]}

        return node

    inner = StateGraph(Inner).add_node("p", asker("p")).add_node("q", asker("q"))
    inner.add_edge(START, "p").add_edge(START, "q")
    app = StateGraph(Outer).add_node("sub", inner.compile()).add_edge(START, "sub").compile(saver)
    snap = await app.ainvoke({"log": []}, thread_id="t")
    assert sorted(i.payload for i in snap.interrupts) == ["p?", "q?"]
    by_question = {i.payload: i.id for i in snap.interrupts}
    snap = await app.aresume("t", {by_question["q?"]: "Q"})  # one of two: the subgraph waits for the other
    assert snap.status == "interrupted" and [i.payload for i in snap.interrupts] == ["p?"]
    assert calls == {"p": 1, "q": 1}
    snap = await app.aresume("t", {snap.interrupts[0].id: "P"})
    assert snap.status == "done" and snap.values["log"] == ["p=P", "q=Q"]
    assert calls == {"p": 2, "q": 2}
    again = await app.ainvoke({"log": []}, thread_id="u")  # the same, answered at once
    snap = await app.aresume("u", {i.id: i.payload.upper() for i in again.interrupts})
    assert snap.values["log"] == ["p=P?", "q=Q?"]


async def test_failure_inside_resumes_inside(saver: Any) -> None:
    calls: dict[str, int] = {}
    app = parent_graph(child_graph(calls, fail_once=True), saver, calls)
    with pytest.raises(NodeError, match="c2 broke"):
        await app.ainvoke({"log": []}, thread_id="t")
    assert (await app.athread("t")).status == "failed"
    snap = await app.aresume("t")
    assert snap.status == "done"
    assert calls == {"a": 1, "c1": 1, "c2": 2, "b": 1}


async def test_command_parent_routes_in_the_parent(saver: Any) -> None:
    def inner_node(s: Inner) -> Command:
        return Command(graph=Command.PARENT, goto="z", update={"log": ["to parent"]})

    def never(s: Inner) -> dict[str, Any]:
        raise AssertionError("the subgraph stopped at Command.PARENT")

    inner = StateGraph(Inner).add_sequence([inner_node, never]).add_edge(START, "inner_node").compile()
    g = StateGraph(Outer)
    g.add_node("sub", inner, destinations=["z"])
    g.add_node("z", lambda s: {"log": ["z"]})
    g.add_edge(START, "sub")
    app = g.compile(saver)
    snap = await app.ainvoke({"log": []}, thread_id="t")
    assert snap.values["log"] == ["to parent", "z"]
    assert snap.status == "done"


async def test_command_parent_outside_a_subgraph_is_refused() -> None:
    def n(s: Outer) -> Command:
        return Command(graph=Command.PARENT, goto=END)

    app = StateGraph(Outer).add_node("n", n).add_edge(START, "n").compile()
    with pytest.raises(NodeError, match="outside a subgraph"):
        await app.ainvoke({"log": []})


async def test_nested_subgraphs_and_stream_namespaces(saver: Any) -> None:
    leaf = StateGraph(Inner).add_node("leaf", lambda s: {"log": ["leaf"]}).add_edge(START, "leaf").compile()
    mid = StateGraph(Inner).add_node("mid", lambda s: {"log": ["mid"]}).add_node("deep", leaf)
    mid.add_edge(START, "mid").add_edge("mid", "deep")
    top = StateGraph(Outer).add_node("sub", mid.compile()).add_edge(START, "sub").compile(saver)
    seen = [c async for c in top.astream({"log": []}, thread_id="t", subgraphs=True)]
    depths = [(len(ns), list(chunk)) for ns, chunk in seen]
    assert depths == [(1, ["mid"]), (2, ["leaf"]), (1, ["deep"]), (0, ["sub"])]
    assert seen[-1][1] == {"sub": {"log": ["mid", "mid", "leaf"]}}  # the leaf's output folds into mid's log
    history = await top.ahistory("t", subgraphs=True)
    assert sorted({len(s.namespace) for s in history}) == [0, 1, 2]
    stream = top.astream({"log": []}, thread_id="u", mode=["updates", "values"], subgraphs=True)
    modes = [(len(ns), mode) async for ns, mode, _ in stream]
    assert (0, "values") in modes and (2, "updates") in modes
    plain = [c async for c in top.astream({"log": []}, thread_id="v")]
    assert plain == [{"sub": {"log": ["mid", "mid", "leaf"]}}]


async def test_send_to_a_subgraph_runs_one_child_per_task(saver: Any) -> None:
    inner = StateGraph(Inner).add_node("echo", lambda s: {"log": [f"x={s['x']}"]}).add_edge(START, "echo").compile()
    g = StateGraph(Outer).add_node("sub", inner)
    g.add_conditional_edges(START, lambda s: [Send("sub", {"x": i}) for i in range(3)])
    app = g.compile(saver)
    snap = await app.ainvoke({"log": []}, thread_id="t")
    assert snap.values["log"] == ["x=0", "x=1", "x=2"]
    history = await app.ahistory("t", subgraphs=True)
    assert len({s.thread_id for s in history if s.namespace}) == 3


async def test_fork_of_the_parent_runs_the_subgraph_again(saver: Any) -> None:
    calls: dict[str, int] = {}
    app = parent_graph(child_graph(calls), saver, calls)
    await app.ainvoke({"log": [], "x": 10}, thread_id="t")
    before_sub = next(s for s in await app.ahistory("t") if s.next == ("sub",))
    await app.afork("t", before_sub.checkpoint_id, update={"x": 100}, new_thread_id="alt")
    snap = await app.aresume("alt")
    assert snap.values["x"] == 101 and calls["c1"] == 2
    assert (await app.aget_state("t")).values["x"] == 11  # the source is untouched
    alt = await app.ahistory("alt", subgraphs=True)
    assert {s.thread_id.split("|")[0] for s in alt if s.namespace} == {"alt"}
    assert sorted(t.thread_id for t in await app.athreads()) == ["alt", "t"]


def test_a_node_calling_a_compiled_graph_is_a_plain_call() -> None:
    inner = StateGraph(Inner).add_node("k", lambda s: {"log": ["k"]}).add_edge(START, "k").compile()

    def caller(s: Outer) -> dict[str, Any]:
        return {"log": inner.invoke({"log": ["x"]}).values["log"]}

    async def acaller(s: Outer) -> dict[str, Any]:
        return {"log": (await inner.ainvoke({"log": ["y"]})).values["log"]}

    g = StateGraph(Outer).add_sequence([caller, acaller]).add_edge(START, "caller")
    assert g.compile().invoke({"log": []}).values["log"] == ["x", "k", "y", "k"]


def test_add_node_of_a_compiled_graph_needs_a_name() -> None:
    from graphckpt import GraphSetupError

    with pytest.raises(GraphSetupError, match="needs a name"):
        StateGraph(Outer).add_node(child_graph({}))


# -- a real crash in the middle of a subgraph ------------------------------------------------------------------------


def _run_child(args: list[str], side: Path, *, block: bool) -> subprocess.Popen[str]:
    cmd = [sys.executable, str(CHILD), *args, "--side", str(side)] + (["--block"] if block else [])
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())


def _crash_in_the_middle(args: list[str], tmp_path: Path) -> tuple[list[str], str]:
    side = tmp_path / "calls.txt"
    side.touch()
    proc = _run_child(args, side, block=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # bounded: the child exits after 60 s at most
        assert line.strip() == "blocking", (line, proc.stderr.read() if proc.stderr else "")
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)  # reaps it and closes its pipes
    assert proc.returncode == -signal.SIGKILL
    assert side.read_text().split() == ["a", "i1"]
    again = _run_child(args, side, block=False)
    out, err = again.communicate(timeout=60)
    assert again.returncode == 0, err
    return side.read_text().split(), out.strip()


def _check_after_crash(app: App) -> None:
    snap = app.get_state("t")
    assert snap.status == "done"
    assert snap.values.log == ["a", "a", "i1", "i2", "i3", "b"]
    history = app.history("t", subgraphs=True)
    inner = [s for s in history if s.namespace]
    assert [s.step for s in reversed(inner)] == [0, 1, 2, 3]
    assert inner[0].values.draft == "i1i2i3"


@pytest.mark.slow
def test_sigkill_inside_a_subgraph_resumes_inside_sqlite(tmp_path: Path) -> None:
    from support.subgraph_child import build_graph

    from graphckpt.savers.sqlite import SqliteSaver

    db = tmp_path / "sub.db"
    calls, out = _crash_in_the_middle(["--backend", "sqlite", "--db", str(db)], tmp_path)
    assert out == "done done"
    assert calls == ["a", "i1", "i2", "i3", "b"]  # i1 (committed inside the child) did not run again
    with build_graph(str(tmp_path / "unused")).compile(SqliteSaver(db)) as app:
        _check_after_crash(app)


@pytest.mark.slow
@pytest.mark.postgres
def test_sigkill_inside_a_subgraph_resumes_inside_postgres(tmp_path: Path, pg_schema_name: str) -> None:
    require_postgres()
    from support.subgraph_child import build_graph

    from graphckpt.savers.postgres import PostgresSaver

    args = ["--backend", "postgres", "--db", PG_DSN, "--schema", pg_schema_name]
    calls, out = _crash_in_the_middle(args, tmp_path)
    assert out == "done done"
    assert calls == ["a", "i1", "i2", "i3", "b"]
    with build_graph(str(tmp_path / "unused")).compile(PostgresSaver(PG_DSN, schema=pg_schema_name)) as app:
        _check_after_crash(app)
