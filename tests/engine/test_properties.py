"""Property tests of the invariants (DESIGN.md §3) on random graphs, random failure points and random fork points.

Every graph here is generated: 2-6 nodes, static edges that only go forward (so they cannot loop), joins, and
conditional edges that may go anywhere (back edges and ``Send`` fan-out) but only while ``counter`` is below a
limit. Every task adds 1 to ``counter``, so every graph terminates. Nodes are deterministic functions of their input
(the state, or a ``Send`` payload); some journal an effect with ``ctx.effect``. Checkpoint and task ids differ from
run to run, so runs are compared by what a user sees: each checkpoint's step, frontier (node and payload) and values.

- *Resume equivalence*: nodes fail once at hypothesis-chosen (node, step) points; resuming until done gives the run
  that never failed, no finished task runs again and no journaled effect runs twice.
- *Forks are pure*: forking, resuming the fork and reading it leave the source thread's stored rows identical;
  a fork without an update replays the source, a fork of the input checkpoint equals a fresh run of that input.
- *Interrupts*: ``interrupt_before``/``interrupt_after`` on random nodes change only when the run pauses.
- *Time travel*: every checkpoint reads the same by id, by step and through ``history``, for any ``snapshot_every``
  (deltas plus snapshots), across turns and through a fork's inherited channels.
"""

from __future__ import annotations

import asyncio
import operator
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from graphckpt import END, START, App, Context, NodeError, Saver, Send, StateGraph, append, merge
from graphckpt.savers.base import BlobRange
from graphckpt.savers.memory import MemorySaver
from graphckpt.savers.sqlite import SqliteSaver

PROPERTY = settings(max_examples=60, deadline=None)


class S(BaseModel):
    log: Annotated[list[str], append] = []
    seen: Annotated[dict[str, int], merge] = {}
    counter: Annotated[int, operator.add] = 0
    last: str | None = None


# -- random graphs ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodePlan:
    is_async: bool
    effect: bool
    fail_after_effect: bool
    forward: tuple[int, ...]
    """Static edges to later nodes; ``-1`` is END."""
    routes: tuple[int, ...] | None
    """Conditional edge (while ``counter < limit``): node indices, any direction. ``None``: no conditional edge."""
    sends: tuple[int, ...]
    """``Send`` fan-out from the conditional edge (while ``counter < limit``)."""


@dataclass(frozen=True)
class GraphPlan:
    nodes: tuple[NodePlan, ...]
    entry: tuple[int, ...]
    joins: tuple[tuple[tuple[int, ...], int], ...]
    limit: int


@st.composite
def graph_plans(draw: st.DrawFn) -> GraphPlan:
    n = draw(st.integers(2, 6))
    forward: list[set[int]] = [set() for _ in range(n)]
    for j in range(1, n):  # every node has an earlier parent: all are reachable from START
        forward[draw(st.integers(0, j - 1))].add(j)
    for i in range(n):
        forward[i] |= draw(st.sets(st.sampled_from([*range(i + 1, n), -1]), max_size=2))
        if not forward[i]:
            forward[i].add(-1)  # forward edges lead to the last node, which leads to END
    nodes = []
    for i in range(n):
        has_router = draw(st.booleans())
        nodes.append(
            NodePlan(
                is_async=draw(st.booleans()),
                effect=draw(st.booleans()),
                fail_after_effect=draw(st.booleans()),
                forward=tuple(sorted(forward[i])),
                routes=tuple(draw(st.lists(st.integers(0, n - 1), max_size=2))) if has_router else None,
                sends=tuple(draw(st.lists(st.integers(0, n - 1), max_size=2))) if has_router else (),
            )
        )
    entry = (0, *sorted(draw(st.sets(st.integers(1, n - 1), max_size=1))))
    joins = []
    for _ in range(draw(st.integers(0, 2 if n >= 3 else 0))):
        target = draw(st.integers(2, n - 1))
        sources = draw(st.lists(st.integers(0, target - 1), min_size=2, max_size=2, unique=True))
        joins.append((tuple(sources), target))
    return GraphPlan(tuple(nodes), entry, tuple(joins), draw(st.integers(0, 16)))


def name(i: int) -> str:
    return END if i == -1 else f"n{i}"


