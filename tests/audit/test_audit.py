"""The audit record (graphckpt.audit), in process, against every saver.

Terms: a *call* is one ``ctx.aeffect``/``ctx.effect``; it is recorded ``started`` before it is made and ``finished``
(or ``failed``) after; a start without an end is ``lost``. A *failed attempt* is one run of a task that raised. The
record of a step lives in pending writes until the step commits, then in the new checkpoint's ``metadata["audit"]``.
The crash cases (a real process SIGKILLed inside a tool call and a model call) are in ``test_audit_crash.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from graphckpt import END, START, Context, NodeError, RetryPolicy, StateGraph, append, current_context
from graphckpt.audit import Prices, spend
from graphckpt.savers.base import StoredWrite
from nodes import approval_node, tool, tool_node


class S(BaseModel):
    log: Annotated[list[str], append] = []
    tool_calls: list[dict[str, Any]] = []
    tool_results: list[dict[str, Any]] = []
    approved: bool | None = None


async def test_calls_are_recorded_with_key_digest_and_duration(saver: Any) -> None:
    async def node(s: S, ctx: Context) -> dict[str, Any]:
        a = await ctx.aeffect(lambda x: f"a{x}", 1)
        b = await ctx.aeffect(lambda: "b")
        return {"log": [a, b]}

    g = StateGraph(S)
    g.add_node("n", node)
    g.add_edge(START, "n")
    g.add_edge("n", END)
    app = g.compile(saver=saver)
    await app.ainvoke({}, thread_id="t")
    head = await app.aget_state("t")
    calls = head.metadata["audit"]["calls"]
    task = head.parent and (await app.aget_state("t", head.parent.checkpoint_id)).tasks[0].id
    assert [(c["node"], c["effect"], c["status"], c["key"]) for c in calls] == [
        ("n", 0, "finished", f"t:{task}:0"),
        ("n", 1, "finished", f"t:{task}:1"),
    ]
    assert calls[0]["args"].startswith("sha256:") and calls[0]["args"] != calls[1]["args"]
    assert all(c["ms"] >= 0 and c["started_at"] > 0 and c["attempt"] == 1 for c in calls)
    record = await app.aaudit("t")
    assert [(c["step"], c["status"]) for c in record["calls"]] == [(1, "finished"), (1, "finished")]


async def test_a_started_call_without_end_is_lost_once_then_finished(saver: Any) -> None:
    """A start row with no end (what a process killed inside the call leaves) shows as lost, in exactly one
    checkpoint; the re-run's own call is recorded after it as finished, with the same key."""
    runs: list[int] = []

    async def node(s: S, ctx: Context) -> dict[str, Any]:
        return {"log": [await ctx.aeffect(lambda: runs.append(1) or "v")]}

    g = StateGraph(S)
    g.add_node("n", node, retry=None)
    g.add_node("m", lambda s: {"log": ["m"]})
    g.add_edge(START, "n")
    g.add_edge("n", "m")
    g.add_edge("m", END)
    app = g.compile(saver=saver, interrupt_before=["n"])
    first = await app.ainvoke({}, thread_id="t")
    task = first.tasks[0]
    key = f"t:{task.id}:0"
    dead = {
        "effect": 0,
        "name": "node.<locals>.<lambda>",
        "args": "sha256:x",
        "key": key,
        "attempt": 1,
        "started_at": 1.0,
    }
    record = await app.saver.get_thread("t")
    await app.saver.put_writes(
        "t",
        first.checkpoint_id,
        [StoredWrite(task.id, "started", 0, app.codec.serde.dumps(dead))],
        run_id=record.run_id,
    )
    before = await app.aaudit("t")
    assert [(c["status"], c["key"], c.get("pending")) for c in before["calls"]] == [("lost", key, True)]
    await app.aresume("t")
    after = await app.aaudit("t")
    assert [(c["step"], c["status"], c["key"]) for c in after["calls"]] == [(1, "lost", key), (1, "finished", key)]
    assert after["spend"]["total"]["lost_calls"] == 1
    assert runs == [1]


