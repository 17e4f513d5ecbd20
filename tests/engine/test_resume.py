"""Resume: continuing a thread from its head after a failure or a crash.

*Resume* runs a thread on from its latest checkpoint. Tasks of the interrupted super-step whose results were recorded
(pending writes) are not run again; effects journaled with ``ctx.effect`` are returned from the journal, not repeated.
(Resuming after a real SIGKILL is proved by the crash tests in ``test_crash.py``.)
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Annotated, Any

import pytest
from pydantic import BaseModel
from support.waiting import await_for

from graphckpt import END, START, Context, NodeError, Saver, StateGraph, ThreadNotFoundError, append, journal


class S(BaseModel):
    log: Annotated[list[str], append] = []


class Flaky:
    """Three parallel nodes; ``b`` journals an effect and then fails while ``fail`` is set."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.effects = 0
        self.fail = True

    def graph(self) -> StateGraph:
        async def a(s: S) -> dict[str, Any]:
            self.calls["a"] += 1
            return {"log": ["a"]}

        async def b(s: S, ctx: Context) -> dict[str, Any]:
            self.calls["b"] += 1
            token = await ctx.aeffect(self.charge)
            if self.fail:
                raise TimeoutError("model timed out")
            return {"log": [f"b:{token}"]}

        def c(s: S) -> dict[str, Any]:
            self.calls["c"] += 1
            return {"log": ["c"]}

        g = StateGraph(S)
        for name, fn in (("a", a), ("b", b), ("c", c)):
            g.add_node(name, fn)
            g.add_edge(START, name)
        g.add_node("after", lambda s: {"log": ["after"]})
        g.add_edge(["a", "b", "c"], "after")
        g.add_edge("after", END)
        return g

    def charge(self) -> str:
        self.effects += 1
        return f"paid#{self.effects}"


async def test_failure_mid_super_step_reruns_only_the_failed_task(saver: Saver) -> None:
    flaky = Flaky()
    app = flaky.graph().compile(saver=saver)
    with pytest.raises(NodeError, match="node 'b' failed: TimeoutError: model timed out"):
        await app.ainvoke({}, thread_id="t")
    failed = await app.aget_state("t")
    assert failed.status == "failed" and failed.step == 0
    assert [(e.node, e.type) for e in failed.errors] == [("b", "TimeoutError")]
    assert flaky.calls == Counter(a=1, b=1, c=1) and flaky.effects == 1

    flaky.fail = False
    done = await app.aresume("t")
    assert done.status == "done"
    assert flaky.calls == Counter(a=1, b=2, c=1)  # only b ran again
    assert flaky.effects == 1  # its journaled effect did not run again
    assert done.values.log == ["a", "b:paid#1", "c", "after"]  # frontier order, with the journaled result
    assert done.errors == ()


async def test_resume_after_crash_between_task_and_commit(saver: Saver) -> None:
    """Simulate a crash after the siblings' results were recorded: a fresh app (new process) skips them."""
    flaky = Flaky()
    app = flaky.graph().compile(saver=saver)
    with pytest.raises(NodeError):
        await app.ainvoke({}, thread_id="t")
    fresh = Flaky()
    fresh.fail = False
    snap = await fresh.graph().compile(saver=saver).aresume("t")
    assert fresh.calls == Counter(b=1)
    assert fresh.effects == 0  # journaled by the first process
    assert snap.values.log == ["a", "b:paid#1", "c", "after"]


async def test_effect_journal_survives_many_retries_of_a_task(saver: Saver) -> None:
    calls: list[int] = []

    async def node(s: S, ctx: Context) -> dict[str, Any]:
        first = await ctx.aeffect(lambda: calls.append(1) or len(calls))
        second = await ctx.aeffect(asyncio.sleep, 0, "second")
        if ctx.attempt < 3:
            raise ConnectionError("again")  # transient: retried by the default policy
        return {"log": [f"{first}-{second}-{ctx.idempotency_key.rsplit(':', 1)[1]}"]}

    from graphckpt import RetryPolicy

    g = StateGraph(S)
    g.add_node("n", node, retry=RetryPolicy(max_attempts=3, initial_interval=0, jitter=False))
    g.add_edge(START, "n")
    g.add_edge("n", END)
    snap = await g.compile(saver=saver).ainvoke({}, thread_id="e")
    assert calls == [1]
    assert snap.values.log == ["1-second-2"]


async def test_idempotency_key_is_stable_across_reruns(saver: Saver) -> None:
    keys: list[str] = []
    fail = [True]

    def node(s: S, ctx: Context) -> dict[str, Any]:
        keys.append(ctx.idempotency_key)
        ctx.effect(lambda: keys.append(ctx.idempotency_key))
        keys.append(ctx.idempotency_key)
        if fail[0]:
            raise RuntimeError("stop")
        return {}

    g = StateGraph(S)
    g.add_node("n", node)
    g.add_edge(START, "n")
    g.add_edge("n", END)
    app = g.compile(saver=saver)
    with pytest.raises(NodeError):
        await app.ainvoke({}, thread_id="k")
    fail[0] = False
    await app.aresume("k")
    first_run, second_run = keys[:3], keys[3:]
    assert first_run[0] == first_run[1] == second_run[0]  # the key of effect #0, read before and inside it
    assert first_run[2] == second_run[1] != first_run[0]  # after it: the key of effect #1
    assert first_run[0].startswith("k:") and first_run[0].endswith(":0")


