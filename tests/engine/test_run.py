"""Running graphs: super-steps, reducers, fan-out, joins, commands, limits, validation and streaming.

Every test runs against every saver (memory, SQLite file, PostgreSQL server) through the ``saver`` fixture.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, TypedDict

import pytest
from pydantic import BaseModel, Field

from graphckpt import (
    END,
    START,
    Command,
    Context,
    InvalidUpdateError,
    NodeError,
    NodeTimeoutError,
    RecursionLimitError,
    RetryPolicy,
    Saver,
    Send,
    SerializationError,
    StateGraph,
    ThreadStateError,
    append,
    merge,
)


class Task(BaseModel):
    request: str
    notes: Annotated[list[str], append] = []
    scores: Annotated[dict[str, int], merge] = {}
    verdict: str | None = None
    count: int = 0


def linear(saver: Saver, **compile_options: Any) -> Any:
    def analyze(s: Task) -> dict[str, Any]:
        return {"notes": [f"analyzed {s.request}"]}

    async def write(s: Task) -> dict[str, Any]:
        return {"notes": ["wrote code"], "count": s.count + 1}

    def review(s: Task) -> dict[str, Any]:
        return {"verdict": "fix" if s.count < 2 else "ok", "scores": {f"r{s.count}": s.count}}

    g = StateGraph(Task)
    g.add_node("analyze", analyze)
    g.add_node("write", write)
    g.add_node("review", review)
    g.add_edge(START, "analyze")
    g.add_edge("analyze", "write")
    g.add_edge("write", "review")
    g.add_conditional_edges("review", lambda s: "write" if s.verdict == "fix" else END)
    return g.compile(saver=saver, **compile_options)


async def test_linear_run_with_cycle_commits_one_checkpoint_per_step(saver: Saver) -> None:
    app = linear(saver)
    snap = await app.ainvoke({"request": "weather"}, thread_id="t1")
    assert snap.status == "done"
    assert snap.next == ()
    assert snap.values.notes == ["analyzed weather", "wrote code", "wrote code"]
    assert snap.values.verdict == "ok"
    assert snap.values.scores == {"r1": 1, "r2": 2}
    history = await app.ahistory("t1")
    assert [h.step for h in history] == [5, 4, 3, 2, 1, 0]
    assert [h.next for h in reversed(history)] == [("analyze",), ("write",), ("review",), ("write",), ("review",), ()]
    assert history[-1].metadata["source"] == "input"
    assert {h.metadata["source"] for h in history[:-1]} == {"loop"}
    assert history[0].metadata["writes"] == {"review": ["verdict", "scores"]}
    assert set(history[0].metadata["durations_ms"]) == {"review"}
    assert history[0].parent is not None and history[0].parent.checkpoint_id == history[1].checkpoint_id


async def test_sync_facade_matches_async(saver: Saver, tmp_path: Any) -> None:
    from graphckpt.savers.memory import MemorySaver

    app = linear(MemorySaver())
    try:
        snap = app.invoke({"request": "sync"}, thread_id="s")
        assert snap.values.count == 2
        assert [h.step for h in app.history("s", limit=2)] == [5, 4]
        assert app.get_state("s").checkpoint_id == snap.checkpoint_id
    finally:
        app.close()


async def test_required_input_field_missing(saver: Saver) -> None:
    app = linear(saver)
    with pytest.raises(InvalidUpdateError, match="required state field\\(s\\) missing: request"):
        await app.ainvoke({}, thread_id="t")
    assert await saver.get_thread("t") is None


async def test_update_with_unknown_field_names_node_and_field(saver: Saver) -> None:
    g = StateGraph(Task)
    g.add_node("bad", lambda s: {"verdikt": "x"})
    g.add_edge(START, "bad")
    g.add_edge("bad", END)
    app = g.compile(saver=saver)
    with pytest.raises(InvalidUpdateError, match="bad: unknown state field 'verdikt'"):
        await app.ainvoke({"request": "r"}, thread_id="t")
    snap = await app.aget_state("t")
    assert snap.step == 0 and snap.status == "failed"  # nothing was committed past the input
    assert snap.errors[0].node == "bad" and snap.errors[0].type == "InvalidUpdateError"


async def test_update_with_wrong_type_names_node_and_field(saver: Saver) -> None:
    g = StateGraph(Task)
    g.add_node("typo", lambda s: {"count": "many"})
    g.add_edge(START, "typo")
    g.add_edge("typo", END)
    app = g.compile(saver=saver)
    with pytest.raises(InvalidUpdateError, match="typo: value for field 'count' does not fit int"):
        await app.ainvoke({"request": "r"}, thread_id="t")
    assert len(await app.ahistory("t")) == 1


async def test_update_breaking_a_field_constraint_is_refused_in_either_spelling(saver: Saver) -> None:
    """``n: int = Field(ge=0)`` constrains like ``Annotated[int, Field(ge=0)]``: a node's update or an input the
    model would refuse is an InvalidUpdateError naming node and field, and is not stored."""

    class Bounded(BaseModel):
        n: int = Field(default=0, ge=0)
        m: Annotated[int, Field(ge=0)] = 0

    g = StateGraph(Bounded)
    g.add_node("dec", lambda s: {"n": s.n - 1})
    g.add_edge(START, "dec")
    g.add_edge("dec", END)
    app = g.compile(saver=saver)
    with pytest.raises(InvalidUpdateError, match=r"input: value for field 'n' does not fit int: .*greater than or eq"):
        await app.ainvoke({"n": -1}, thread_id="in")
    assert await saver.get_thread("in") is None
    with pytest.raises(InvalidUpdateError, match=r"dec: value for field 'n' does not fit int: .*greater than or equal"):
        await app.ainvoke({}, thread_id="t")
    snap = await app.aget_state("t")
    assert snap.status == "failed" and snap.values.n == 0 and snap.step == 0
    with pytest.raises(InvalidUpdateError, match="input: value for field 'm'"):
        await app.ainvoke({"m": -1}, thread_id="in")


class Opt(BaseModel):
    notes: Annotated[list[str] | None, append] = None
    tags: Annotated[dict[str, int] | None, merge] = None


def good_and_writer(saver: Saver, calls: list[str], bad: dict[str, Any], wait: threading.Event | None = None) -> Any:
    """``good`` and ``writer`` in parallel; ``writer`` returns ``bad`` (whose reducer may refuse it); ``good`` may
    first wait for ``wait``."""

    def good(s: Opt) -> dict[str, Any]:
        calls.append("good")
        if wait is not None:
            assert wait.wait(30)
        return {"tags": {"good": 1}}

    def writer(s: Opt) -> dict[str, Any]:
        calls.append("writer")
        return bad

    g = StateGraph(Opt)
    g.add_node("good", good)
    g.add_node("writer", writer)
    for node in ("good", "writer"):
        g.add_edge(START, node)
        g.add_edge(node, END)
    return g.compile(saver=saver)


async def test_a_result_written_early_then_refused_by_its_reducer_runs_again_on_resume(
    saver: Saver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer finishes first and its sibling is slower than the write linger, so the writer's result is written
    as a pending write before the step is folded; the reducer then refuses it. On resume the writer must run again,
    not have its refused result replayed (which failed the resume the same way; seen under CPU load)."""
    from graphckpt import journal

    monkeypatch.setattr(journal, "WRITE_LINGER", 0.0)  # a finished task's result is written at once

    calls: list[str] = []
    bad: dict[str, Any] = {"notes": None}
    written_early = threading.Event()  # good waits: the writer's result is stored before good finishes
    real_put_writes = saver.put_writes

    async def put_writes(*args: Any, **kwargs: Any) -> None:
        await real_put_writes(*args, **kwargs)
        written_early.set()

    monkeypatch.setattr(saver, "put_writes", put_writes)
    app = good_and_writer(saver, calls, bad, written_early)
    with pytest.raises(InvalidUpdateError, match="writer: the reducer of field 'notes' failed"):
        await app.ainvoke({"notes": ["in"]}, thread_id="t")
    assert (await app.aget_state("t")).status == "failed"
    bad["notes"] = ["fixed"]
    done = await app.aresume("t")
    assert done.status == "done" and done.values.notes == ["in", "fixed"] and done.values.tags == {"good": 1}
    assert sorted(calls) == ["good", "writer", "writer"]


