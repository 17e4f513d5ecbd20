"""Concurrency tests (DESIGN.md invariant 3) with real processes, against SQLite and PostgreSQL.

- Two processes resume the same crashed thread at once (both are released by the parent from one barrier, after
  their savers are open, and the crashed run's lease has expired): exactly one finishes the thread, the other gets
  ``ThreadConflictError`` (``ThreadBusyError``, naming the winner); nothing is lost
  (the chain is complete and every step used one result of its effect).
- Twenty threads driven by four processes (five concurrent runs each) on one SQLite file: every checkpoint of every
  thread is there afterwards and the file passes ``PRAGMA integrity_check``.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sqlite3
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from support.crash_child import EXIT_CONFLICT, Child, CrashState, build_graph
from support.postgres import PG_DSN, require_postgres
from support.waiting import await_for, wait_for

from graphckpt import END, START, Context, LeaseLostError, StateGraph
from graphckpt.app import App
from graphckpt.savers.postgres import PostgresSaver
from graphckpt.savers.sqlite import SqliteSaver

pytestmark = pytest.mark.slow

RACE_STEPS = 40
RACE_DELAY = 0.02  # seconds of "work" per step, so that both racers are inside the run at the same time
ROUNDS = 3


@pytest.fixture
def pg_race_schema() -> Iterator[str]:
    require_postgres()
    schema = f"gc_race_{uuid.uuid4().hex[:12]}"
    try:
        yield schema
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _settle(backend: str, application_name: str) -> None:
    """PostgreSQL: wait until a killed client's server backend is gone (its transaction is over)."""
    if backend != "postgres":
        return
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        wait_for(
            lambda: conn.execute(query, (application_name,)).fetchone() == (0,),
            15,
            interval=0.005,
            what=f"the server backend of {application_name} to go away",
        )


def _db_args(backend: str, db: str, schema: str | None, name: str) -> list[str]:
    args = ["--backend", backend, "--db", make_conninfo(db, application_name=name) if backend == "postgres" else db]
    return [*args, "--schema", schema] if schema else args


def _race_round(backend: str, db: str, schema: str | None, app: App, side: Path, thread_id: str) -> dict[str, Any]:
    common = ["--thread", thread_id, "--side", str(side), "--steps", str(RACE_STEPS)]
    if backend == "postgres":
        common.append("--async-node")

    # A thread left `running` by a crash: SIGKILL inside the node of step 4.
    name = f"gc_race_{uuid.uuid4().hex[:8]}"
    first = Child("crash", *_db_args(backend, db, schema, name), *common, env={"CRASH_HOOK": "node", "CRASH_N": "3"})
    try:
        assert first.finish() == -9 and first.out[-1] == "hook node 3", first.describe()
    finally:
        first.stop()
    _settle(backend, name)
    crashed = app.get_state(thread_id)
    assert (crashed.status, crashed.step) in {("running", 3), ("crashed", 3)}  # crashed once its lease expired

    racers = [
        Child("race", *_db_args(backend, db, schema, f"gc_racer_{i}"), *common, "--delay", str(RACE_DELAY), stdin=True)
        for i in range(2)
    ]
    try:
        for r in racers:
            assert r.wait_for("ready") == "ready"
        for r in racers:  # the barrier: both are blocked on stdin with an open saver; release them together
            r.send("go")
        codes = [r.finish() for r in racers]
        outcomes = [r.out[-1] if r.out else "" for r in racers]
    finally:
        for r in racers:
            r.stop()
    assert sorted(codes) == [0, EXIT_CONFLICT], [r.describe() for r in racers]
    winner, loser = (outcomes[0], outcomes[1]) if codes[0] == 0 else (outcomes[1], outcomes[0])
    assert winner == f"ok done {RACE_STEPS}", winner
    assert loser.startswith("conflict ") and thread_id in loser, loser

    resumed_by_third = False
    if app.get_state(thread_id).status != "done":  # not expected: the winner runs to the end
        third = Child("crash", *_db_args(backend, db, schema, "gc_third"), *common)
        try:
            assert third.finish() == 0, third.describe()
        finally:
            third.stop()
        resumed_by_third = True

    # Nothing lost: a complete, linked chain; one journaled result per step, written by an effect call of its key.
    chain = list(reversed(app.history(thread_id)))
    assert [s.step for s in chain] == list(range(RACE_STEPS + 1))
    for prev, cur in itertools.pairwise(chain):
        assert cur.parent is not None and cur.parent.checkpoint_id == prev.checkpoint_id
    final = chain[-1]
    assert final.status == "done" and final.values.n == RACE_STEPS
    assert final.values.results == [f"r{n}" for n in range(RACE_STEPS)]
    by_key: dict[str, list[str]] = defaultdict(list)
    for line in side.read_text().splitlines():
        value, key = line.split("\t")
        if key.startswith(f"{thread_id}:"):
            by_key[key].append(value)
    assert {key: set(values) for key, values in by_key.items()} == {
        f"{thread_id}:{chain[n].checkpoint_id}.0:0": {f"r{n}"} for n in range(RACE_STEPS)
    }
    repeats = sum(len(v) - 1 for v in by_key.values())
    # Only the loser's one in-flight effect call can be repeated (it ran, then its journal write lost the race).
    assert repeats <= 1, by_key
    return {"loser": loser[:70], "repeats": repeats, "third": resumed_by_third}