async def test_effects_awaited_concurrently_are_journaled_apart(saver: Saver) -> None:
    """Two ``aeffect`` calls gathered in one node (parallel tool calls) each get their own journal entry and key: the
    one that finishes first must not take the other's index, or one result is lost and its call repeated on resume."""
    calls: list[str] = []
    keys: dict[str, str] = {}
    fail = [True]

    async def node(s: S, ctx: Context) -> dict[str, Any]:
        second_done = asyncio.Event()

        async def first() -> str:
            keys["first"] = ctx.idempotency_key
            await second_done.wait()  # finishes after the second call
            calls.append("first")
            return "one"

        async def second() -> str:
            keys["second"] = ctx.idempotency_key
            calls.append("second")
            second_done.set()
            return "two"

        results = await asyncio.gather(ctx.aeffect(first), ctx.aeffect(second))
        if fail[0]:
            raise RuntimeError("after the effects")
        return {"log": list(results)}

    g = StateGraph(S)
    g.add_node("n", node)
    g.add_edge(START, "n")
    g.add_edge("n", END)
    app = g.compile(saver=saver)
    with pytest.raises(NodeError):
        await app.ainvoke({}, thread_id="g")
    fail[0] = False
    snap = await app.aresume("g")
    assert snap.values.log == ["one", "two"]
    assert sorted(calls) == ["first", "second"]  # each call made once, the re-run got both from the journal
    assert keys["first"].endswith(":0") and keys["second"].endswith(":1")


async def test_resume_unknown_thread(saver: Saver) -> None:
    app = Flaky().graph().compile(saver=saver)
    with pytest.raises(ThreadNotFoundError, match="no thread 'nope'"):
        await app.aresume("nope")


async def test_resume_done_thread_returns_head(saver: Saver) -> None:
    flaky = Flaky()
    flaky.fail = False
    app = flaky.graph().compile(saver=saver)
    done = await app.ainvoke({}, thread_id="d")
    again = await app.aresume("d")
    assert again.checkpoint_id == done.checkpoint_id and again.status == "done"
    assert flaky.calls == Counter(a=1, b=1, c=1)


async def test_finished_task_is_durable_while_a_sibling_still_runs(saver: Saver) -> None:
    """Group commit: the fast task's result is recorded without waiting for the slow sibling."""
    release = asyncio.Event()
    recorded: list[str] = []

    async def fast(s: S) -> dict[str, Any]:
        return {"log": ["fast"]}

    async def slow(s: S) -> dict[str, Any]:
        await release.wait()
        return {"log": ["slow"]}

    g = StateGraph(S)
    g.add_node("fast", fast)
    g.add_node("slow", slow)
    g.add_edge(START, "fast")
    g.add_edge(START, "slow")
    g.add_edge("fast", END)
    g.add_edge("slow", END)
    app = g.compile(saver=saver)
    run = asyncio.ensure_future(app.ainvoke({}, thread_id="gc"))
    try:

        async def recorded() -> list[str]:
            head = await saver.get_thread("gc")
            writes = [] if head is None else await saver.get_writes("gc", head.head_checkpoint_id)
            return [w.kind for w in writes]

        assert await await_for(recorded, 30, interval=0.001, what="fast's write") == [
            "result"
        ]  # fast is durable; slow has not finished
    finally:
        release.set()
        snap = await run
    assert snap.values.log == ["fast", "slow"]


async def test_results_committed_with_their_step_are_not_written_again_against_the_next(
    saver: Saver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group commit: results that the step's commit recorded (every task finished inside the linger) must leave the
    queue; they were written as pending writes of the next checkpoint, for tasks it does not plan, when a task of a
    later step was written early."""
    monkeypatch.setattr(journal, "WRITE_LINGER", 0.2)  # step 1's tasks surely finish inside it: nothing written early
    seen: list[str] = []
    head_id = ""

    async def quick(s: S) -> dict[str, Any]:
        return {"log": ["quick"]}

    async def waits_for_c(s: S) -> dict[str, Any]:
        nonlocal head_id

        async def c_written() -> list[str]:  # c's result is durable (written early, as c's sibling still runs)
            nonlocal head_id
            head = await saver.get_thread("q")
            assert head is not None
            head_id = head.head_checkpoint_id
            seen[:] = [w.task_id for w in await saver.get_writes("q", head_id)]
            return seen

        await await_for(c_written, 30, interval=0.005, what="c's early write")
        return {"log": ["d"]}

    g = StateGraph(S)
    for node in ("a", "b", "c"):
        g.add_node(node, quick)
    g.add_node("d", waits_for_c)
    g.add_edge(START, "a")
    g.add_edge(START, "b")
    g.add_edge("a", "c")
    g.add_edge("b", "d")
    g.add_edge("c", END)
    g.add_edge("d", END)
    app = g.compile(saver=saver)
    assert (await app.ainvoke({}, thread_id="q")).values.log == ["quick", "quick", "quick", "d"]
    assert seen == [f"{head_id}.0"]  # c's result only, not a's and b's (of the checkpoint before) again


async def test_storage_failure_during_a_journal_write_is_not_retried() -> None:
    from graphckpt import RetryPolicy, SaverError
    from graphckpt.savers.memory import MemorySaver

    class Broken(MemorySaver):
        async def put_writes(self, *args: Any, **kwargs: Any) -> None:
            raise SaverError("disk full")

    calls: list[int] = []

    async def node(s: S, ctx: Context) -> dict[str, Any]:
        await ctx.aeffect(lambda: calls.append(1))
        return {}

    g = StateGraph(S)
    g.add_node("n", node, retry=RetryPolicy(max_attempts=5, initial_interval=0))
    g.add_edge(START, "n")
    g.add_edge("n", END)
    with pytest.raises(SaverError, match="disk full"):
        await g.compile(saver=Broken()).ainvoke({}, thread_id="t")
    # the call's start could not be recorded, so it was never made; the storage error was not retried as a node failure
    assert calls == []
