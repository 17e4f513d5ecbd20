"""Edge cases found in review, each pinned by a test: routing failures, unstorable values, state mutation, joins
after fan-out, timeouts and effects, the sync facade under concurrency, streams, deleted threads."""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated, Any, TypedDict

import pytest
import typing_extensions
from pydantic import BaseModel
from support.waiting import wait_for

from graphckpt import (
    END,
    START,
    Context,
    GraphckptError,
    InvalidUpdateError,
    NodeError,
    RetryPolicy,
    Saver,
    Send,
    SerializationError,
    StateGraph,
    ThreadNotFoundError,
    append,
)
from graphckpt.savers.memory import MemorySaver
from graphckpt.savers.sqlite import SqliteSaver


class S(BaseModel):
    request: str = ""
    notes: Annotated[list[str], append] = []
    n: int = 0


def one_node(fn: Any, **options: Any) -> StateGraph:
    g = StateGraph(S)
    g.add_node("a", fn, **options)
    g.add_edge(START, "a")
    g.add_edge("a", END)
    return g


# -- routing and storage failures leave the thread in a clear state ---------------------------------------------------


async def test_router_after_start_raising_is_a_node_error_and_changes_nothing(saver: Saver) -> None:
    def router(s: S) -> str:
        if s.request == "boom":
            raise ValueError("router broke")
        return "a"

    g = StateGraph(S)
    g.add_node("a", lambda s: {"n": s.n + 1})
    g.add_edge("a", END)
    g.add_conditional_edges(START, router)
    app = g.compile(saver=saver)
    await app.ainvoke({"request": "ok"}, thread_id="t")
    with pytest.raises(NodeError, match="router after START raised ValueError: router broke"):
        await app.ainvoke({"request": "boom"}, thread_id="t")
    assert (await app.aget_state("t")).status == "done"  # the failed turn wrote nothing
    assert (await app.ainvoke({"request": "ok"}, thread_id="t")).values.n == 2


async def test_router_returning_an_unhashable_value_with_a_path_map_fails_the_node(saver: Saver) -> None:
    """A value that cannot be a key of the path_map (a list inside the router's list, a dict) is not in it: the
    thread is ``failed`` naming the node, instead of a bare TypeError leaving it ``running``."""
    picks: list[Any] = [[["go"]]]  # a list of one pick that is itself a list
    g = StateGraph(S)
    g.add_node("a", lambda s: {"n": s.n + 1})
    g.add_node("b", lambda s: {"notes": ["b"]})
    g.add_edge(START, "a")
    g.add_edge("b", END)
    g.add_conditional_edges("a", lambda s: picks[0], {"go": "b", "stop": END})
    app = g.compile(saver=saver)
    with pytest.raises(InvalidUpdateError, match=r"a: router returned \['go'\], not in path_map"):
        await app.ainvoke({}, thread_id="t")
    snap = await app.aget_state("t")
    assert snap.status == "failed" and [e.node for e in snap.errors] == ["a"] and snap.values.n == 0
    picks[0] = "go"
    done = await app.aresume("t")
    assert done.status == "done" and done.values.n == 1 and done.values.notes == ["b"]


async def test_fork_goto_unknown_node(saver: Saver) -> None:
    app = one_node(lambda s: {"n": 1}).compile(saver=saver)
    snap = await app.ainvoke({}, thread_id="t")
    with pytest.raises(InvalidUpdateError, match="unknown node 'nope'"):
        await app.afork("t", snap.checkpoint_id, goto="nope", new_thread_id="f")
    assert await saver.get_thread("f") is None


async def test_value_that_validates_but_cannot_be_stored_fails_the_node(saver: Saver) -> None:
    app = one_node(lambda s: {"n": 2**70}).compile(saver=saver)  # a valid int, too big to store
    with pytest.raises(SerializationError, match="node 'a': its update of 'n' cannot be stored"):
        await app.ainvoke({}, thread_id="t")
    snap = await app.aget_state("t")
    assert snap.status == "failed" and snap.errors[0].node == "a"
    assert [t.thread_id for t in await app.athreads(status="failed")] == ["t"]