async def test_a_reducer_raising_on_an_update_fails_that_node_and_keeps_its_siblings(saver: Saver) -> None:
    """``None`` fits ``list[str] | None`` but ``append`` cannot add it: the writer fails with InvalidUpdateError
    naming it and the field, nothing is committed, the thread is ``failed`` (not left ``running`` by a bare
    TypeError), and on resume only the failed node runs again."""

    calls: list[str] = []
    bad: dict[str, Any] = {"notes": None}
    app = good_and_writer(saver, calls, bad)
    with pytest.raises(
        InvalidUpdateError, match="writer: the reducer of field 'notes' failed on its update: TypeError"
    ):
        await app.ainvoke({"notes": ["in"]}, thread_id="t")
    snap = await app.aget_state("t")
    assert snap.status == "failed" and snap.step == 0 and snap.values.notes == ["in"]
    assert [(e.node, e.type) for e in snap.errors] == [("writer", "ReducerError")]
    with pytest.raises(InvalidUpdateError, match="input: the reducer of field 'tags'"):
        await app.ainvoke({"tags": None}, thread_id="other")  # the input goes through the reducers too
    assert await saver.get_thread("other") is None
    bad["notes"] = ["fixed"]
    done = await app.aresume("t")
    assert done.status == "done" and done.values.notes == ["in", "fixed"] and done.values.tags == {"good": 1}
    assert calls == ["good", "writer", "writer"]


