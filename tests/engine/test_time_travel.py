"""Time travel and forks.

*Time travel* reads any past checkpoint of a thread: its state, its frontier and its metadata, read-only.
*Fork* starts a new thread whose first checkpoint has a past checkpoint as parent, optionally with an update applied
through the reducers; running it never changes the source thread, whose rows stay byte-for-byte the same.
*Diff* compares the values of two checkpoints, in one thread or across branches.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, ConfigDict

from graphckpt import (
    END,
    START,
    CheckpointNotFoundError,
    Saver,
    StateGraph,
    ThreadConflictError,
    ThreadHasForksError,
    append,
)
from graphckpt.savers.base import BlobRange


class S(BaseModel):
    instruction: str = "plain"
    steps: Annotated[list[str], append] = []
    result: str | None = None


def app_for(saver: Saver) -> Any:
    g = StateGraph(S)
    g.add_node("plan", lambda s: {"steps": [f"plan({s.instruction})"]})
    g.add_node("build", lambda s: {"steps": [f"build({s.instruction})"]})
    g.add_node("finish", lambda s: {"result": f"done with {len(s.steps)} steps ({s.instruction})"})
    g.add_edge(START, "plan")
    g.add_edge("plan", "build")
    g.add_edge("build", "finish")
    g.add_edge("finish", END)
    return g.compile(saver=saver)


async def rows(saver: Saver, thread_id: str) -> Any:
    """Everything stored for a thread, as comparable bytes-and-values."""
    record = await saver.get_thread(thread_id)
    cps = await saver.list_checkpoints(thread_id)
    blobs = await saver.get_blobs([BlobRange(thread_id, ch, 0, 10**9) for ch in ("instruction", "steps", "result")])
    writes = [await saver.get_writes(thread_id, cp.checkpoint_id) for cp in cps]
    return record, cps, blobs, writes


async def test_read_any_past_checkpoint(saver: Saver) -> None:
    app = app_for(saver)
    await app.ainvoke({"instruction": "v1"}, thread_id="t")
    history = await app.ahistory("t")
    assert [h.step for h in history] == [3, 2, 1, 0]
    past = await app.aget_state("t", history[2].checkpoint_id)
    assert past.step == 1 and past.values.steps == ["plan(v1)"] and past.next == ("build",)
    assert past.values == history[2].values
    assert (await app.ahistory("t", limit=2))[1].step == 2
    assert [h.step for h in await app.ahistory("t", before=history[1].checkpoint_id)] == [1, 0]
    assert [h.step for h in await app.ahistory("t", filter={"source": "input"})] == [0]
    with pytest.raises(CheckpointNotFoundError, match="thread 't' has no checkpoint 'zzz'"):
        await app.aget_state("t", "zzz")


async def test_fork_leaves_source_byte_for_byte_unchanged(saver: Saver) -> None:
    app = app_for(saver)
    await app.ainvoke({"instruction": "v1"}, thread_id="src")
    before = await rows(saver, "src")
    after_plan = (await app.ahistory("src"))[2]
    fork = await app.afork("src", after_plan.checkpoint_id, update={"instruction": "v2"}, new_thread_id="alt")
    assert fork.thread_id == "alt" and fork.status == "running"
    assert fork.parent is not None and fork.parent.thread_id == "src"
    assert fork.parent.checkpoint_id == after_plan.checkpoint_id
    assert fork.next == ("build",) and fork.metadata["source"] == "fork"
    done = await app.aresume("alt")
    assert done.values.steps == ["plan(v1)", "build(v2)"]
    assert done.values.result == "done with 2 steps (v2)"
    assert await rows(saver, "src") == before
    src = await app.aget_state("src")
    assert src.values.result == "done with 2 steps (v1)"


async def test_fork_history_walks_into_ancestors(saver: Saver) -> None:
    app = app_for(saver)
    await app.ainvoke({"instruction": "v1"}, thread_id="src")
    after_plan = (await app.ahistory("src"))[2]
    await app.afork("src", after_plan.checkpoint_id, new_thread_id="alt")
    await app.aresume("alt")
    history = await app.ahistory("alt")
    assert [(h.thread_id, h.step) for h in history] == [("alt", 4), ("alt", 3), ("alt", 2), ("src", 1), ("src", 0)]
    assert history[2].parent == after_plan.ref
    grandchild = await app.afork("alt", history[3].checkpoint_id, new_thread_id="alt2")  # an ancestor's checkpoint
    assert grandchild.parent == history[3].ref
    threads = {t.thread_id: t for t in await app.athreads()}
    assert threads["alt"].forked_from == after_plan.ref


async def test_fork_with_reducer_update_and_goto(saver: Saver) -> None:
    app = app_for(saver)
    await app.ainvoke({}, thread_id="src")
    first = (await app.ahistory("src"))[-1]
    fork = await app.afork("src", first.checkpoint_id, update={"steps": ["injected"]}, goto="finish", new_thread_id="g")
    assert fork.values.steps == ["injected"] and fork.next == ("finish",)
    done = await app.aresume("g")
    assert done.values.result == "done with 1 steps (plain)"


async def test_fork_errors(saver: Saver) -> None:
    app = app_for(saver)
    await app.ainvoke({}, thread_id="src")
    head = await app.aget_state("src")
    with pytest.raises(CheckpointNotFoundError):
        await app.afork("src", "nope")
    with pytest.raises(ThreadConflictError, match="already exists"):
        await app.afork("src", head.checkpoint_id, new_thread_id="src")


async def test_diff_reports_added_changed_and_appended(saver: Saver) -> None:
    app = app_for(saver)
    await app.ainvoke({"instruction": "v1"}, thread_id="a")
    after_plan = (await app.ahistory("a"))[2]
    await app.afork("a", after_plan.checkpoint_id, update={"instruction": "v2"}, new_thread_id="b")
    await app.aresume("b")
    d = await app.adiff(("a", None), ("b", None))
    assert set(d.changed) == {"instruction", "steps", "result"}
    assert d.changed["instruction"].before == "v1" and d.changed["instruction"].after == "v2"
    assert d.changed["steps"].common == 1 and d.changed["steps"].appended == ["build(v2)"]
    assert d.changed["steps"].dropped == ["build(v1)"]
    growth = await app.adiff(("a", after_plan.checkpoint_id), ("a", None))
    assert growth.changed["steps"].appended == ["build(v1)"] and growth.changed["steps"].dropped == []
    assert "appended" in str(growth)
    same = await app.adiff(("a", None), await app.aget_state("a"))
    assert not same and "no differences" in str(same)


async def test_checkpoint_found_by_step_across_a_fork(saver: Saver) -> None:
    app = app_for(saver)
    await app.ainvoke({"instruction": "v1"}, thread_id="src")
    await app.afork("src", step=1, update={"instruction": "v2"}, new_thread_id="alt")
    await app.aresume("alt")
    assert (await app.aget_state("alt", step=1)).thread_id == "src"  # the ancestor's checkpoint
    assert (await app.aget_state("alt", step=3)).values.steps == ["plan(v1)", "build(v2)"]
    assert (await app.aget_state("src", step=2)).values.steps == ["plan(v1)", "build(v1)"]
    with pytest.raises(CheckpointNotFoundError, match="no checkpoint at step 99"):
        await app.aget_state("alt", step=99)


async def test_diff_does_not_report_an_unchanged_nan(saver: Saver) -> None:
    class F(BaseModel):
        x: float = 0.0
        xs: list[float] = []

    g = StateGraph(F)
    g.add_node("a", lambda s: {"x": float("nan"), "xs": [float("nan"), 1.0]})
    g.add_edge(START, "a")
    g.add_edge("a", END)
    app = g.compile(saver=saver)
    await app.ainvoke({}, thread_id="n")
    assert not await app.adiff(("n", None), ("n", None))


class Reply(BaseModel):
    model_config = ConfigDict(extra="allow")  # like the openai client's models
    text: str = ""


async def test_diff_sees_extra_fields_of_models_and_ignores_an_unchanged_decimal_nan(saver: Saver) -> None:
    class R(BaseModel):
        reply: Reply = Reply()
        price: Decimal = Decimal("NaN")
        n: int = 0

    g = StateGraph(R)
    g.add_node("a", lambda s: {"reply": Reply(text="hi", finish="stop"), "n": s.n + 1})
    g.add_edge(START, "a")
    g.add_edge("a", END)
    app = g.compile(saver=saver)
    await app.ainvoke({}, thread_id="r")
    head = await app.aget_state("r")
    alt = await app.afork("r", head.checkpoint_id, update={"reply": Reply(text="hi", finish="length")})
    diff = await app.adiff(("r", None), alt)
    assert set(diff.changed) == {"reply"}  # was empty: extra fields were not compared; "price" never changed
    assert diff.changed["reply"].after.finish == "length"


# -- forking a long thread: the fork's cost does not grow with the source's history ------------------------------------


class Long(BaseModel):
    log: Annotated[list[str], append] = []
    n: int = 0
    stop: int = 0
    seen: int = 0


LONG = 40
"""Steps of the long thread; with ``snapshot_every`` above it, its log at step k is one snapshot and k deltas."""


def long_app(saver: Saver | None, **nodes: Any) -> Any:
    g = StateGraph(Long)
    g.add_node("step", lambda s: {"log": [f"m{s.n}:" + "x" * 200], "n": s.n + 1})
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s.n < s.stop else END)
    return g.compile(saver=saver, snapshot_every=10 * LONG, recursion_limit=10 * LONG)


def expected_log(n: int) -> list[str]:
    return [f"m{i}:" + "x" * 200 for i in range(n)]


def count_get_blobs(monkeypatch: pytest.MonkeyPatch, saver: Saver) -> list[int]:
    """Count the saver's ``get_blobs`` calls (the number of ranges of each); the real saver answers them."""
    calls: list[int] = []
    real = saver.get_blobs

    async def counted(ranges: Any) -> Any:
        calls.append(len(ranges))
        return await real(ranges)

    monkeypatch.setattr(saver, "get_blobs", counted)
    return calls