class Item(BaseModel):
    x: int


async def test_send_payload_model_is_registered_from_the_target_annotation(saver: Saver) -> None:
    def work(item: Item) -> dict[str, Any]:
        return {"notes": [str(item.x)]}

    g = StateGraph(S)
    g.add_node("fan", lambda s: None)
    g.add_node("work", work)
    g.add_edge(START, "fan")
    g.add_conditional_edges("fan", lambda s: [Send("work", Item(x=1)), Send("work", Item(x=2))])
    g.add_edge("work", END)
    app = g.compile(saver=saver, interrupt_before=["work"])
    waiting = await app.ainvoke({}, thread_id="t")  # the Send payloads are stored in the frontier
    assert [t.payload for t in (await app.aget_state("t")).tasks] == [Item(x=1), Item(x=2)]
    assert waiting.status == "interrupted"
    assert (await app.aresume("t")).values.notes == ["1", "2"]


async def test_unregistered_send_payload_names_the_node(saver: Saver) -> None:
    g = StateGraph(S)
    g.add_node("fan", lambda s: None)
    g.add_node("work", lambda p: {"notes": [str(p.x)]})  # no annotation: the payload type is unknown
    g.add_edge(START, "fan")
    g.add_conditional_edges("fan", lambda s: [Send("work", Item(x=1))])
    g.add_edge("work", END)
    app = g.compile(saver=saver)
    with pytest.raises(SerializationError, match="node 'fan': a Send payload it routed cannot be stored"):
        await app.ainvoke({}, thread_id="t")
    assert (await app.aget_state("t")).status == "failed"


# -- what a node is given, and what it may return -------------------------------------------------------------------


async def test_mutating_the_state_in_place_changes_nothing(saver: Saver) -> None:
    seen: list[list[str]] = []

    def sloppy(s: S, ctx: Context) -> dict[str, Any]:
        seen.append(list(s.notes))
        s.notes.append("dirty")
        if ctx.attempt == 1:
            raise ConnectionError("transient")  # retried by the default policy (a RuntimeError is not)
        return {"n": 1}

    app = one_node(sloppy, retry=RetryPolicy(max_attempts=2, initial_interval=0)).compile(saver=saver)
    snap = await app.ainvoke({"notes": ["x"]}, thread_id="t")
    assert seen == [["x"], ["x"]]  # the retry got a fresh state
    assert snap.values.notes == ["x"] == (await app.aget_state("t")).values.notes


async def test_returning_the_state_object_is_refused(saver: Saver) -> None:
    app = one_node(lambda s: s).compile(saver=saver)
    with pytest.raises(InvalidUpdateError, match="returned the state object"):
        await app.ainvoke({"notes": ["x"]}, thread_id="t")


@pytest.mark.parametrize("order", ["plain_first", "sends_first"])
async def test_join_after_send_fan_out_does_not_depend_on_target_order(saver: Saver, order: str) -> None:
    class R(BaseModel):
        notes: Annotated[list[str], append] = []
        round: int = 0

    def fan_router(s: R) -> list[Any]:
        if s.round == 0:
            sends = [Send("w", "p1"), Send("w", "p2")]
            return ["other", *sends] if order == "plain_first" else [*sends, "other"]
        return ["other"]  # in round 1 only "other" runs: the join must not fire again

    g = StateGraph(R)
    g.add_node("fan", lambda s: None)
    g.add_node("w", lambda p: {"notes": [p]})
    g.add_node("other", lambda s: {"notes": ["other"]})
    g.add_node("j", lambda s: {"notes": ["joined"], "round": s.round + 1})
    g.add_edge(START, "fan")
    g.add_conditional_edges("fan", fan_router)
    g.add_edge(["w", "other"], "j")
    g.add_conditional_edges("j", lambda s: "fan" if s.round < 2 else END)
    snap = await g.compile(saver=saver).ainvoke({}, thread_id="t")
    assert snap.values.notes.count("joined") == 1


