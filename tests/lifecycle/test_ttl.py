"""Time-to-live: a thread whose runs carry the tag ``ttl`` is removed by a sweep once its last activity is older than
that; a thread touched before its deadline is kept. Two sweepers at once (two savers on one store, two workers)
remove each expired thread once; on PostgreSQL only one of them sweeps at a time (an advisory lock)."""

from __future__ import annotations

import asyncio
import operator
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from support.postgres import PG_DSN, require_postgres
from support.savers import open_saver
from support.waiting import await_for

from graphckpt import StateGraph, Worker, ids
from graphckpt.app import App
from graphckpt.errors import InvalidUpdateError
from graphckpt.prune import parse_duration, sweep_expired, ttl_of


class S(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def ttl_app(saver: Any) -> App:
    def step(s: S) -> dict[str, Any]:
        return {"log": ["x"]}

    g = StateGraph(S)
    g.add_node("step", step)
    g.set_entry_point("step")
    return g.compile(saver=saver)


@pytest.fixture(params=["sqlite", "postgres"])
async def two_savers(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Two savers of one store: what two processes see."""
    schema = None
    if request.param == "postgres":
        require_postgres()
        schema = f"gc_test_{uuid.uuid4().hex[:12]}"
    a, b = await open_saver(request.param, tmp_path, schema), await open_saver(request.param, tmp_path, schema)
    try:
        async with a, b:
            yield a, b
    finally:
        if schema is not None:
            import psycopg

            async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def seed(app: App, monkeypatch: pytest.MonkeyPatch) -> tuple[set[str], float]:
    """At t0: ten threads with a one-hour TTL (two in LangGraph's shape; half set by the run tag ``ttl``, half by the
    ``ttl=`` keyword), one without, one touched at t0 + 50 min.
    Returns the ids that expire at t0 + 61 min and t0."""
    t0 = ids.now()
    monkeypatch.setattr(ids, "now", lambda: t0)
    expiring = {f"ttl-{i}" for i in range(10)}
    for tid in sorted(expiring):
        ttl: Any = {"strategy": "delete", "ttl": 60} if tid in ("ttl-0", "ttl-1") else "1h"
        if tid >= "ttl-5":  # the run's ttl= keyword, not the tag
            await app.ainvoke({}, thread_id=tid, ttl=ttl)
        else:
            await app.ainvoke({}, thread_id=tid, tags={"ttl": ttl})
    await app.ainvoke({}, thread_id="forever")
    await app.ainvoke({}, thread_id="touched", ttl=3600)
    monkeypatch.setattr(ids, "now", lambda: t0 + 50 * 60)
    await app.aupdate_state("touched", {"log": ["touched"]})  # activity before its deadline
    monkeypatch.setattr(ids, "now", lambda: t0 + 61 * 60)
    return expiring, t0


async def test_two_sweeps_at_once_remove_each_expired_thread_once(
    two_savers: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = two_savers
    expiring, _ = await seed(ttl_app(a), monkeypatch)
    reports = await asyncio.gather(*(sweep_expired(s) for s in (a, b, a, b)))
    removed = [t for r in reports if r is not None for t in r.threads]
    assert sorted(removed) == sorted(expiring)  # each once, by whichever sweeper got it
    assert sorted(r.thread_id for r in await b.list_threads()) == ["forever", "touched"]
    again = await sweep_expired(a)
    assert again is not None and again.threads == []


async def test_postgres_lets_one_sweeper_at_a_time(pg_schema: str, tmp_path: Path) -> None:
    a, b = await open_saver("postgres", tmp_path, pg_schema), await open_saver("postgres", tmp_path, pg_schema)
    async with a, b:
        async with a.sweep_lock("ttl") as first:
            async with b.sweep_lock("ttl") as second:
                assert (first, second) == (True, False)
            assert await sweep_expired(b) is None  # a still sweeps
        async with b.sweep_lock("ttl") as later:
            assert later  # released at the end of a's block


async def test_two_workers_sweep_expired_threads_and_keep_the_touched_one(
    two_savers: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = two_savers
    expiring, _ = await seed(ttl_app(a), monkeypatch)
    workers = [Worker({"tests:ttl": ttl_app(s)}, poll=0.05, ttl_sweep_every=0.05) for s in (a, b)]
    tasks = [asyncio.ensure_future(w.run()) for w in workers]
    try:

        async def swept() -> bool:
            return sorted(r.thread_id for r in await a.list_threads()) == ["forever", "touched"]

        await await_for(swept, 30, what="the expired threads swept")
    finally:
        for w in workers:
            w.stop()
        await asyncio.gather(*tasks)
    for tid in expiring:
        assert await b.get_thread(tid) is None


def test_ttl_shapes_and_bad_durations() -> None:
    assert ttl_of({"tags": {"ttl": "90m"}}) == 5400
    assert ttl_of({"tags": {"ttl": {"strategy": "delete", "ttl": 2}}}) == 120
    assert ttl_of({"tags": {"ttl": {"strategy": "keep", "ttl": 2}}}) is None
    assert ttl_of({"tags": {"ttl": "soon"}}) is None and ttl_of({}) is None
    assert parse_duration("30d") == 30 * 86400 and parse_duration(5) == 5
    for bad in ("0s", -1, "3 weeks", True, float("inf")):
        with pytest.raises(InvalidUpdateError, match=r"duration|more than 0"):
            parse_duration(bad)