async def test_async_fork_of_a_long_thread_reads_the_source_values_beside_its_commit(
    saver: Saver, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = long_app(saver)
    await app.ainvoke({"stop": LONG}, thread_id="src")
    calls = count_get_blobs(monkeypatch, saver)
    fork = await app.afork("src", step=LONG // 2, update={"stop": LONG // 2 + 3}, new_thread_id="f")
    assert calls == [1]  # one query for the source's log, run beside the commit (the fork's own rows need none)
    assert fork.values == Long(log=expected_log(LONG // 2), n=LONG // 2, stop=LONG // 2 + 3)
    assert (await app.aget_state("f")).values == fork.values
    assert (await app.aresume("f")).values.log == expected_log(LONG // 2 + 3)


async def test_async_fork_whose_value_fetch_fails_exists_and_raises_on_reading_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from graphckpt import MemorySaver, SaverError

    saver = MemorySaver()
    app = long_app(saver)
    await app.ainvoke({"stop": 5}, thread_id="src")

    async def broken(ranges: Any) -> Any:
        raise SaverError("the blobs are unreachable")

    monkeypatch.setattr(saver, "get_blobs", broken)
    fork = await app.afork("src", step=3, update={"stop": 9}, new_thread_id="f")
    assert fork.thread_id == "f" and fork.next == ("step",)  # committed: the branch exists
    with pytest.raises(SaverError, match="unreachable"):
        fork.values  # noqa: B018
    monkeypatch.undo()
    assert (await app.aget_state("f")).values.log == expected_log(3)


def test_sync_fork_fetches_nothing_and_loads_the_values_on_first_access(
    unopened_saver: Saver, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = long_app(unopened_saver)
    try:
        app.invoke({"stop": LONG}, thread_id="src")
        calls = count_get_blobs(monkeypatch, unopened_saver)
        fork = app.fork("src", step=LONG // 2, update={"stop": LONG // 2 + 3}, new_thread_id="f")
        assert fork.thread_id == "f" and fork.step == LONG // 2 + 1 and fork.next == ("step",)
        assert fork.metadata["forked_from"] == {"thread_id": "src", "checkpoint_id": fork.parent.checkpoint_id}
        assert calls == []  # O(1): nothing of the source's history was read
        assert fork.values == Long(log=expected_log(LONG // 2), n=LONG // 2, stop=LONG // 2 + 3)
        assert calls == [1]
        assert fork.values.n == LONG // 2 and calls == [1]  # loaded once
        assert app.get_state("f").values == fork.values
        assert app.resume("f").values.log == expected_log(LONG // 2 + 3)
    finally:
        app.close()


def test_sync_fork_values_are_readable_after_the_source_moved_on_or_was_deleted(unopened_saver: Saver) -> None:
    app = long_app(unopened_saver)
    try:
        app.invoke({"stop": LONG}, thread_id="src")
        fork = app.fork("src", step=10, update={"stop": 12}, new_thread_id="f")
        other = app.fork("src", step=20, new_thread_id="g")
        app.invoke({"stop": LONG + 5}, thread_id="src")  # a new turn: the source continues past the fork points
        assert app.get_state("src").values.log == expected_log(LONG + 5)
        assert fork.values == Long(log=expected_log(10), n=10, stop=12)
        with pytest.raises(ThreadHasForksError):  # the app refuses: forks depend on it
            app.delete_thread("src")
        app.sync_call(app.saver.delete_thread("src"))  # the saver's delete keeps the rows the forks need
        assert other.values == Long(log=expected_log(20), n=20, stop=LONG)
    finally:
        app.close()


def test_sync_fork_values_read_after_close_raise_a_clear_error(unopened_saver: Saver) -> None:
    from graphckpt import SyncCallError

    app = long_app(unopened_saver)
    app.invoke({"stop": 8}, thread_id="src")
    fork = app.fork("src", step=4, update={"stop": 6}, new_thread_id="f")
    read_in_time = app.fork("src", step=5, new_thread_id="g")
    assert read_in_time.values.n == 5
    app.close()
    with pytest.raises(SyncCallError, match="values of fork 'f' are loaded on first access and the app was closed"):
        fork.values  # noqa: B018
    assert app._portal._loop is None and not unopened_saver._open  # nothing was reopened to try
    assert read_in_time.values.log == expected_log(5)  # what was read before stays readable


def test_sync_fork_values_read_on_the_apps_own_loop_raise_a_clear_error() -> None:
    from graphckpt import NodeError, SyncCallError

    forks: list[Any] = []

    async def peek(s: Long) -> dict[str, Any]:  # an async node runs on the app's loop: it cannot wait for it
        return {"seen": len(forks[0].values.log)}

    g = StateGraph(Long)
    g.add_node("step", lambda s: {"log": [f"m{s.n}:" + "x" * 200], "n": s.n + 1})
    g.add_node("peek", peek)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s.n < s.stop else "peek")
    g.add_edge("peek", END)
    app = g.compile(snapshot_every=100)
    try:
        with pytest.raises(NodeError):
            app.invoke({"stop": 6}, thread_id="src")
        forks.append(app.fork("src", step=3, update={"stop": 4}, new_thread_id="f"))
        with pytest.raises(NodeError) as info:
            app.invoke({"stop": 2}, thread_id="other")
        assert isinstance(info.value.__cause__, SyncCallError)
        assert "inside a node" in str(info.value.__cause__)
        assert forks[0].values.log == expected_log(3)  # from outside the loop it loads
    finally:
        app.close()


def test_sync_diff_of_sync_forks_loads_their_values(unopened_saver: Saver) -> None:
    """``diff`` runs on the app's loop; a sync fork's values are loaded by a sync call, which must not be made
    from that loop's thread (it raised SyncCallError "made from inside a node")."""
    import asyncio

    app = long_app(unopened_saver)
    try:
        app.invoke({"stop": 12}, thread_id="src")
        fork = app.fork("src", step=4, update={"stop": 6}, new_thread_id="f")
        other = app.fork("src", step=7, new_thread_id="g")
        diff = app.diff(fork, other)
        assert diff.a == fork.ref and diff.b == other.ref
        assert set(diff.changed) == {"log", "n", "stop"}
        assert fork.values == Long(log=expected_log(4), n=4, stop=6)
        later = app.fork("src", step=5, new_thread_id="h")
        assert asyncio.run(app.adiff(later, ("src", None))).a == later.ref  # from another loop too
        assert later.values.n == 5
    finally:
        app.close()