async def test_typing_extensions_typeddict_schema_with_a_model(tmp_path: Any) -> None:
    class TD(typing_extensions.TypedDict, total=False):
        item: Item
        log: Annotated[list[str], append]

    g = StateGraph(TD)
    g.add_node("a", lambda s: {"item": Item(x=s["item"].x + 1), "log": ["a"]})
    g.add_edge(START, "a")
    g.add_edge("a", END)
    async with SqliteSaver(tmp_path / "c.db") as saver:
        app = g.compile(saver=saver)
        await app.ainvoke({"item": Item(x=1)}, thread_id="t")
        assert (await app.aget_state("t")).values == {"item": Item(x=2), "log": ["a"]}


# -- timeouts, effects and errors -----------------------------------------------------------------------------------


def test_an_abandoned_attempt_never_runs_its_effect(tmp_path: Any) -> None:
    calls: list[int] = []
    released = threading.Event()
    first_attempt_over = threading.Event()
    outcome: list[str] = []

    def slow_then_charge(s: S, ctx: Context) -> dict[str, Any]:
        try:
            if ctx.attempt == 1:
                released.wait(5)  # outlives its timeout; the engine moves on to attempt 2 meanwhile
            value = ctx.effect(lambda: calls.append(ctx.attempt) or len(calls))
            return {"n": value}
        except GraphckptError as exc:
            outcome.append(str(exc))
            raise
        finally:
            if ctx.attempt == 1:
                first_attempt_over.set()

    app = one_node(slow_then_charge, timeout=0.1, retry=RetryPolicy(max_attempts=2, initial_interval=0)).compile(
        saver=SqliteSaver(tmp_path / "c.db")
    )
    try:
        snap = app.invoke({}, thread_id="t")
        released.set()  # let the abandoned first attempt go on to its effect call
        assert first_attempt_over.wait(5)
        assert snap.values.n == 1 and calls == [2]  # only the second attempt charged
        assert outcome and "abandoned" in outcome[0]
    finally:
        released.set()
        app.close()


async def test_errors_of_an_earlier_failure_are_not_shown_after_resume(saver: Saver) -> None:
    runs = [0]

    def flaky(s: S, ctx: Context) -> dict[str, Any]:
        runs[0] += 1
        if runs[0] == 1:
            raise RuntimeError("first")
        return {"notes": [str(ctx.interrupt("q"))]}

    app = one_node(flaky).compile(saver=saver)
    with pytest.raises(NodeError):
        await app.ainvoke({}, thread_id="t")
    assert (await app.aresume("t")).status == "interrupted"
    state = await app.aget_state("t")
    assert state.status == "interrupted" and state.errors == ()


async def test_a_deleted_thread_is_not_readable_even_if_a_fork_keeps_its_rows(saver: Saver) -> None:
    app = one_node(lambda s: {"n": 1}).compile(saver=saver)
    await app.ainvoke({}, thread_id="t")
    first = (await app.ahistory("t"))[-1]
    await app.afork("t", first.checkpoint_id, new_thread_id="f")
    await app.saver.delete_thread("t")  # the saver keeps the rows the fork needs (App refuses: issue 26)
    with pytest.raises(ThreadNotFoundError):
        await app.aget_state("t", first.checkpoint_id)
    assert (await app.ahistory("f"))[-1].checkpoint_id == first.checkpoint_id  # still there for the fork


async def test_empty_thread_id_is_refused(saver: Saver) -> None:
    with pytest.raises(ValueError, match="thread_id must be a non-empty string"):
        await one_node(lambda s: None).compile(saver=saver).ainvoke({}, thread_id="")