def _race(backend: str, db: str, schema: str | None, saver: Any, tmp_path: Path) -> None:
    app = build_graph(steps=RACE_STEPS).compile(saver=saver, recursion_limit=RACE_STEPS + 10)
    results = []
    try:
        for i in range(ROUNDS):
            results.append(_race_round(backend, db, schema, app, tmp_path / "effects.tsv", f"race{i}"))
    finally:
        app.close()
    print(f"\nrace {backend}: {results}")


def test_sqlite_two_resumers_one_wins(tmp_path: Path) -> None:
    db = tmp_path / "race.db"
    _race("sqlite", str(db), None, SqliteSaver(db), tmp_path)


@pytest.mark.postgres
def test_postgres_two_resumers_one_wins(tmp_path: Path, pg_race_schema: str) -> None:
    _race("postgres", PG_DSN, pg_race_schema, PostgresSaver(PG_DSN, schema=pg_race_schema), tmp_path)


def test_sqlite_twenty_threads_four_processes(tmp_path: Path) -> None:
    db = str(tmp_path / "many.db")
    steps, processes, per_process = 30, 4, 5
    threads = [[f"t{p}-{i}" for i in range(per_process)] for p in range(processes)]
    children = [
        Child("many", "--backend", "sqlite", "--db", db, "--steps", str(steps), "--threads", *ts, stdin=True)
        for ts in threads
    ]
    started = time.monotonic()
    try:
        for c in children:
            assert c.wait_for("ready") == "ready"
        for c in children:
            c.send("go")
        codes = [c.finish(timeout=120) for c in children]
        assert codes == [0] * processes, [c.describe() for c in children]
        for c, ts in zip(children, threads, strict=True):
            assert sorted(c.out[1:-1]) == sorted(f"finished {t} done {steps}" for t in ts)
    finally:
        for c in children:
            c.stop()
    elapsed = time.monotonic() - started

    conn = sqlite3.connect(db)
    try:
        per_thread = Counter(dict(conn.execute("SELECT thread_id, count(*) FROM checkpoints GROUP BY thread_id")))
        steps_ok = conn.execute(
            "SELECT count(*) FROM threads t WHERE head_step = ? AND status = 'done' AND (SELECT count(DISTINCT step)"
            " FROM checkpoints c WHERE c.thread_id = t.thread_id) = ?",
            (steps, steps + 1),
        ).fetchone()[0]
        leftover_writes = conn.execute("SELECT count(*) FROM writes").fetchone()[0]
        integrity = [row[0] for row in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()
    expected = {t: steps + 1 for ts in threads for t in ts}
    assert dict(per_thread) == expected
    assert steps_ok == processes * per_process
    assert leftover_writes == 0  # each commit deleted its parent's pending writes (the journaled effects)
    assert integrity == ["ok"]

    app = build_graph(steps=steps).compile(saver=SqliteSaver(db))
    try:
        for t in expected:
            chain = list(reversed(app.history(t)))
            assert [s.step for s in chain] == list(range(steps + 1))
            assert chain[-1].values.results == [f"r{n}" for n in range(steps)]
    finally:
        app.close()
    print(f"\n20 threads x {steps + 1} checkpoints by {processes} processes on one SQLite file: {elapsed:.1f}s")
    assert os.path.getsize(db) > 0


async def test_resumer_sees_writes_recorded_before_its_claim(tmp_path: Path) -> None:
    """A second resumer reads the head and its pending writes, then the first owner (still alive, but past its lease:
    a zombie) journals an effect, then the second claims: its claim succeeds (head and owner unchanged, lease
    expired) and it must not run that effect again; the zombie's next write gets LeaseLostError.

    Deterministic, in one process: two apps with their own savers on one SQLite file (as two processes would), the
    interleaving forced with events. Before the fix in ``App._resume`` (writes read again after the claim) the
    effect ran twice."""
    db = tmp_path / "stale.db"
    calls: list[tuple[str, str]] = []
    a_started, go_a, a_journaled, b_read, a_hold = (asyncio.Event() for _ in range(5))

    def graph(who: str) -> StateGraph:
        async def work(s: CrashState, ctx: Context) -> dict[str, Any]:
            if who == "a":
                a_started.set()  # step 0 is committed: the thread exists, owned by A
                await go_a.wait()
            value = await ctx.aeffect(lambda: calls.append((who, ctx.idempotency_key)) or f"by-{who}")
            if who == "a":
                a_journaled.set()  # the effect's result is committed to the journal
                await a_hold.wait()
            return {"n": s.n + 1, "results": [value]}

        g = StateGraph(CrashState)
        g.add_node("work", work)
        g.add_edge(START, "work")
        g.add_edge("work", END)
        return g

    saver_b = SqliteSaver(db)
    real_claim = saver_b.claim

    async def claim_after_a_journaled(*args: Any, **kwargs: Any) -> int:
        b_read.set()  # B has read the thread, its head and the head's pending writes
        await a_journaled.wait()

        async def a_expired() -> bool:  # A's lease expired: A is a zombie now (alive, with no heartbeat)
            record = await saver_b.get_thread("t")
            return record is not None and record.status == "crashed"

        await await_for(a_expired, 30, interval=0.01, what="A's lease to expire")
        return await real_claim(*args, **kwargs)

    async def no_heartbeat(*args: Any, **kwargs: Any) -> None:
        pass  # A stands for a process paused past its lease: its lease expires while it runs

    saver_a = SqliteSaver(db)
    saver_a.heartbeat = no_heartbeat  # type: ignore[method-assign]
    saver_b.claim = claim_after_a_journaled  # type: ignore[method-assign]
    app_a = graph("a").compile(saver=saver_a, lease_seconds=0.2)
    async with app_a, graph("b").compile(saver=saver_b) as app_b:
        run_a = asyncio.ensure_future(app_a.ainvoke({}, thread_id="t"))
        try:
            async with asyncio.timeout(30):
                await a_started.wait()
                run_b = asyncio.ensure_future(app_b.aresume("t"))
                await b_read.wait()
                go_a.set()
                snap = await run_b
                a_hold.set()
                with pytest.raises(LeaseLostError, match="was taken over by"):
                    await run_a
        finally:
            a_hold.set()
            go_a.set()
            if not run_a.done():
                run_a.cancel()
    assert calls == [("a", f"t:{snap.parent.checkpoint_id}.0:0")]  # type: ignore[union-attr]
    assert snap.status == "done" and snap.values.results == ["by-a"]