async def test_failed_attempts_survive_a_successful_resume(saver: Any, tmp_path: Path) -> None:
    flag = tmp_path / "fail"
    flag.write_text("2")

    def flaky(s: S) -> dict[str, Any]:
        left = int(flag.read_text())
        if left:
            flag.write_text(str(left - 1))
            raise TimeoutError(f"simulated timeout ({left} left)")
        return {"log": ["ok"]}

    g = StateGraph(S)
    g.add_node("a", lambda s: {"log": ["a"]})
    g.add_node("flaky", flaky, retry=RetryPolicy(max_attempts=2, initial_interval=0, retry_on=TimeoutError))
    g.add_edge(START, "a")
    g.add_edge("a", "flaky")
    g.add_edge("flaky", END)
    app = g.compile(saver=saver)
    flag.write_text("3")
    with pytest.raises(NodeError):
        await app.ainvoke({}, thread_id="t")
    failed = await app.aget_state("t")
    assert failed.errors[0].traceback is not None and "TimeoutError: simulated timeout (2 left)" in (
        failed.errors[0].traceback
    )
    pending = await app.aaudit("t")
    assert [(a["attempt"], a["retried"], a.get("pending")) for a in pending["attempts"]] == [
        (1, True, True),
        (2, False, True),
    ]
    done = await app.aresume("t")  # attempt 1 of the resume fails (1 left), attempt 2 succeeds
    assert done.status == "done"
    record = await app.aaudit("t")
    assert [(a["node"], a["step"], a["attempt"], a["type"], a["message"]) for a in record["attempts"]] == [
        ("flaky", 2, 1, "TimeoutError", "simulated timeout (3 left)"),
        ("flaky", 2, 2, "TimeoutError", "simulated timeout (2 left)"),
        ("flaky", 2, 1, "TimeoutError", "simulated timeout (1 left)"),
    ]
    assert all("Traceback" in a["traceback"] and a["at"] > 0 for a in record["attempts"])
    assert done.metadata["audit"]["attempts"] == [
        {k: v for k, v in a.items() if k not in ("step", "thread_id")} | {"step": 2} for a in record["attempts"]
    ]


async def test_replayed_calls_keep_their_original_duration(saver: Any, tmp_path: Path) -> None:
    flag = tmp_path / "fail"
    flag.write_text("1")

    async def node(s: S, ctx: Context) -> dict[str, Any]:
        import asyncio

        async def slow() -> str:
            await asyncio.sleep(0.05)
            return "v"

        value = await ctx.aeffect(slow)
        if flag.read_text() == "1":
            flag.write_text("0")
            raise RuntimeError("after the call")
        return {"log": [value]}

    g = StateGraph(S)
    g.add_node("n", node)
    g.add_edge(START, "n")
    g.add_edge("n", END)
    app = g.compile(saver=saver)
    with pytest.raises(NodeError):
        await app.ainvoke({}, thread_id="t")
    done = await app.aresume("t")
    assert done.metadata["replayed_ms"]["n"] >= 50
    assert done.metadata["durations_ms"]["n"] >= done.metadata["replayed_ms"]["n"]
    (call,) = done.metadata["audit"]["calls"]
    assert call["status"] == "finished" and call["replays"] == 1 and call["ms"] >= 50


async def test_tools_see_their_idempotency_key(saver: Any) -> None:
    seen: list[str] = []

    @tool
    def lookup(city: str) -> str:
        """A sync tool, run in a worker thread."""
        seen.append(current_context().idempotency_key)
        return city.upper()

    @tool
    async def alookup(city: str) -> str:
        """An async tool."""
        seen.append(current_context().idempotency_key)
        return city.lower()

    g = StateGraph(S)
    g.add_node("tools", tool_node([lookup, alookup]))
    g.add_edge(START, "tools")
    g.add_edge("tools", END)
    app = g.compile(saver=saver)
    calls = [
        {"id": f"c{i}", "function": {"name": n, "arguments": json.dumps({"city": "Oslo"})}}
        for i, n in enumerate(["lookup", "alookup"])
    ]
    done = await app.ainvoke({"tool_calls": calls}, thread_id="t")
    recorded = done.metadata["audit"]["calls"]
    assert seen == [c["key"] for c in recorded]
    assert [c["name"] for c in recorded] == ["execute_tool lookup", "execute_tool alookup"]
    assert len(set(seen)) == 2 and all(k.startswith("t:") for k in seen)


