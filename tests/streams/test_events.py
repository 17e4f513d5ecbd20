"""The durable event log on every saver: what each write records, in which order, and that an event exists only if
its write committed (same transaction). The memory saver mirrors the SQL triggers; all three must agree exactly."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from pydantic import BaseModel

from graphckpt import END, START, Send, StateGraph
from graphckpt.errors import NodeError, ThreadConflictError
from graphckpt.savers.base import BlobRange, Saver, StoredEvent
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
        (0, 0, "run.started"),
        (0, 1, "checkpoint"),
        (1, 0, "effect.recorded"),
        (1, 1, "task.finished"),
        (1, 2, "checkpoint"),
        (2, 0, "task.failed"),
        (2, 1, "run.failed"),
        (2, 2, "run.started"),
        (2, 3, "task.finished"),
        (2, 4, "checkpoint"),
        (3, 0, "interrupt.raised"),
        (3, 1, "run.interrupted"),
        (3, 2, "run.started"),
        (3, 3, "task.finished"),
        (3, 4, "checkpoint"),
        (3, 5, "run.done"),
    ]
    events = await saver.read_events([("t", 0, 99)], after=(1, 1), limit=3)
    assert [(e.step, e.seq) for e in events] == [(1, 2), (2, 0), (2, 1)]
    finished = (
        events[0]
        if events[0].kind == "task.finished"
        else (await saver.read_events([("t", 0, 99)], after=(1, 0), limit=1))[0]
    )
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
    assert await _kinds(saver, "c") == [
        (0, 0, "run.started"),
        (0, 1, "checkpoint"),
        (1, 0, "task.finished"),
        (1, 1, "checkpoint"),
    ]
    await saver.delete_thread("c")
    assert await _kinds(saver, "c") == []


class Fan(TypedDict):
    items: Annotated[list[int], operator.add]


class Point(BaseModel):
    x: int


class Odd(BaseModel):
    point: Point | None = None
    ratio: float = 0.0
    text: str = ""
    blob: str = ""


async def test_each_task_of_a_step_has_its_own_finished_event_with_its_update(saver: Saver) -> None:
    """16 Sends to one node in one step: 16 ``task.finished`` events (ids strictly increasing), each with its task's
    id and its own update, then the step's one ``checkpoint``."""

    def work(state: Fan) -> dict[str, Any]:
        return {"items": [state["items"][0] * 10]}

    g = StateGraph(Fan)
    g.add_node("work", work)
    g.add_conditional_edges(START, lambda s: [Send("work", {"items": [i]}) for i in range(16)])
    app = g.compile(saver=saver)
    await app.ainvoke({"items": []}, thread_id="fan")
    events = await saver.read_events([("fan", 1, 2)], after=(-1, -1), limit=100)
    finished = [e for e in events if e.kind == "task.finished"]
    assert len(finished) == 16
    assert [e.seq for e in events] == list(range(len(events)))
    assert [e.kind for e in events][16:] == ["checkpoint", "run.done"]
    assert sorted(e.payload["update"]["items"][0] for e in finished) == [i * 10 for i in range(16)]
    assert len({e.payload["task_id"] for e in finished}) == 16
    snap = await app.aget_state("fan")
    assert {t.id for t in (await app.ahistory("fan"))[1].tasks} == {e.payload["task_id"] for e in finished}
    assert sorted(snap.values["items"]) == [i * 10 for i in range(16)]
    assert all(e.payload["node"] == "work" and e.payload["writes"] == ["items"] for e in finished)


async def test_a_task_update_is_rendered_as_json_and_a_huge_one_is_left_out(saver: Saver) -> None:
    """Models, NaN and NUL render as JSON every store accepts, whether the event holds the update (two tasks in the
    step) or points to the checkpoint (one); an update past 64 KiB that the checkpoint does not hold as it is (two
    tasks wrote the step) is left out, saying how big it was (the checkpoint has the folded value)."""

    def odd(state: Odd) -> dict[str, Any]:
        return {"point": Point(x=3), "ratio": float("nan"), "text": "caf\u00e9 \u0000"}

    def big(state: Odd) -> dict[str, Any]:
        return {"blob": "x" * 100_000}

    g = StateGraph(Odd)
    g.add_node("odd", odd)
    g.add_node("big", big)
    g.add_node("both_odd", odd)
    g.add_node("both_big", big)
    g.add_edge(START, "odd")
    g.add_edge("odd", "big")
    g.add_edge("big", "both_odd")
    g.add_edge("big", "both_big")
    g.add_edge("both_odd", END)
    g.add_edge("both_big", END)
    app = g.compile(saver=saver)
    await app.ainvoke({}, thread_id="odd")
    events = await saver.read_events([("odd", 0, 9)], after=(-1, -1), limit=100)
    alone_odd, alone_big, *two = [e.payload for e in events if e.kind == "task.finished"]
    assert alone_odd["update"] is None and alone_big["update"] is None  # the checkpoint holds them
    point = await app.store.task_update("odd", alone_odd["update_in"], alone_odd["writes"])
    assert point is not None and point["point"] == Point(x=3) and point["text"] == "caf\u00e9 \u0000"
    together = {p["node"]: p for p in two}
    assert together["both_odd"]["update"] == {"point": {"x": 3}, "ratio": None, "text": "caf\u00e9 \u0000"}
    huge = together["both_big"]
    assert huge["update"] is None and huge["update_omitted"] > 100_000 and huge["writes"] == ["blob"]
    assert "update_in" not in huge
    assert (await app.aget_state("odd")).values.blob == "x" * 100_000