# -- the sync facade ---------------------------------------------------------------------------------------------------


def test_sync_calls_from_several_threads_run_concurrently() -> None:
    barrier = threading.Barrier(4, timeout=10)

    def meet(s: S) -> dict[str, Any]:
        barrier.wait()  # fails (BrokenBarrierError) unless all four runs are inside this node at once
        return {"n": 1}

    app = one_node(meet).compile(saver=MemorySaver())
    errors: list[BaseException] = []

    def call(i: int) -> None:
        try:
            app.invoke({}, thread_id=f"t{i}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    app.close()
    assert errors == []


def test_sync_stream_yields_each_step_as_it_commits(tmp_path: Any) -> None:
    first_seen = threading.Event()

    def step(s: S) -> dict[str, Any]:
        if s.n == 1 and not first_seen.wait(10):
            raise AssertionError("the consumer never saw the first step while the run was going")
        return {"n": s.n + 1}

    g = StateGraph(S)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s.n < 3 else END)
    app = g.compile(saver=SqliteSaver(tmp_path / "c.db"))
    try:
        seen = []
        for snap in app.stream({}, thread_id="t", mode="checkpoints"):
            seen.append(snap.values.n)
            if snap.values.n == 1:
                first_seen.set()
        assert seen == [0, 1, 2, 3]
    finally:
        app.close()


def test_sync_stream_closed_midway_stops_the_run_and_it_resumes(tmp_path: Any) -> None:
    g = StateGraph(S)
    g.add_node("step", lambda s: {"n": s.n + 1})
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s.n < 50 else END)
    app = g.compile(saver=SqliteSaver(tmp_path / "c.db"))
    try:
        stream = app.stream({}, thread_id="t", mode="checkpoints")
        next(stream)
        stream.close()
        stopped = app.get_state("t")
        assert stopped.status == "running" and stopped.values.n < 50
        assert app.resume("t").values.n == 50
    finally:
        app.close()


def test_a_sync_node_may_use_asyncio_run() -> None:
    async def fetch(n: int) -> int:
        await asyncio.sleep(0)
        return n + 1

    g = StateGraph(S)
    g.add_node("step", lambda s: {"n": asyncio.run(fetch(s.n))})
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s.n < 20 else END)  # later steps run inline
    app = g.compile(saver=MemorySaver())
    try:
        assert app.invoke({}, thread_id="t").values.n == 20
    finally:
        app.close()


def test_a_sync_node_may_make_sync_calls_of_its_own_app_on_every_step() -> None:
    """In its worker thread a sync node may call the app's sync API; once measured fast it must not be run inline
    on the app's loop, where that call raises SyncCallError (it did from the second step on)."""
    apps: list[Any] = []

    def step(s: S) -> dict[str, Any]:
        return {"n": s.n + 1, "notes": [t.thread_id for t in apps[0].threads()]}

    g = StateGraph(S)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s.n < 20 else END)
    app = g.compile(saver=MemorySaver())
    apps.append(app)
    try:
        done = app.invoke({}, thread_id="t")
        assert done.values.n == 20 and done.values.notes == ["t"] * 20
    finally:
        app.close()


def test_close_after_async_use_closes_the_saver(tmp_path: Any) -> None:
    saver = SqliteSaver(tmp_path / "c.db")
    app = one_node(lambda s: {"n": 1}).compile(saver=saver)
    asyncio.run(app.ainvoke({}, thread_id="t"))
    app.close()
    assert not saver._open


def test_graphckpt_errors_from_nodes_are_wrapped() -> None:
    def boom(s: S) -> None:
        raise GraphckptError("a library error raised by node code")

    app = one_node(boom).compile()
    try:
        with pytest.raises(NodeError) as info:
            app.invoke({}, thread_id="t")
        assert isinstance(info.value.__cause__, GraphckptError)
    finally:
        app.close()