@dataclass
class Probe:
    """What the nodes did, across every run and resume of one thread."""

    fail_at: set[tuple[str, int]] = field(default_factory=set)
    """(node, step) points where each task fails on its first attempt."""
    fail_in: str | None = None
    """Only fail in this thread (``None``: in any)."""
    ask: frozenset[str] = frozenset()
    """Nodes that ask a question with ``ctx.interrupt`` and log the answer."""
    answer_directly: bool = False
    """Asking nodes log the answer ``ok:<question>`` without asking (the run without interrupts)."""
    failed: set[str] = field(default_factory=set)
    effects: list[str] = field(default_factory=list)
    """Idempotency keys of the effect calls that really ran."""
    finished: list[str] = field(default_factory=list)
    """Task ids of the tasks that returned."""
    ran: list[tuple[str, int]] = field(default_factory=list)
    """(node, step) of every attempt."""

    def maybe_fail(self, ctx: Context) -> None:
        if self.fail_in not in (None, ctx.thread_id):
            return
        if (ctx.node, ctx.step) in self.fail_at and ctx.task_id not in self.failed:
            self.failed.add(ctx.task_id)
            raise RuntimeError(f"injected failure in {ctx.node} at step {ctx.step}")

    def asked(self, ctx: Context, basis: str) -> list[str]:
        if ctx.node not in self.ask:
            return []
        return [f"ok:{basis}" if self.answer_directly else ctx.interrupt(basis)]

    def call(self, key: str, basis: str) -> str:
        self.effects.append(key)
        return f"fx({basis})"


def make_node(i: int, plan: NodePlan, probe: Probe) -> Callable[..., Any]:
    me = name(i)

    def basis_of(inp: Any) -> str:
        if isinstance(inp, S):
            return f"{len(inp.log)}/{inp.counter}"
        return f"{inp['src']}>{inp['n']}"

    def update(basis: str, fx: str | None, answer: list[str]) -> dict[str, Any]:
        log = [f"{me}:{basis}", *([fx] if fx is not None else []), *answer]
        return {"log": log, "seen": {me: len(basis)}, "counter": 1, "last": me}

    if plan.is_async:

        async def anode(inp: Any, ctx: Context) -> dict[str, Any]:
            probe.ran.append((me, ctx.step))
            basis, fx = basis_of(inp), None
            if not plan.fail_after_effect:
                probe.maybe_fail(ctx)
            if plan.effect:
                fx = await ctx.aeffect(probe.call, ctx.idempotency_key, basis)
            probe.maybe_fail(ctx)
            answer = probe.asked(ctx, basis)
            probe.finished.append(ctx.task_id)
            return update(basis, fx, answer)

        return anode

    def node(inp: Any, ctx: Context) -> dict[str, Any]:
        probe.ran.append((me, ctx.step))
        basis, fx = basis_of(inp), None
        if not plan.fail_after_effect:
            probe.maybe_fail(ctx)
        if plan.effect:
            fx = ctx.effect(probe.call, ctx.idempotency_key, basis)
        probe.maybe_fail(ctx)
        answer = probe.asked(ctx, basis)
        probe.finished.append(ctx.task_id)
        return update(basis, fx, answer)

    return node


def make_router(i: int, plan: NodePlan, limit: int) -> Callable[[S], Any]:
    assert plan.routes is not None
    routes, sends = plan.routes, plan.sends

    def router(s: S) -> Any:
        if s.counter >= limit:
            return END
        payload = {"src": name(i), "n": s.counter}
        return [name(j) for j in routes] + [Send(name(j), payload) for j in sends] or END

    return router


def build(plan: GraphPlan, probe: Probe) -> StateGraph:
    g = StateGraph(S)
    for i, node in enumerate(plan.nodes):
        g.add_node(name(i), make_node(i, node, probe))
    for i in plan.entry:
        g.add_edge(START, name(i))
    for i, node in enumerate(plan.nodes):
        for j in node.forward:
            g.add_edge(name(i), name(j))
        if node.routes is not None:
            g.add_conditional_edges(name(i), make_router(i, node, plan.limit))
    for sources, target in plan.joins:
        g.add_edge([name(s) for s in sources], name(target))
    return g


# -- reading threads -------------------------------------------------------------------------------------------------

Trace = list[tuple[int, tuple[tuple[str, Any], ...], dict[str, Any]]]


async def trace(app: App, thread_id: str) -> Trace:
    """The thread's lineage, oldest first, as a user sees it: step, frontier (node, payload) and values."""
    return [
        (s.step, tuple((t.node, t.payload) for t in s.tasks), s.values.model_dump())
        for s in reversed(await app.ahistory(thread_id))
    ]