def test_a_payload_with_a_lone_surrogate_still_encodes() -> None:
    """Event payloads are JSON UTF-8 text: a lone surrogate (in a tag, say) becomes ``?`` rather than failing the
    commit."""
    import json

    from graphckpt.savers.events import encode_payload

    assert json.loads(encode_payload({"a": "x\ud800y", "n": float("inf")})) == {"a": "x?y", "n": None}


async def test_a_saver_made_with_events_off_writes_no_step_events(saver: Saver) -> None:
    """``events=False``: commits add no ``task.finished``/``checkpoint``/``run.done``; a stop still records its own
    (a trigger, or the memory saver's mirror of it). Same store, same thread: switching it back on writes again."""
    saver.events = False  # type: ignore[attr-defined]
    app = _graph([True]).compile(saver=saver)
    with pytest.raises(NodeError):
        await app.ainvoke({}, thread_id="quiet")
    kinds = [k for _, _, k in await _kinds(saver, "quiet")]
    assert "checkpoint" not in kinds and "task.finished" not in kinds
    assert kinds[-1] == "run.failed"
    saver.events = True  # type: ignore[attr-defined]
    await app.aresume("quiet")
    kinds = [k for _, _, k in await _kinds(saver, "quiet")]
    assert kinds[-5:] == ["run.started", "task.finished", "checkpoint", "interrupt.raised", "run.interrupted"]


class Chat(BaseModel):
    n: int = 0
    log: Annotated[list[str], operator.add] = []
    big: str = ""
    note: Point | None = None


async def _updates_from_events(app: Any, saver: Saver, thread: str) -> list[tuple[int, dict[str, Any]]]:
    """``(step, {node: update})`` of every task.finished, with the updates an event points to read back."""
    from pydantic_core import to_jsonable_python

    out = []
    for e in await saver.read_events([(thread, 0, 2**62)], after=(-1, -1), limit=10_000):
        if e.kind != "task.finished":
            continue
        update = e.payload["update"]
        if e.payload.get("update_in"):
            assert update is None
            update = await app.store.task_update(thread, e.payload["update_in"], e.payload["writes"])
            update = to_jsonable_python(update, fallback=repr)
        out.append((e.step, {e.payload["node"]: update}))
    return out


@pytest.mark.parametrize("snapshot_every", [7, 1000])
async def test_an_update_the_checkpoint_holds_is_not_copied_and_reads_back_exactly(
    saver: Saver, snapshot_every: int
) -> None:
    """A step's only task: its update is read back from the checkpoint (inline fields, big plain fields, reducer
    deltas, deltas packed into chunks, snapshots every few steps) and equals what ``stream(mode="updates")`` gave;
    the events store no copy of it."""
    from pydantic_core import to_jsonable_python

    def step(state: Chat) -> dict[str, Any]:
        n = state.n + 1
        update: dict[str, Any] = {"n": n, "log": [f"line {n}", "x" * (n % 7)]}
        if n % 5 == 0:
            update["big"] = "b" * 5000 + str(n)
        if n % 3 == 0:
            update["note"] = Point(x=n)
        return update

    g = StateGraph(Chat)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s.n < 80 else END)
    app = g.compile(saver=saver, snapshot_every=snapshot_every)
    streamed = [to_jsonable_python(u, fallback=repr) async for u in app.astream({}, thread_id="c", mode="updates")]
    events = await _updates_from_events(app, saver, "c")
    assert [u for _, u in events] == streamed and len(streamed) == 80
    stored = await saver.read_events([("c", 0, 2**62)], after=(-1, -1), limit=10_000)
    pointed = [e for e in stored if e.kind == "task.finished" and e.payload.get("update_in")]
    snapshotted = 80 // snapshot_every + 1  # the steps whose reducer field was stored whole
    assert len(pointed) == 80 - snapshotted
    assert all(e.payload["update"] is None for e in pointed)
    if snapshot_every > 80:  # deltas were packed into chunks (every 32): they are read from those
        blobs = await saver.get_blobs([BlobRange("c", "log", 0, 100)])
        assert any(b.kind == "chunk" for b in blobs)