async def test_unstorable_value_is_refused_naming_the_field(saver: Saver) -> None:
    class Loose(BaseModel):
        thing: Any = None

    g = StateGraph(Loose)
    g.add_node("n", lambda s: {"thing": threading.Lock()})
    g.add_edge(START, "n")
    g.add_edge("n", END)
    app = g.compile(saver=saver)
    with pytest.raises(SerializationError, match=r"state field 'thing'.*_thread\.lock"):
        await app.ainvoke({}, thread_id="t")
    snap = await app.aget_state("t")
    assert snap.step == 0  # the previous checkpoint stays the head


async def test_send_fan_out_of_fifty_tasks(saver: Saver) -> None:
    class Fan(BaseModel):
        items: list[int] = []
        results: Annotated[list[int], append] = []

    async def square(payload: dict[str, int]) -> dict[str, Any]:
        return {"results": [payload["n"] * payload["n"]]}

    g = StateGraph(Fan)
    g.add_node("plan", lambda s: None)
    g.add_node("square", square)
    g.add_node("total", lambda s: None)
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", lambda s: [Send("square", {"n": n}) for n in s.items])
    g.add_edge("square", "total")
    g.add_edge("total", END)
    app = g.compile(saver=saver)
    snap = await app.ainvoke({"items": list(range(50))}, thread_id="fan")
    assert snap.values.results == [n * n for n in range(50)]  # task order, not finish order
    history = await app.ahistory("fan")
    fan_step = next(h for h in history if h.next and h.next[0] == "square")
    assert len(fan_step.tasks) == 50 and all(t.has_payload for t in fan_step.tasks)
    assert [h.next for h in history[:2]] == [(), ("total",)]  # total runs once, deduplicated


async def test_join_waits_for_all_sources_across_steps(saver: Saver) -> None:
    g = StateGraph(Task)
    g.add_node("fast", lambda s: {"notes": ["fast"]})
    g.add_node("slow1", lambda s: {"notes": ["slow1"]})
    g.add_node("slow2", lambda s: {"notes": ["slow2"]})
    g.add_node("joined", lambda s: {"notes": ["joined"]})
    g.add_edge(START, "fast")
    g.add_edge(START, "slow1")
    g.add_edge("slow1", "slow2")
    g.add_edge(["fast", "slow2"], "joined")
    g.add_edge("joined", END)
    app = g.compile(saver=saver)
    snap = await app.ainvoke({"request": "j"}, thread_id="j")
    assert snap.values.notes == ["fast", "slow1", "slow2", "joined"]
    steps = [h.next for h in reversed(await app.ahistory("j"))]
    assert steps == [("fast", "slow1"), ("slow2",), ("joined",), ()]