@pytest.mark.parametrize("limit", [0, -1, 2.5])
async def test_a_bad_recursion_limit_is_refused_before_anything_is_written(saver: Saver, limit: Any) -> None:
    app = one_node(lambda s: {"n": 1}).compile(saver=saver)
    with pytest.raises(ValueError, match="recursion_limit must be a positive number"):
        await app.ainvoke({}, thread_id="t", recursion_limit=limit)
    assert await saver.get_thread("t") is None


class _Counter(TypedDict, total=False):
    n: int


def _blocked_at_n2(tmp_path: Any, started: threading.Event, release: threading.Event) -> Any:
    """A loop counting ``n`` to 5 on a SQLite file; at ``n == 2`` its node sets ``started`` and waits for ``release``
    (in a worker thread: a node taking ``ctx`` never runs inline on the app's loop)."""

    def step(s: _Counter, ctx: Context) -> dict[str, Any]:
        if s.get("n", 0) == 2:
            started.set()
            release.wait(30)
        return {"n": s.get("n", 0) + 1}

    g = StateGraph(_Counter)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["n"] < 5 else END)
    return g.compile(saver=SqliteSaver(tmp_path / "c.db"))


@pytest.mark.parametrize("kind", ["invoke", "stream"])
def test_close_ends_sync_calls_other_threads_have_in_flight(tmp_path: Any, kind: str) -> None:
    """A sync call running while another thread closes the app raises SyncCallError instead of waiting forever;
    the checkpoints committed before stay readable."""
    from graphckpt import SyncCallError

    started, release = threading.Event(), threading.Event()
    app = _blocked_at_n2(tmp_path, started, release)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            if kind == "invoke":
                app.invoke({"n": 0}, thread_id="t")
            else:
                for _ in app.stream({"n": 0}, thread_id="t"):
                    pass
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    assert started.wait(30)
    app.close()
    release.set()
    worker.join(30)
    assert not worker.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], SyncCallError), outcome
    reopened = _blocked_at_n2(tmp_path, threading.Event(), threading.Event())
    try:
        snap = reopened.get_state("t")
        assert snap.step == 2 and snap.values["n"] == 2
    finally:
        reopened.close()


def test_close_stops_the_run_of_a_stream_whose_reader_is_between_items(tmp_path: Any) -> None:
    """The reader holds a stream between two items while another thread closes the app: the run stops (nothing is
    committed after the close) and the reader's next ``next()`` raises SyncCallError."""
    from graphckpt import SyncCallError

    started, release, got_first, go_on = threading.Event(), threading.Event(), threading.Event(), threading.Event()

    app = _blocked_at_n2(tmp_path, started, release)
    outcome: list[BaseException | None] = []

    def read() -> None:
        stream = app.stream({"n": 0}, thread_id="t", mode="values")
        try:
            while next(stream)["n"] < 2:  # the run is one step ahead of its reader: at n = 2 the blocked node starts
                pass
            got_first.set()
            go_on.wait(30)
            for _ in stream:
                pass
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    assert started.wait(30) and got_first.wait(30)
    app.close()
    release.set()
    go_on.set()
    reader.join(30)
    assert not reader.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], SyncCallError), outcome
    reopened = _blocked_at_n2(tmp_path, threading.Event(), threading.Event())
    try:
        assert reopened.get_state("t").step == 2
    finally:
        reopened.close()


