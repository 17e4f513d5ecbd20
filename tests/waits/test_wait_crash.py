"""Durable waits across real crashes, with ``graphckpt worker`` processes: a thread sleeping 2 s while every
process is SIGKILLed is woken once by a worker started 10 s later, and finishes; 100 sleeping threads on PostgreSQL
with 3 workers, one (chosen at random) SIGKILLed at a random point while they wake: each wakes exactly once, within a
stated bound."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from support import child_env
from support.postgres import PG_DSN, require_postgres
from support.waiting import wait_for

from graphckpt.savers.base import Saver

GRAPH = "support.sleep_graph:graph"
LATE_BOUND = 5.0
"""Seconds after its wake-up time by which every wait must have fired (the sweep runs every half lease, 0.5 s here;
the rest is the load of a shared 2-core machine)."""


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "waits.db")
        return
    require_postgres()
    schema = f"gc_waits_{uuid.uuid4().hex[:12]}"
    try:
        yield f"{PG_DSN}?schema={schema}"
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _saver(db: str) -> Saver:
    if db.startswith("postgresql"):
        from graphckpt.savers.postgres import PostgresSaver

        dsn, _, schema = db.partition("?schema=")
        return PostgresSaver(dsn, schema=schema)
    from graphckpt.savers.sqlite import SqliteSaver

    return SqliteSaver(db)


class Fleet:
    def __init__(self, tmp_path: Path, db: str) -> None:
        self.db, self.side, self.cwd = db, tmp_path / "side.txt", tmp_path
        base = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHCKPT_")}
        self.env = child_env(base=base, SLEEP_SIDE=str(self.side))
        self.workers: list[subprocess.Popen[str]] = []

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "graphckpt.cli", *args, "--db", self.db]
        return subprocess.run(argv, cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=60)

    def start_worker(self, lease: float = 1.0) -> subprocess.Popen[str]:
        argv = [sys.executable, "-m", "graphckpt.cli", "worker", "--graph", GRAPH, "--db", self.db]
        argv += ["--concurrency", "4", "--lease-seconds", str(lease), "--poll", "0.1"]
        proc = subprocess.Popen(
            argv, cwd=self.cwd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.workers.append(proc)
        return proc

    def lines(self) -> list[tuple[str, str, int]]:
        text = self.side.read_text() if self.side.exists() else ""
        return [(a, b, int(c)) for a, b, c in (line.split("\t") for line in text.splitlines())]

    def kill_all(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


def _read(db: str, thread_ids: list[str]) -> tuple[dict[str, str], list[object], dict[str, list[str]]]:
    async def read() -> tuple[dict[str, str], list[object], dict[str, list[str]]]:
        saver = _saver(db)
        async with saver:
            records = {t: await saver.get_thread(t) for t in thread_ids}
            status = {t: r.status if r is not None else "missing" for t, r in records.items()}
            waits = [w for w in await saver.list_waits() if w.thread_id in status]  # type: ignore[attr-defined]
            runs = {
                t: [
                    f"{r.kind}:{r.status}" + (f":{r.error}" if r.error else "")
                    for r in await saver.list_runs(thread_id=t)
                ]
                for t in thread_ids
            }  # type: ignore[attr-defined]
            return status, waits, runs

    return asyncio.run(read())


RESTART_AFTER = 10.0
"""Seconds between the SIGKILL of every process and the start of a new worker (the issue's acceptance: 10 s)."""


@pytest.mark.slow  # 20-26 s each on the loaded machine: 10 s of it is the acceptance's downtime
def test_a_sleep_survives_the_death_of_every_process(tmp_path: Path, db: str) -> None:
    """A 2 s sleep; every process SIGKILLed while it sleeps; a worker started 10 s later wakes it once and it
    finishes (the wait fired once, one resume run, the work after the sleep done once)."""
    fleet = Fleet(tmp_path, db)
    fleet.env["SLEEP_SECONDS"] = "2"
    try:
        assert fleet.cli("submit", GRAPH, "--thread", "t1").returncode == 0
        fleet.start_worker()
        fleet.start_worker()
        wait_for(lambda: fleet.lines(), 60, what="the node to start")
        wait_for(lambda: _read(db, ["t1"])[0]["t1"] == "interrupted", 60, interval=0.01, what="the sleep")
        fleet.kill_all()  # every process dies while it sleeps
        killed = time.time()
        [wait] = _read(db, ["t1"])[1]
        assert wait.status == "pending"  # type: ignore[attr-defined]
        assert wait.wake_at > killed  # type: ignore[attr-defined]
        listed = fleet.cli("threads", "--status", "waiting", "--json")
        assert listed.returncode == 0, listed.stderr
        [row] = json.loads(listed.stdout)
        assert row["thread_id"] == "t1" and row["status"] == "waiting" and row["wake_at"].startswith("20")
        assert -2.0 < row["wakes_in_s"] <= 2.0
        table = fleet.cli("threads", "--status", "waiting")
        assert table.returncode == 0 and "t1" in table.stdout and "WAKES AT" in table.stdout, table.stderr
        wait_for(lambda: time.time() > killed + RESTART_AFTER, RESTART_AFTER + 5, interval=0.1, what="10 s down")
        assert [w for w in fleet.workers if w.poll() is None] == []  # nobody was up at the wake-up time
        fleet.start_worker()
        restarted = time.time()
        wait_for(lambda: _read(db, ["t1"])[0]["t1"] == "done", 60, what="the late worker to wake it")
        took = time.time() - restarted
    finally:
        fleet.kill_all()
    _, waits, runs = _read(db, ["t1"])
    assert [w.status for w in waits] == ["fired"]  # type: ignore[attr-defined]
    assert waits[0].fired_at >= restarted  # type: ignore[attr-defined]  # by the late worker
    assert runs["t1"] == ["input:interrupted", "resume:done"]  # woken once
    assert Counter(a for a, _, _ in fleet.lines()) == {"before": 1, "after": 1}
    assert took < 30, took


@pytest.mark.slow
def test_a_hundred_sleepers_three_workers_one_killed_each_wakes_once(tmp_path: Path) -> None:
    require_postgres()
    schema = f"gc_waits_{uuid.uuid4().hex[:12]}"
    db = f"{PG_DSN}?schema={schema}"
    fleet = Fleet(tmp_path, db)
    ids = [f"s{i:03d}" for i in range(100)]

    async def submit() -> None:
        from support.sleep_graph import graph

        from graphckpt.savers.postgres import PostgresSaver

        app = graph.compile(saver=PostgresSaver(PG_DSN, schema=schema))
        try:
            for thread_id in ids:
                await app.asubmit({}, thread_id=thread_id, graph=GRAPH)
        finally:
            await app.aclose()

    try:
        fleet.env["SLEEP_SECONDS"] = "3"
        asyncio.run(submit())
        for _ in range(3):
            # 3 s leases: with 1 s, a loaded machine lets a live worker's lease lapse and its input run is retried
            # after the thread already stopped (a run-queue issue outside the waits; see the issue 29 notes)
            fleet.start_worker(lease=3.0)
        wait_for(lambda: sum(1 for a, _, _ in fleet.lines() if a == "after") >= 5, 120, what="the first wake-ups")
        chance = random.Random()
        victim, when = chance.choice(fleet.workers), chance.randint(1, 60)
        print(f"SIGKILL of worker pid {victim.pid} after {when} wake-ups")
        wait_for(lambda: sum(1 for a, _, _ in fleet.lines() if a == "after") >= when, 120, what=f"{when} wake-ups")
        victim.kill()  # mid-wake: its open transaction rolls back, its runs go back to the queue
        victim.communicate()
        wait_for(lambda: all(s == "done" for s in _read(db, ids)[0].values()), 180, what="every thread to finish")
    finally:
        fleet.kill_all()
        status, waits, runs = _read(db, ids)
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    assert all(s == "done" for s in status.values())
    assert sorted(w.thread_id for w in waits if w.status == "fired") == ids  # type: ignore[attr-defined]
    odd = {t: r for t, r in runs.items() if r != ["input:interrupted", "resume:done"]}
    assert not odd, odd  # each woken exactly once
    late = max(w.fired_at - w.wake_at for w in waits)  # type: ignore[attr-defined]
    assert late < LATE_BOUND, late
    after = Counter((t, pid) for a, t, pid in fleet.lines() if a == "after")
    per_thread = Counter(t for t, _ in after)
    for thread_id in ids:  # a repeat only where the killed worker died between its call and the journal entry
        assert per_thread[thread_id] == 1 or (thread_id, victim.pid) in after
    print(f"100 sleepers, 3 workers, one killed: latest wake {late:.2f} s after its time")