async def test_command_goto_and_update(saver: Saver) -> None:
    def decide(s: Task) -> Command:
        return Command(update={"verdict": "jump"}, goto="target")

    g = StateGraph(Task)
    g.add_node("decide", decide, destinations=["target"])
    g.add_node("target", lambda s: {"notes": [f"after {s.verdict}"]})
    g.add_edge(START, "decide")
    g.add_edge("target", END)
    app = g.compile(saver=saver)
    snap = await app.ainvoke({"request": "c"}, thread_id="c")
    assert snap.values.notes == ["after jump"]


async def test_recursion_limit_names_thread_and_step_and_keeps_checkpoint(saver: Saver) -> None:
    g = StateGraph(Task)
    g.add_node("spin", lambda s: {"count": s.count + 1})
    g.add_edge(START, "spin")
    g.add_conditional_edges("spin", lambda s: "spin" if s.count < 1000 else END)
    app = g.compile(saver=saver, recursion_limit=5)
    with pytest.raises(RecursionLimitError, match="thread 'loop' reached recursion_limit=5 at step 5"):
        await app.ainvoke({"request": "r"}, thread_id="loop")
    snap = await app.aget_state("loop")
    assert snap.step == 5 and snap.values.count == 5 and snap.status == "running"
    snap = await app.aresume("loop", recursion_limit=2000)
    assert snap.status == "done" and snap.values.count == 1000


async def test_invoke_on_done_thread_is_a_new_turn(saver: Saver) -> None:
    app = linear(saver)
    first = await app.ainvoke({"request": "one"}, thread_id="multi")
    second = await app.ainvoke({"request": "two", "count": 0}, thread_id="multi")
    assert second.step == first.step + 6
    assert second.values.notes[:3] == first.values.notes
    assert second.values.notes[3] == "analyzed two"
    turn = [h for h in await app.ahistory("multi") if h.metadata["source"] == "input"]
    assert [h.step for h in turn] == [first.step + 1, 0]


async def test_invoke_on_failed_thread_says_resume(saver: Saver) -> None:
    g = StateGraph(Task)

    def boom(s: Task) -> None:
        raise RuntimeError("kaput")

    g.add_node("boom", boom)
    g.add_edge(START, "boom")
    g.add_edge("boom", END)
    app = g.compile(saver=saver)
    with pytest.raises(NodeError, match="node 'boom' failed: RuntimeError: kaput") as info:
        await app.ainvoke({"request": "r"}, thread_id="f")
    assert isinstance(info.value.__cause__, RuntimeError)
    with pytest.raises(ThreadStateError, match=r"thread 'f' is failed; call resume\('f'\)"):
        await app.ainvoke({"request": "again"}, thread_id="f")
    threads = await app.athreads(status="failed")
    assert [t.thread_id for t in threads] == ["f"]
    assert threads[0].error is not None and "kaput" in threads[0].error


async def test_retry_policy_retries_then_succeeds(saver: Saver) -> None:
    calls: list[int] = []

    def flaky(s: Task, ctx: Context) -> dict[str, Any]:
        calls.append(ctx.attempt)
        if ctx.attempt < 3:
            raise ConnectionError("flap")
        return {"verdict": f"ok after {ctx.attempt}"}

    g = StateGraph(Task)
    g.add_node("flaky", flaky, retry=RetryPolicy(max_attempts=3, initial_interval=0.0, jitter=False))
    g.add_edge(START, "flaky")
    g.add_edge("flaky", END)
    app = g.compile(saver=saver)
    snap = await app.ainvoke({"request": "r"}, thread_id="r")
    assert calls == [1, 2, 3]
    assert snap.values.verdict == "ok after 3"


async def test_retry_policy_only_retries_listed_errors(saver: Saver) -> None:
    calls: list[int] = []

    def picky(s: Task) -> None:
        calls.append(1)
        raise KeyError("not retried")

    g = StateGraph(Task)
    g.add_node("picky", picky, retry=RetryPolicy(max_attempts=5, initial_interval=0.0, retry_on=ConnectionError))
    g.add_edge(START, "picky")
    g.add_edge("picky", END)
    with pytest.raises(NodeError):
        await g.compile(saver=saver).ainvoke({"request": "r"}, thread_id="p")
    assert len(calls) == 1