def test_a_stream_whose_reader_asks_for_more_as_the_close_begins_still_has_its_run_stopped(tmp_path: Any) -> None:
    """The reader's next ``next()`` comes after ``close()`` has begun but before its loop got to the open streams:
    the call is refused (SyncCallError) and the close still stops that stream's run (its lease is released), instead
    of losing the stream between the two and leaving its run's task to be destroyed mid-step with the loop."""
    from graphckpt import SyncCallError

    started, release, gate = threading.Event(), threading.Event(), threading.Event()
    app = _blocked_at_n2(tmp_path, started, release)
    stream = app.stream({"n": 0}, thread_id="t", mode="values")
    try:
        while next(stream)["n"] < 2:  # then the run is in its blocked step: one step ahead of this reader
            pass
        assert started.wait(30)
        app._portal.loop.call_soon_threadsafe(gate.wait, 30)  # the loop is busy: the close cannot get to it yet
        closer = threading.Thread(target=app.close)
        closer.start()
        wait_for(lambda: app._portal._cancelled, 30, interval=0.005, what="the close to begin")
        with pytest.raises(SyncCallError, match="being closed"):
            next(stream)
        gate.set()
        closer.join(30)
        assert not closer.is_alive()
    finally:
        gate.set()
        release.set()
    reopened = _blocked_at_n2(tmp_path, threading.Event(), threading.Event())
    try:
        info = reopened.thread("t")
        assert (info.status, info.step, info.lease) == ("running", 2, None)  # its run stopped and let the thread go
    finally:
        reopened.close()


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("kind", ["invoke", "inline", "stream"])
def test_keyboard_interrupt_in_a_node_reaches_the_sync_caller(tmp_path: Any, kind: str, exc_type: type) -> None:
    """A KeyboardInterrupt (or SystemExit) raised by a node reaches the thread that made the sync call, as it
    would escape ``asyncio.run(app.ainvoke(...))``, instead of killing the app's loop and leaving the caller (and
    a later ``close()``) waiting forever. The thread stays ``running``: ``resume`` finishes it."""
    raised = threading.Event()

    def plain(s: _Counter) -> dict[str, Any]:  # fast and without ctx: from the second step on, it runs inline
        if s.get("n", 0) == 3 and not raised.is_set():
            raised.set()
            raise exc_type()
        return {"n": s.get("n", 0) + 1}

    def with_ctx(s: _Counter, ctx: Context) -> dict[str, Any]:  # never inline: in a worker thread
        return plain(s)

    g = StateGraph(_Counter)
    g.add_node("step", plain if kind == "inline" else with_ctx)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["n"] < 5 else END)
    app = g.compile(saver=SqliteSaver(tmp_path / "c.db"))
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            if kind == "stream":
                for _ in app.stream({"n": 0}, thread_id="t"):
                    pass
            else:
                app.invoke({"n": 0}, thread_id="t")
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=run, daemon=True)
    caller.start()
    caller.join(30)
    assert not caller.is_alive(), "the sync call never returned"
    assert len(outcome) == 1 and isinstance(outcome[0], exc_type), outcome
    closer = threading.Thread(target=app.close, daemon=True)
    try:
        assert app.get_state("t").status == "running"
        assert app.resume("t").values["n"] == 5
    finally:
        closer.start()
        closer.join(30)
    assert not closer.is_alive(), "close() never returned"


