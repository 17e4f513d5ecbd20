"""Retention never breaks what it keeps. A store of threads of every kind (done, failed, interrupted, crashed, fresh
forks, forks of forks, each with a subgraph's child thread; half of them last active 40 days ago, some with a TTL)
is built twice, the same way. One copy is pruned by a policy; then every surviving thread is read, resumed, forked
(at its lineage's first step, which may sit in a pruned thread kept as a placeholder) and diffed on both copies, and
the results are equal. The threads removed are exactly those the policy names, and the bytes freed are measured."""

from __future__ import annotations

import contextlib
import operator
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from support.savers import SAVER_KINDS, open_saver

from graphckpt import Context, NodeError, Owner, StateGraph, ids
from graphckpt.app import App
from graphckpt.prune import PruneReport
from graphckpt.records import NO_ANSWER

DAY = 86400.0


class Inner(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


class S(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    n: int
    ask: bool
    fail: bool


def world_app(saver: Any) -> App:
    """a -> sub (a subgraph: one child thread per run) -> b (interrupts when ``ask``, fails when ``fail``)."""

    def c(s: Inner) -> dict[str, Any]:
        return {"log": ["c"]}

    child = StateGraph(Inner)
    child.add_node("c", c)
    child.set_entry_point("c")

    def a(s: S) -> dict[str, Any]:
        return {"log": [f"a{s.get('n', 0)}"]}

    def b(s: S, ctx: Context) -> dict[str, Any]:
        if s.get("fail"):
            raise RuntimeError("b broke")
        answer = ctx.interrupt(f"ok {s.get('n')}?") if s.get("ask") else "-"
        return {"log": [f"b:{answer}"]}

    g = StateGraph(S)
    g.add_node("a", a)
    g.add_node("sub", child.compile(saver=saver))
    g.add_node("b", b)
    g.add_edge("a", "sub")
    g.add_edge("sub", "b")
    g.set_entry_point("a")
    return g.compile(saver=saver)


KINDS = ("done", "failed", "interrupted", "crashed")


async def build(app: App, n: int, monkeypatch: pytest.MonkeyPatch, t0: float) -> dict[str, dict[str, Any]]:
    """``n`` threads: base threads of each kind, forks of them and forks of those forks. Returns what each is."""
    world: dict[str, dict[str, Any]] = {}
    bases = max(4, n // 3)
    for i in range(bases):
        old = i % 2 == 0
        monkeypatch.setattr(ids, "now", lambda old=old: t0 - (40 * DAY if old else 0) + len(world) * 0.01)
        kind = KINDS[i % 4]
        tid = f"base-{i:03d}"
        tags = {"ttl": "30d"} if i % 3 == 0 else None
        with contextlib.suppress(NodeError):  # a failed thread
            inputs = {"n": i, "ask": kind == "interrupted", "fail": kind == "failed"}
            await app.ainvoke(inputs, thread_id=tid, tags=tags)
        if kind == "crashed":  # a process claimed it and died: its lease ran out
            record = await app.saver.get_thread(tid)
            assert record is not None
            await app.saver.claim(
                tid,
                expected_head=record.head_checkpoint_id,
                expected_run_id=record.run_id,
                run_id=ids.new_id(),
                owner=Owner("dead-worker", "elsewhere", 1),
                lease_until=ids.now() - 1,
            )
        world[tid] = {"kind": kind, "old": old, "ttl": tags is not None, "source": None}
    sources = list(world)
    i = 0
    while len(world) < n:
        src = sources[i % len(sources)]
        old = world[src]["old"] and i % 2 == 0
        monkeypatch.setattr(ids, "now", lambda old=old: t0 - (40 * DAY if old else 0) + len(world) * 0.01)
        fid = f"fork-{i:03d}"
        await app.afork(src, step=1, update={"n": 1000 + i, "fail": False, "ask": False}, new_thread_id=fid)
        kind = "running"  # a fresh fork: nobody runs it
        if i % 3 != 2:
            await app.aresume(fid)
            kind = "done"
        world[fid] = {"kind": kind, "old": old, "ttl": False, "source": src}
        sources.append(fid)  # later forks may fork this fork
        i += 1
    monkeypatch.setattr(ids, "now", lambda: t0)
    return world


async def observe(app: App, thread_id: str, tag: str) -> dict[str, Any]:
    """What a user can do with a surviving thread, as plain data (no ids, which differ between copies)."""
    state = await app.aget_state(thread_id)
    history = await app.ahistory(thread_id)
    out: dict[str, Any] = {
        "state": (state.values, state.next, state.status, state.step),
        "history": [(s.step, s.values, s.next) for s in history],
    }
    forked = await app.afork(thread_id, step=0, new_thread_id=f"{tag}-{thread_id}-at0")
    out["fork_at_0"] = forked.values
    d = await app.adiff((thread_id, history[-1].checkpoint_id), (thread_id, None))
    out["diff"] = [(c.path, repr(c)) for c in d.changes()]
    if state.status in ("interrupted", "running", "crashed"):
        out["resumed"] = (await app.aresume(thread_id, "yes" if state.status == "interrupted" else NO_ANSWER)).values
    return out


POLICIES: dict[str, tuple[dict[str, Any], Callable[[dict[str, Any]], bool]]] = {
    "status": ({"status": ["done", "failed"]}, lambda w: w["kind"] in ("done", "failed")),
    "older_than": ({"older_than": "30d"}, lambda w: w["old"]),
    "threads": ({"thread_ids": ["base-000", "base-001", "fork-000", "fork-004"]}, lambda w: False),
    "expired": ({"expired": True}, lambda w: w["ttl"] and w["old"]),
    "old_interrupted": ({"older_than": "7d", "status": ["interrupted", "crashed"]}, lambda w: False),
}


def expected(policy: str, world: dict[str, dict[str, Any]]) -> set[str]:
    if policy == "threads":
        return {"base-000", "base-001", "fork-000", "fork-004"}
    if policy == "old_interrupted":
        return {t for t, w in world.items() if w["old"] and w["kind"] in ("interrupted", "crashed")}
    return {t for t, w in world.items() if POLICIES[policy][1](w)}


@pytest.fixture(params=SAVER_KINDS, ids=SAVER_KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres":
        from support.postgres import require_postgres

        require_postgres()
    return str(request.param)


async def _pair(kind: str, tmp_path: Path) -> AsyncIterator[tuple[Any, Any]]:
    import uuid

    schemas = [f"gc_test_{uuid.uuid4().hex[:12]}" for _ in range(2)] if kind == "postgres" else [None, None]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = await open_saver(kind, tmp_path / "a", schemas[0])
    b = await open_saver(kind, tmp_path / "b", schemas[1])
    try:
        async with a, b:
            yield a, b
    finally:
        if kind == "postgres":
            import psycopg
            from support.postgres import PG_DSN

            async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
                for schema in schemas:
                    await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def check_policy(kind: str, policy: str, n: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = ids.now()
    async for pruned_saver, control_saver in _pair(kind, tmp_path):
        pruned, control = world_app(pruned_saver), world_app(control_saver)
        world = await build(pruned, n, monkeypatch, t0)
        assert await build(control, n, monkeypatch, t0) == world
        want = expected(policy, world)
        assert want, f"policy {policy} selects nothing: the world is too small"
        dry: PruneReport = await pruned.aprune(**POLICIES[policy][0], dry_run=True)
        assert set(dry.threads) == want and dry.dry_run
        before = await pruned_saver.storage_usage(top=1 << 20)
        report = await pruned.aprune(**POLICIES[policy][0])
        after = await pruned_saver.storage_usage(top=1 << 20)
        assert set(report.threads) == want
        assert report.bytes == sum(t.bytes for t in before.threads) - sum(t.bytes for t in after.threads) > 0
        assert report.checkpoints == dry.checkpoints > 0 and report.bytes <= dry.bytes
        survivors = sorted(set(world) - want)
        listed = sorted(r.thread_id for r in await pruned_saver.list_threads() if "|" not in r.thread_id)
        assert listed == survivors
        for gone in want:
            assert await pruned_saver.get_thread(gone) is None
        for thread_id in survivors:
            assert await observe(pruned, thread_id, policy) == await observe(control, thread_id, policy), thread_id


@pytest.mark.parametrize("policy", list(POLICIES))
async def test_prune_keeps_every_survivor_equivalent(
    kind: str, policy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await check_policy(kind, policy, 36, tmp_path, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["status", "older_than"])
async def test_prune_keeps_every_survivor_equivalent_at_200_threads(
    kind: str, policy: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await check_policy(kind, policy, 200, tmp_path, monkeypatch)