async def stored_rows(saver: Saver, thread_id: str) -> Any:
    """Everything the saver holds for a thread: its row, checkpoints, blobs and pending writes."""
    record = await saver.get_thread(thread_id)
    cps = await saver.list_checkpoints(thread_id)
    ranges = [BlobRange(thread_id, ch, 0, 10**9) for ch in S.model_fields]
    writes = [await saver.get_writes(thread_id, cp.checkpoint_id) for cp in cps]
    return record, cps, await saver.get_blobs(ranges), writes


async def run_clean(plan: GraphPlan, ask: frozenset[str] = frozenset()) -> tuple[Trace, Probe]:
    probe = Probe(ask=ask, answer_directly=True)
    async with build(plan, probe).compile(saver=MemorySaver()) as app:
        done = await app.ainvoke({"log": ["in"]}, thread_id="clean")
        assert done.status == "done"
        return await trace(app, "clean"), probe


def on_saver(kind: str, fn: Callable[[Saver], Any]) -> Any:
    """Run ``fn(saver)`` on a fresh memory saver or a fresh SQLite file."""
    if kind == "memory":
        return asyncio.run(fn(MemorySaver()))
    with tempfile.TemporaryDirectory() as tmp:
        return asyncio.run(fn(SqliteSaver(Path(tmp) / "cp.db")))


# -- 1. resume equivalence -------------------------------------------------------------------------------------------


@PROPERTY
@given(plan=graph_plans(), data=st.data())
def test_resuming_after_failures_gives_the_uninterrupted_run(plan: GraphPlan, data: st.DataObject) -> None:
    clean, clean_probe = asyncio.run(run_clean(plan))
    points = sorted(set(clean_probe.ran))
    fail_at = data.draw(st.sets(st.sampled_from(points), min_size=1, max_size=4), label="fail_at")
    fresh_app_on_resume = data.draw(st.booleans(), label="fresh_app_on_resume")
    kind = data.draw(st.sampled_from(["memory", "sqlite"]), label="saver")
    probe = Probe(fail_at=set(fail_at))

    async def scenario(saver: Saver) -> Trace:
        async with saver:
            app = build(plan, probe).compile(saver=saver)
            failures = 0
            try:
                snap = await app.ainvoke({"log": ["in"]}, thread_id="t")
            except NodeError:
                failures += 1
            for _ in range(50):
                state = await app.aget_state("t")
                if state.status == "done":
                    break
                assert state.status == "failed" and state.errors
                assert all(e.type == "RuntimeError" for e in state.errors)
                if fresh_app_on_resume:  # as if the process restarted: a new app on the same store
                    app = build(plan, probe).compile(saver=saver)
                try:
                    snap = await app.aresume("t")
                except NodeError:
                    failures += 1
            assert snap.status == "done"
            assert failures == len({step for _, step in fail_at})  # one NodeError per super-step that failed
            return await trace(app, "t")

    assert on_saver(kind, scenario) == clean
    finished = Counter(probe.finished)
    assert all(n == 1 for n in finished.values()), "a task with a recorded result ran again"
    assert len(finished) == sum(len(frontier) for _, frontier, _ in clean)  # every planned task finished once
    effects = Counter(probe.effects)
    assert all(n == 1 for n in effects.values()), "a journaled effect ran again"
    assert len(effects) == len(clean_probe.effects)
    assert len(probe.failed) == sum(1 for point in clean_probe.ran if point in fail_at)  # each failed once


# -- 2. forks are pure -----------------------------------------------------------------------------------------------


