"""``keep_last``: every thread keeps its last N checkpoints. The same store is built twice (long threads whose
channels are deltas over snapshots, done, interrupted, failed and crashed threads, forks of forks and subgraphs'
child threads); one copy keeps the last N of each thread. Then each thread's state, the history that is kept, a
fork at its oldest kept checkpoint, a diff from it to the head and a resume are equal on both copies; the fork
points forks need are still there; the removed checkpoints' events are gone; a dry run reports what goes."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from test_prune_equivalence import _pair, build, kind, world_app

from graphckpt import Context, StateGraph, ids
from graphckpt.app import App
from graphckpt.errors import InvalidUpdateError
from graphckpt.records import NO_ANSWER

__all__ = ["kind"]  # the fixture, used by name

KEEP = 2  # the long thread keeps steps 13 and 14, which read the snapshot at step 12


class Loop(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    n: int
    stop: int
    ask: bool


def loop_app(saver: Any) -> App:
    """``step`` runs until ``n == stop``; a channel of appended text (deltas) over snapshots every 4 steps."""

    def step(s: Loop, ctx: Context) -> dict[str, Any]:
        n = s.get("n", 0) + 1
        if s.get("ask") and n == s.get("stop"):
            ctx.interrupt(f"last step {n}?")
        return {"n": n, "log": [f"step {n} " + "x" * 200]}

    def route(s: Loop) -> str:
        return "step" if s.get("n", 0) < s.get("stop", 0) else "__end__"

    g = StateGraph(Loop)
    g.add_node("step", step)
    g.set_entry_point("step")
    g.add_conditional_edges("step", route)
    return g.compile(saver=saver, snapshot_every=4)


async def loops(app: App) -> list[str]:
    await app.ainvoke({"stop": 14}, thread_id="long")
    await app.ainvoke({"stop": 9, "ask": True}, thread_id="asking")  # interrupted at its last step
    await app.afork("long", step=5, update={"stop": 11}, new_thread_id="long-f5")  # a fork point under the cut
    await app.aresume("long-f5")
    await app.afork("long-f5", step=10, update={"stop": 13}, new_thread_id="long-f5-f10")
    await app.aresume("long-f5-f10")
    for turn in range(3):  # a multi-turn thread: each turn's steps on one thread
        await app.ainvoke({"stop": 4 * (turn + 1)}, thread_id="turns")
    return ["long", "asking", "long-f5", "long-f5-f10", "turns"]


async def observe(app: App, thread_id: str, tag: str, keep: int) -> dict[str, Any]:
    """What a user does with a thread's kept checkpoints, as plain data (no ids: they differ between copies)."""
    state = await app.aget_state(thread_id)
    history = (await app.ahistory(thread_id))[:keep]
    oldest = history[-1]
    out: dict[str, Any] = {
        "state": (state.values, state.next, state.status, state.step),
        "history": [(s.step, s.values, s.next) for s in history],
    }
    forked = await app.afork(thread_id, step=oldest.step, new_thread_id=f"{tag}-{thread_id}-kept")
    out["fork"] = (forked.values, forked.next)
    d = await app.adiff((thread_id, oldest.checkpoint_id), (thread_id, None))
    out["diff"] = [(c.path, repr(c)) for c in d.changes()]
    if state.status in ("interrupted", "running", "crashed"):
        out["resumed"] = (await app.aresume(thread_id, "yes" if state.status == "interrupted" else NO_ANSWER)).values
    return out


async def test_keep_last_keeps_what_every_thread_reads(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t0 = ids.now()
    async for pruned_saver, control_saver in _pair(kind, tmp_path):
        long_threads = await loops(loop_app(pruned_saver))
        assert await loops(loop_app(control_saver)) == long_threads
        world = await build(world_app(pruned_saver), 12, monkeypatch, t0)
        assert await build(world_app(control_saver), 12, monkeypatch, t0) == world
        pruned = loop_app(pruned_saver)
        before = {r.thread_id: r.head_step for r in await pruned_saver.list_threads()}
        dry = await pruned.aprune(keep_last=KEEP, dry_run=True)
        assert dry.dry_run and dry.keep_last == KEEP and dry.checkpoints > 0 and dry.bytes > 0
        assert {"long", "turns", "long-f5-f10"} <= set(dry.threads)
        assert "long-f5" not in dry.threads  # its fork at step 10 needs every step it would drop
        usage = await pruned_saver.storage_usage(top=1 << 20)
        assert await pruned_saver.storage_usage(top=1 << 20) == usage  # the dry run removed nothing
        report = await pruned.aprune(keep_last=KEEP)
        assert set(report.threads) == set(dry.threads)
        assert 0 < report.checkpoints <= dry.checkpoints and report.bytes > 0
        after = await pruned_saver.storage_usage(top=1 << 20)
        assert report.bytes == sum(t.bytes for t in usage.threads) - sum(t.bytes for t in after.threads)
        assert {r.thread_id: r.head_step for r in await pruned_saver.list_threads()} == before
        # the fork points a fork needs stay: long's step 5, long-f5's step 10
        assert await pruned_saver.get_checkpoint("long", step=5) is not None
        assert await pruned_saver.get_checkpoint("long", step=7) is None  # above the fork point, under the cut
        assert await pruned_saver.get_checkpoint("turns", step=2) is None
        events = await pruned_saver.read_events([("turns", 0, 1 << 30)], after=(-1, -1), limit=10_000)
        assert events and min(e.step for e in events) >= before["turns"] - KEEP + 1
        again = await pruned.aprune(keep_last=KEEP)
        assert again.threads == [] and again.checkpoints == 0
        for thread_id in long_threads:
            apps = (loop_app(pruned_saver), loop_app(control_saver))
            seen = [await observe(app, thread_id, "k", KEEP) for app in apps]
            assert seen[0] == seen[1], thread_id
        for thread_id in world:
            apps = (world_app(pruned_saver), world_app(control_saver))
            seen = [await observe(app, thread_id, "w", KEEP) for app in apps]
            assert seen[0] == seen[1], thread_id


async def test_keep_last_is_refused_unless_a_positive_count(tmp_path: Path) -> None:
    from graphckpt.savers.sqlite import SqliteSaver

    async with SqliteSaver(tmp_path / "k.db") as saver:
        app = loop_app(saver)
        for bad in (0, -1, True, "3", 2.5):
            with pytest.raises(InvalidUpdateError, match="keep_last"):
                await app.aprune(keep_last=bad)
