"""The durable event log on every saver: what each write records, in which order, and that an event exists only if
its write committed (same transaction). The memory saver mirrors the SQL triggers; all three must agree exactly."""

from __future__ import annotations

from typing import Any

import pytest

from graphckpt import END, START, StateGraph
from graphckpt.errors import NodeError, ThreadConflictError
from graphckpt.savers.base import Saver, StoredEvent
from graphckpt.testing import make_checkpoint


async def _kinds(saver: Saver, thread: str, first: int = 0) -> list[tuple[int, int, str]]:
    events = await saver.read_events([(thread, first, 2**62)], after=(-1, -1), limit=1000)
    return [(e.step, e.seq, e.kind) for e in events]


def _graph(fail: list[bool]) -> StateGraph:
    from pydantic import BaseModel

    class S(BaseModel):
        n: int = 0
        answer: str = ""

    def one(state: S, ctx: Any) -> dict[str, Any]:
        ctx.effect(lambda: 42)
        return {"n": state.n + 1}

    def two(state: S) -> dict[str, Any]:
        if fail and fail.pop():
            raise RuntimeError("once")
        return {"n": state.n + 1}

    def ask(state: S, ctx: Any) -> dict[str, Any]:
        return {"answer": str(ctx.interrupt({"q": "ok?"}))}

    g = StateGraph(S)
    g.add_node("one", one)
    g.add_node("two", two)
    g.add_node("ask", ask)
    g.add_edge(START, "one")
    g.add_edge("one", "two")
    g.add_edge("two", "ask")
    g.add_edge("ask", END)
    return g


async def test_a_run_records_its_events_in_order(saver: Saver) -> None:
    app = _graph([True]).compile(saver=saver)
    with pytest.raises(NodeError):
        await app.ainvoke({}, thread_id="t")
    await app.aresume("t")  # fails no more: stops at the interrupt
    await app.aresume("t", "yes")
    assert await _kinds(saver, "t") == [
        (0, 0, "run.started"), (0, 1, "checkpoint"),
        (1, 0, "effect.recorded"), (1, 1, "task.finished"), (1, 2, "checkpoint"),
        (2, 0, "task.failed"), (2, 1, "run.failed"),
        (2, 2, "run.started"), (2, 3, "task.finished"), (2, 4, "checkpoint"),
        (3, 0, "interrupt.raised"), (3, 1, "run.interrupted"),
        (3, 2, "run.started"), (3, 3, "task.finished"), (3, 4, "checkpoint"), (3, 5, "run.done"),
    ]  # fmt: skip
    events = await saver.read_events([("t", 0, 99)], after=(1, 1), limit=3)
    assert [(e.step, e.seq) for e in events] == [(1, 2), (2, 0), (2, 1)]
    finished = events[0] if events[0].kind == "task.finished" else (await saver.read_events(
        [("t", 0, 99)], after=(1, 0), limit=1))[0]  # fmt: skip
    assert finished.payload["node"] == "one" and finished.payload["writes"] == ["n"]
    assert finished.payload["duration_ms"] >= 0
    assert await saver.event_kind("t", 3, 5) == "run.done"
    assert await saver.event_kind("t", 3, 6) is None
    checkpoint = (await saver.read_events([("t", 0, 99)], after=(3, 3), limit=1))[0]
    assert checkpoint.kind == "checkpoint" and checkpoint.payload["source"] == "loop"
    assert checkpoint.payload["status"] == "done" and checkpoint.id == "t:3:4"


async def test_a_fork_reads_its_source_up_to_the_fork_point(saver: Saver) -> None:
    app = _graph([]).compile(saver=saver)
    await app.ainvoke({}, thread_id="src")
    fork = await app.afork("src", step=1, new_thread_id="br")
    assert fork.step == 2
    mine = await _kinds(saver, "br")
    assert mine == [(2, 0, "checkpoint")]
    lineage: list[StoredEvent] = await saver.read_events([("br", 2, 2**62), ("src", 0, 2)], after=(-1, -1), limit=99)
    assert [e.id for e in lineage][-1] == "br:2:0"
    assert {e.thread_id for e in lineage if e.step < 2} == {"src"}


async def test_events_commit_with_their_write_or_not_at_all(saver: Saver) -> None:
    first = make_checkpoint("c", 0, metadata={"source": "input", "step": 0, "writes": {}})
    await saver.commit(first, expected_head=None, run_id="r")
    before = await saver.events_version()
    stale = make_checkpoint("c", 1, parent=first, metadata={"source": "loop", "step": 1, "writes": {"x": ["a"]}})
    with pytest.raises(ThreadConflictError):
        await saver.commit(stale, expected_head="not-the-head", run_id="r")
    assert await saver.events_version() == before
    assert await _kinds(saver, "c") == [(0, 0, "run.started"), (0, 1, "checkpoint")]
    await saver.commit(stale, expected_head=first.checkpoint_id, run_id="r")
    assert await saver.events_version() != before
    assert await _kinds(saver, "c") == [(0, 0, "run.started"), (0, 1, "checkpoint"), (1, 0, "task.finished"),
                                        (1, 1, "checkpoint")]  # fmt: skip
    await saver.delete_thread("c")
    assert await _kinds(saver, "c") == []