@PROPERTY
@given(plan=graph_plans(), data=st.data())
def test_forks_never_change_the_source_and_replay_it(plan: GraphPlan, data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(["memory", "sqlite"]), label="saver")
    snapshot_every = data.draw(st.sampled_from([1, 2, 1000]), label="snapshot_every")
    _, clean_probe = asyncio.run(run_clean(plan))
    fail_at = data.draw(st.sets(st.sampled_from(sorted(set(clean_probe.ran))), max_size=1), label="source_fails_at")
    probe = Probe(fail_at=set(fail_at), fail_in="src")  # a failed source has pending writes: they must stay too

    async def scenario(saver: Saver) -> None:
        async with build(plan, probe).compile(saver=saver, snapshot_every=snapshot_every) as app:
            try:
                await app.ainvoke({"log": ["in"]}, thread_id="src")
            except NodeError:
                assert fail_at
            else:
                assert not fail_at
            history = list(reversed(await app.ahistory("src")))
            before = await stored_rows(app.saver, "src")
            source = await trace(app, "src")

            at = data.draw(st.integers(0, len(history) - 1), label="fork_at")
            update = data.draw(
                st.one_of(
                    st.none(),
                    st.builds(lambda k: {"counter": k}, st.integers(-3, 3)),
                    st.builds(lambda xs: {"log": xs}, st.lists(st.sampled_from(["x", "y"]), min_size=1, max_size=2)),
                ),
                label="update",
            )
            point = history[at]
            fork = await app.afork("src", point.checkpoint_id, update=update, new_thread_id="fork")
            assert fork.parent == point.ref and fork.step == point.step + 1
            assert fork.next == point.next
            done = await app.aresume("fork")
            assert done.status == "done"
            forked = await trace(app, "fork")
            await app.adiff(("src", None), ("fork", None))
            assert (await app.aget_state("fork", step=point.step)).values == point.values

            assert await stored_rows(app.saver, "src") == before, "forking changed the source thread's rows"
            assert await trace(app, "src") == source
            if fail_at:  # the source goes on as if nothing had happened
                assert (await app.aresume("src")).status == "done"
                source = await trace(app, "src")
            assert forked[: at + 1] == source[: at + 1]  # the fork's lineage shares the source's ancestors
            if update is None:  # a replay: the same steps as the source from the fork point on, one step later
                assert [(s + 1, f, v) for s, f, v in source[at:]] == forked[at + 1 :]
            elif point.step == 0:  # a fork of the input checkpoint is a fresh run of the updated input
                input = {"log": ["in", *update.get("log", [])], "counter": update.get("counter", 0)}
                fresh = await app.ainvoke(input, thread_id="fresh")
                assert fresh.values == done.values
                assert [(f, v) for _, f, v in await trace(app, "fresh")] == [(f, v) for _, f, v in forked[1:]]

    on_saver(kind, scenario)


# -- 3. interrupts ---------------------------------------------------------------------------------------------------


@PROPERTY
@given(plan=graph_plans(), data=st.data())
def test_resuming_interrupts_gives_the_run_without_them(plan: GraphPlan, data: st.DataObject) -> None:
    names = [name(i) for i in range(len(plan.nodes))]
    before = data.draw(st.sets(st.sampled_from(names)), label="interrupt_before")
    after = data.draw(st.sets(st.sampled_from(names)), label="interrupt_after")
    ask = data.draw(st.frozensets(st.sampled_from(names)), label="ctx_interrupt_in")
    clean, clean_probe = asyncio.run(run_clean(plan, ask))
    probe = Probe(ask=ask)
    app = build(plan, probe).compile(saver=MemorySaver(), interrupt_before=before, interrupt_after=after)
    with app:
        snap = app.invoke({"log": ["in"]}, thread_id="t")
        pauses = questions = 0
        while snap.status == "interrupted":
            pauses += 1
            assert pauses <= 2 * len(clean) + len(clean_probe.ran), "resume did not make progress"
            inside = [i for i in snap.interrupts if i.when == "inside"]
            if inside:  # answer the first open question: the one resume() answers
                questions += 1
                assert inside[0].node in ask
                snap = app.resume("t", f"ok:{inside[0].payload}")
            else:
                reason = snap.interrupts[0]
                assert reason.node in (before if reason.when == "before" else after)
                snap = app.resume("t")
        assert snap.status == "done"
        assert app_trace(app, "t") == clean
    assert questions == sum(1 for node, _ in clean_probe.ran if node in ask)  # each task asked once
    assert all(n == 1 for n in Counter(probe.effects).values()), "a journaled effect ran again"
    if not ask:  # without questions, the pauses are exactly the checkpoints before/after the chosen nodes
        expected = 0
        for k, (_, frontier, _) in enumerate(clean[:-1]):
            just_ran = clean[k - 1][1] if k else ()  # (the input checkpoint follows no node)
            expected += any(n in after for n, _ in just_ran) or any(n in before for n, _ in frontier)
        assert pauses == expected