async def test_interrupt_answers_with_refused_ones_first(saver: Any) -> None:
    g = StateGraph(S)
    g.add_node("approve", approval_node("Ship it?"))
    g.add_edge(START, "approve")
    g.add_edge("approve", END)
    app = g.compile(saver=saver)
    await app.ainvoke({}, thread_id="t")
    await app.aresume("t", "yes please", tags={"user": "alice"})
    done = await app.aresume("t", {"approved": True, "comment": "ok"}, tags={"user": "bob"})
    assert done.values.approved is True
    answers = done.metadata["audit"]["answers"]
    assert [(a["index"], a["by"], a["answer"], "refused" in a) for a in answers] == [
        (0, "alice", "yes please", True),
        (1, "bob", {"approved": True, "comment": "ok"}, False),
    ]
    assert "must be true, false" in answers[0]["refused"]
    assert answers[0]["question"]["question"] == "Ship it?" and answers[1]["at"] >= answers[0]["at"]


def test_prices_turn_tokens_into_cost(tmp_path: Path) -> None:
    table = tmp_path / "prices.json"
    table.write_text(json.dumps({"m1": {"input": 1.0, "output": 2.0}}))
    prices = Prices.load(table)
    meta = {"usage": {"n": {"model": "m1", "prompt_tokens": 1000, "completion_tokens": 500, "calls": 1}}}
    lost = {"audit": {"calls": [{"status": "lost", "model": "m1"}]}}
    got = spend([("base", meta), ("fork", meta), ("fork", lost)], "fork", prices)
    assert got["own"]["tokens"] == 1500 and got["own"]["lost_calls"] == 1
    assert got["inherited"]["tokens"] == 1500 and got["inherited"]["lost_calls"] == 0
    assert got["total"]["tokens"] == 3000
    assert got["own"]["cost"] == pytest.approx(0.002) and got["total"]["cost"] == pytest.approx(0.004)
    assert "cost" not in spend([("t", {"usage": {"n": {**meta["usage"]["n"], "model": "m2"}}})], "t", prices)["own"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"m1": {"input": "cheap"}}))
    with pytest.raises(Exception, match="model 'm1' field 'input' must be a price"):
        Prices.load(bad)


async def test_a_failed_thread_exports_and_imports_with_its_audit_record(tmp_path: Path) -> None:
    from graphckpt.savers.memory import MemorySaver
    from graphckpt.transfer import export_thread, import_thread

    async def node(s: S, ctx: Context) -> dict[str, Any]:
        await ctx.aeffect(lambda: "v")
        raise RuntimeError("boom")

    g = StateGraph(S)
    g.add_node("n", node)
    g.add_edge(START, "n")
    g.add_edge("n", END)
    app = g.compile(saver=MemorySaver())
    with pytest.raises(NodeError):
        await app.ainvoke({}, thread_id="t")
    lines = [line async for line in export_thread(app.saver, "t")]
    other = g.compile(saver=MemorySaver())
    await import_thread(other.saver, lines)
    record = await other.aaudit("t")
    assert [(a["type"], a["message"]) for a in record["attempts"]] == [("RuntimeError", "boom")]
    assert [c["status"] for c in record["calls"]] == ["finished"]


async def test_an_edit_of_a_failed_thread_keeps_its_failed_attempts(saver: Any) -> None:
    def boom(s: S) -> dict[str, Any]:
        raise ValueError("bad input")

    g = StateGraph(S)
    g.add_node("n", boom)
    g.add_edge(START, "n")
    g.add_edge("n", END)
    app = g.compile(saver=saver)
    with pytest.raises(NodeError):
        await app.ainvoke({}, thread_id="t")
    edited = await app.aupdate_state("t", {"log": ["fixed by hand"]})
    assert [a["message"] for a in edited.metadata["audit"]["attempts"]] == ["bad input"]
    assert [a["message"] for a in (await app.aaudit("t"))["attempts"]] == ["bad input"]