async def test_node_timeout(saver: Saver) -> None:
    release = asyncio.Event()

    async def stuck(s: Task) -> None:
        await release.wait()

    g = StateGraph(Task)
    g.add_node("stuck", stuck, timeout=0.05)
    g.add_edge(START, "stuck")
    g.add_edge("stuck", END)
    with pytest.raises(NodeError, match=r"ran longer than its timeout of 0\.05 s") as info:
        await g.compile(saver=saver).ainvoke({"request": "r"}, thread_id="slow")
    assert isinstance(info.value.__cause__, NodeTimeoutError)


async def test_typeddict_state(saver: Saver) -> None:
    class T(TypedDict, total=False):
        items: Annotated[list[int], append]
        last: int

    g = StateGraph(T)
    g.add_node("a", lambda s: {"items": [len(s.get("items", []))], "last": 1})
    g.add_edge(START, "a")
    g.add_conditional_edges("a", lambda s: "a" if len(s["items"]) < 3 else END)
    snap = await g.compile(saver=saver).ainvoke({"items": [9]}, thread_id="td")
    assert snap.values == {"items": [9, 1, 2], "last": 1}


async def test_usage_reported_by_nodes_lands_in_metadata(saver: Saver) -> None:
    def model(s: Task, ctx: Context) -> dict[str, Any]:
        ctx.report_usage(model="m-1", prompt_tokens=10, completion_tokens=5)
        ctx.report_usage(model="m-1", prompt_tokens=1, completion_tokens=2)
        return {"verdict": "ok"}

    g = StateGraph(Task)
    g.add_node("model", model)
    g.add_edge(START, "model")
    g.add_edge("model", END)
    snap = await g.compile(saver=saver).ainvoke({"request": "r"}, thread_id="u")
    assert snap.metadata["usage"] == {
        "model": {"model": "m-1", "prompt_tokens": 11, "completion_tokens": 7, "calls": 2}
    }


@pytest.mark.parametrize("mode", ["updates", "values", "checkpoints"])
async def test_stream_modes(saver: Saver, mode: str) -> None:
    app = linear(saver)
    items = [item async for item in app.astream({"request": "s"}, thread_id=f"st-{mode}", mode=mode)]  # type: ignore[arg-type]
    if mode == "updates":
        assert items[0] == {"analyze": {"notes": ["analyzed s"]}}
        assert items[-1] == {"review": {"verdict": "ok", "scores": {"r2": 2}}}
        assert len(items) == 5
    elif mode == "values":
        assert [v.count for v in items] == [0, 0, 1, 1, 2, 2]
    else:
        assert [s.step for s in items] == [0, 1, 2, 3, 4, 5]
        assert items[-1].status == "done"


async def test_stream_rejects_unknown_mode(saver: Saver) -> None:
    app = linear(saver)
    with pytest.raises(ValueError, match="stream mode must be"):
        async for _ in app.astream({"request": "s"}, mode="everything"):  # type: ignore[arg-type]
            pass


async def test_a_sync_node_s_duration_is_its_own_run_not_its_wait_for_a_worker_thread() -> None:
    """With two worker threads and two slow nodes ahead of them, the quick nodes wait ~0.3 s for a thread; the audit
    record shows how long each node ran, not how long it waited."""
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=2))

    class Fan(TypedDict, total=False):
        slow1: int
        slow2: int
        quick1: int
        quick2: int

    def slow(name: str) -> Any:
        def node(s: Fan) -> dict[str, Any]:
            time.sleep(0.3)
            return {name: 1}

        return node

    def quick(name: str) -> Any:
        return lambda s: {name: 1}

    g = StateGraph(Fan)
    for name in ("slow1", "slow2"):
        g.add_node(name, slow(name))
        g.add_edge(START, name)
        g.add_edge(name, END)
    for name in ("quick1", "quick2"):
        g.add_node(name, quick(name))
        g.add_edge(START, name)
        g.add_edge(name, END)
    app = g.compile()
    snap = await app.ainvoke({}, thread_id="t")
    durations = snap.metadata["durations_ms"]
    assert durations["slow1"] >= 290 and durations["slow2"] >= 290, durations
    assert durations["quick1"] < 100 and durations["quick2"] < 100, durations