def test_open_questions_are_listed_in_the_order_resume_answers_them() -> None:
    """The shrunk counterexample of the property above: twelve ``Send`` tasks ask at once. Stored writes come back
    in task-id string order (``.10`` before ``.2``), and the snapshot used to list the questions in that order while
    ``resume(answer)`` answers the first in frontier order: task 2 got the answer meant for task 10."""

    def asker(payload: str, ctx: Context) -> dict[str, Any]:
        return {"log": [f"{payload}={ctx.interrupt(payload)}"]}

    g = StateGraph(S)
    g.add_node("ask", asker)
    g.add_conditional_edges(START, lambda s: [Send("ask", f"q{i}") for i in range(12)])
    g.add_edge("ask", END)
    with g.compile(saver=MemorySaver()) as app:
        snap = app.invoke({}, thread_id="t")
        while snap.status == "interrupted":
            assert [i.payload for i in snap.interrupts] == [i.payload for i in app.get_state("t").interrupts]
            snap = app.resume("t", f"ok:{snap.interrupts[0].payload}")
        assert snap.values.log == [f"q{i}=ok:q{i}" for i in range(12)]


def app_trace(app: App, thread_id: str) -> Trace:
    """:func:`trace` through the sync API."""
    history = reversed(app.history(thread_id))
    return [(s.step, tuple((t.node, t.payload) for t in s.tasks), s.values.model_dump()) for s in history]


# -- 4. time travel --------------------------------------------------------------------------------------------------


class Line(S):
    big: str = ""


def line_graph(steps: int) -> StateGraph:
    """A loop that runs ``steps`` super-steps per turn, changing a varying set of channels each step."""

    def tick(s: Line) -> dict[str, Any]:
        k = s.counter
        out: dict[str, Any] = {"counter": 1, "log": [f"t{k}"] * (k % 3)}
        if k % 2:
            out["seen"] = {f"k{k % 4}": k}
        if k % 5 == 0:
            out["big"] = "b" * (10 * k)  # crosses the inline size limit now and then
        if k % 3 == 1:
            out["last"] = f"t{k}"
        return out

    g = StateGraph(Line)
    g.add_node("tick", tick)
    g.add_edge(START, "tick")
    g.add_conditional_edges("tick", lambda s: "tick" if s.counter % steps else END)
    return g


@settings(max_examples=50, deadline=None)
@given(
    steps=st.integers(1, 12),
    turns=st.integers(1, 3),
    snapshot_every=st.sampled_from([1, 2, 3, 1000]),
    kind=st.sampled_from(["memory", "sqlite"]),
    data=st.data(),
)
def test_every_checkpoint_reads_the_same_by_id_by_step_and_in_history(
    steps: int, turns: int, snapshot_every: int, kind: str, data: st.DataObject
) -> None:
    seen_live: dict[tuple[str, int], dict[str, Any]] = {}

    async def check(app: App, thread_id: str) -> list[dict[str, Any]]:
        history = await app.ahistory(thread_id)
        assert [s.step for s in history] == list(range(history[0].step, -1, -1))
        for snap in history:
            by_id = await app.aget_state(thread_id, snap.checkpoint_id)
            by_step = await app.aget_state(thread_id, step=snap.step)
            assert by_id.checkpoint_id == by_step.checkpoint_id == snap.checkpoint_id
            assert by_id.values == snap.values == by_step.values
            assert snap.values.model_dump() == seen_live[(snap.thread_id, snap.step)]
        return [s.values.model_dump() for s in reversed(history)]

    async def scenario(saver: Saver) -> None:
        async with line_graph(steps).compile(saver=saver, snapshot_every=snapshot_every) as app:
            for turn in range(turns):
                async for snap in app.astream({"log": [f"turn{turn}"]}, thread_id="t", mode="checkpoints"):
                    seen_live[("t", snap.step)] = snap.values.model_dump()
            source = await check(app, "t")
            at = data.draw(st.integers(0, len(source) - 1), label="fork_at")
            fork = await app.afork("t", step=at, update={"log": ["forked"]}, new_thread_id="f", goto="tick")
            seen_live[("f", fork.step)] = fork.values.model_dump()
            async for snap in app.astream(None, thread_id="f", mode="checkpoints", resume=True):
                seen_live[("f", snap.step)] = snap.values.model_dump()
            forked = await check(app, "f")
            assert forked[: at + 1] == source[: at + 1]
            assert forked[at + 1]["log"] == source[at]["log"] + ["forked"]

    on_saver(kind, scenario)