def test_a_stream_abandoned_in_a_cycle_may_be_collected_on_the_apps_loop(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An abandoned sync stream held in a reference cycle is finalized wherever the cyclic GC runs, possibly on the
    app's own loop (here: an async node calling ``gc.collect``). Stopping its run there must not be a blocking sync
    call (it raised SyncCallError, reported as an exception ignored in the generator)."""
    import gc

    unraisable: list[Any] = []
    monkeypatch.setattr("sys.unraisablehook", unraisable.append)
    release = threading.Event()

    def step(s: S) -> dict[str, Any]:
        if s.n == 1:
            release.wait(30)
        return {"n": s.n + 1}

    async def collect(s: S) -> dict[str, Any]:
        gc.collect()
        return {"n": 1}

    g = StateGraph(S)
    g.add_node("step", step)
    g.add_node("collect", collect)
    g.add_conditional_edges(START, lambda s: "collect" if s.request == "collect" else "step")
    g.add_conditional_edges("step", lambda s: "step" if s.n < 3 else END)
    g.add_edge("collect", END)
    app = g.compile(saver=SqliteSaver(tmp_path / "c.db"))

    class Holder:
        pass

    gc.disable()  # the cycle below is collected by the node, on the app's loop
    try:
        holder = Holder()
        holder.self = holder  # type: ignore[attr-defined]
        holder.stream = app.stream({}, thread_id="s")  # type: ignore[attr-defined]
        assert next(holder.stream) == {"step": {"n": 1}}  # type: ignore[attr-defined]
        del holder
        app.invoke({"request": "collect"}, thread_id="c")
        assert app._sync_calls == 0
    finally:
        gc.enable()
        release.set()
        app.close()
    assert unraisable == []
    reopened = g.compile(saver=SqliteSaver(tmp_path / "c.db"))
    try:
        assert reopened.resume("s").values.n == 3
    finally:
        reopened.close()


def _at_line_of_portal_call(text: str, action: Any) -> Any:
    """A tracer for ``sys.settrace`` in a calling thread: runs ``action(frame)`` once, when ``Portal.call`` is about
    to run its line containing ``text``. Pins a race between two threads deterministically."""
    import inspect

    from graphckpt.sync import Portal

    lines, first = inspect.getsourcelines(Portal.call)
    target = first + next(i for i, line in enumerate(lines) if text in line)
    code = Portal.call.__code__
    done: list[bool] = []

    def local(frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and frame.f_lineno == target and not done:
            done.append(True)
            action(frame)
        return local

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        return local if frame.f_code is code else None

    return tracer


def test_a_sync_call_made_as_another_thread_closes_the_app_raises_sync_call_error(tmp_path: Any) -> None:
    """The caller read the app's loop, then another thread closed the app before the call was submitted: the call
    raises SyncCallError (it raised RuntimeError 'Event loop is closed' and left coroutines never awaited)."""
    import sys

    from graphckpt import SyncCallError

    app = one_node(lambda s: {"n": 1}).compile(saver=SqliteSaver(tmp_path / "c.db"))
    app.invoke({}, thread_id="t")
    about_to_submit, closed = threading.Event(), threading.Event()

    def pause(frame: Any) -> None:
        about_to_submit.set()
        closed.wait(30)

    outcome: list[Any] = []

    def call() -> None:
        sys.settrace(_at_line_of_portal_call("run_coroutine_threadsafe", pause))
        try:
            outcome.append(app.get_state("t"))
        except BaseException as exc:
            outcome.append(exc)
        finally:
            sys.settrace(None)

    caller = threading.Thread(target=call)
    caller.start()
    assert about_to_submit.wait(30)
    app.close()
    closed.set()
    caller.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], SyncCallError), outcome


def test_a_sync_call_finishing_as_its_wait_times_out_returns_its_result(tmp_path: Any) -> None:
    """``Portal.call`` waits in slices to notice a closed loop; a call that finishes just after a slice timed out
    returns its result (the slice's TimeoutError was raised instead)."""
    import sys

    release = threading.Event()

    def slow(s: S, ctx: Context) -> dict[str, Any]:
        release.wait(30)
        return {"n": 7}

    app = one_node(slow).compile(saver=SqliteSaver(tmp_path / "c.db"))
    finished = threading.Event()

    def finish_now(frame: Any) -> None:  # the first slice timed out: the call finishes before the caller looks
        frame.f_locals["future"].add_done_callback(lambda _: finished.set())
        release.set()
        assert finished.wait(30)

    outcome: list[Any] = []

    def call() -> None:
        sys.settrace(_at_line_of_portal_call("if future.done():", finish_now))
        try:
            outcome.append(app.invoke({}, thread_id="t").values.n)
        except BaseException as exc:
            outcome.append(exc)
        finally:
            sys.settrace(None)

    caller = threading.Thread(target=call)
    caller.start()
    caller.join(60)
    app.close()
    assert outcome == [7]
