"""Nothing strands when the store fails, with real processes: a worker's PostgreSQL connections terminated mid-run
(``pg_terminate_backend``), a PostgreSQL restart mid-run (a private cluster: never the shared server), and one SQLite
writer SIGSTOPped while it holds the write lock. Each time the worker processes stay up and every run finishes with the
state of an uninterrupted run (``support.worker_graph``: ``n == STEPS`` and one result per step, in order).

A store error in a run re-queues it (its thread's lease released, after a backoff); one in the worker's own loop
(sweep, claim) is logged and retried after a backoff. Before this, the first ended the run ``failed`` and left its
thread ``running`` with no owner for ever, and the second killed the worker.
"""

from __future__ import annotations

import json
import os
import signal
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
from support.pgcluster import private_cluster
from support.postgres import PG_DSN, require_postgres
from support.waiting import wait_for

pytestmark = pytest.mark.slow
STEPS = 12
WORKER = [sys.executable, "-m", "graphckpt.cli", "worker", "--graph", "support.worker_graph:graph"]


class Fleet:
    """Worker processes of ``support.worker_graph`` on ``db`` (the workers may use ``worker_db``: the same
    database, with connection options of their own)."""

    def __init__(self, tmp_path: Path, db: str, worker_db: str | None = None) -> None:
        self.db, self.worker_db, self.cwd = db, worker_db or db, tmp_path
        self.side = tmp_path / "calls.txt"
        base = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHCKPT_")}
        self.env = child_env(base=base, WORKER_SIDE=str(self.side), WORKER_STEPS=str(STEPS), WORKER_SLEEP="0.1")
        self.workers: list[tuple[subprocess.Popen[str], Path]] = []

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "graphckpt.cli", *args, "--db", self.db],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def start_worker(self) -> subprocess.Popen[str]:
        log = self.cwd / f"worker{len(self.workers)}.log"
        with log.open("w") as err:
            proc = subprocess.Popen(
                [*WORKER, "--db", self.worker_db, "--lease-seconds", "1", "--poll", "0.1"],
                cwd=self.cwd,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=err,
                text=True,
            )
        self.workers.append((proc, log))
        return proc

    def submit(self, *thread_ids: str) -> None:
        for thread_id in thread_ids:
            done = self.cli("submit", "support.worker_graph:graph", "--thread", thread_id)
            assert done.returncode == 0, done.stderr

    def runs(self) -> list[dict[str, object]]:
        done = self.cli("runs", "--json")
        assert done.returncode == 0, done.stderr
        return list(json.loads(done.stdout))

    def calls(self) -> Counter[str]:
        text = self.side.read_text() if self.side.exists() else ""
        return Counter(line.split("\t")[0] for line in text.splitlines())

    def all_up(self) -> bool:
        return all(proc.poll() is None for proc, _ in self.workers)

    def logs(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text()[-3000:]}" for _, log in self.workers)

    def finish(self, thread_ids: list[str], timeout: float = 90) -> None:
        """Every run ``done`` (the workers up meanwhile), and each thread's state exactly an uninterrupted run's."""

        def ended() -> bool:
            assert self.all_up(), self.logs()
            return all(r["status"] in ("done", "failed", "cancelled") for r in self.runs())

        wait_for(ended, timeout, interval=0.3, what="every run to end")
        runs = self.runs()
        assert [(r["thread_id"], r["status"]) for r in runs] == [(t, "done") for t in thread_ids], (runs, self.logs())
        for thread_id in thread_ids:
            state = json.loads(self.cli("show", thread_id, "--json").stdout)
            values = state.get("values", state)
            assert values["n"] == STEPS and values["results"] == [f"r{n}" for n in range(STEPS)], state
        assert self.all_up(), self.logs()

    def stop_all(self) -> None:
        for proc, _ in self.workers:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.fixture
def pg_db() -> Iterator[str]:
    require_postgres()
    schema = f"gc_faults_{uuid.uuid4().hex[:12]}"
    try:
        yield f"{PG_DSN}?schema={schema}"
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_a_worker_whose_postgres_connections_are_terminated_mid_run_stays_up_and_finishes_it(
    tmp_path: Path, pg_db: str
) -> None:
    name = f"gc-worker-{uuid.uuid4().hex[:12]}"  # the worker's connections, and only its, carry this name
    fleet = Fleet(tmp_path, pg_db, f"{pg_db}&application_name={name}")
    threads = ["t1", "t2"]
    fleet.submit(*threads)
    terminated = []
    try:
        fleet.start_worker()
        for at in (3, 12):  # twice, mid-run (calls are 0.1 s apart): each costs the run in flight one attempt
            wait_for(lambda a=at: fleet.calls().total() >= a, 60, what=f"{at} calls")  # type: ignore[misc]
            with psycopg.connect(PG_DSN, autocommit=True) as conn:
                rows = conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s"
                    " AND pid <> pg_backend_pid()",
                    (name,),
                ).fetchall()
            terminated.append(len(rows))
        fleet.finish(threads)
    finally:
        fleet.stop_all()
    assert all(n >= 1 for n in terminated), terminated  # each time, the worker had connections to lose
    calls = fleet.calls()
    assert len(calls) == len(threads) * STEPS
    assert calls.total() - len(calls) <= len(terminated) * len(threads)  # at most the calls in flight repeat


def test_a_worker_outlives_a_postgres_restart_mid_run_and_finishes_it(tmp_path: Path) -> None:
    with private_cluster() as cluster:
        fleet = Fleet(tmp_path, f"{cluster.dsn}?schema=gc")
        threads = ["t1", "t2"]
        fleet.submit(*threads)
        try:
            fleet.start_worker()
            fleet.start_worker()
            wait_for(lambda: fleet.calls().total() >= 4, 60, what="the runs to be under way")
            cluster.restart()
            assert fleet.all_up(), fleet.logs()
            wait_for(lambda: fleet.calls().total() >= 10, 60, what="the runs to go on after the restart")
            cluster.restart()  # twice: the second one finds the connections the first one replaced
            fleet.finish(threads)
        finally:
            fleet.stop_all()
        assert "store error" in fleet.logs() or "re-queued" in fleet.logs()  # the restarts were felt
        assert len(fleet.calls()) == len(threads) * STEPS


LOCKER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")  # the write lock: every other writer of the file waits for it
conn.execute("UPDATE runs SET error = error WHERE 0")
print("locked", flush=True)
deadline = time.monotonic() + 1.0
while time.monotonic() < deadline:  # stopped in here; once continued, it commits and lets go
    time.sleep(0.01)
conn.execute("COMMIT")
print("committed", flush=True)
"""


@pytest.mark.parametrize("then", ["continues", "dies"])
def test_workers_outlive_a_sqlite_writer_stopped_inside_a_write(tmp_path: Path, then: str) -> None:
    """A writer holding the file's write lock is SIGSTOPped for longer than ``busy_timeout`` (5 s): the workers'
    claims, sweeps and commits fail meanwhile, and every worker stays up; once the writer continues (it commits) or
    is SIGKILLed, the runs finish exactly."""
    db = str(tmp_path / "faults.db")
    fleet = Fleet(tmp_path, db)
    threads = ["t1", "t2", "t3"]
    fleet.submit(*threads)
    locker = None
    try:
        fleet.start_worker()
        fleet.start_worker()
        wait_for(lambda: fleet.calls().total() >= 3, 60, what="the runs to be under way")
        locker = subprocess.Popen([sys.executable, "-c", LOCKER, db], stdout=subprocess.PIPE, text=True)
        assert locker.stdout is not None
        assert locker.stdout.readline().strip() == "locked"
        locker.send_signal(signal.SIGSTOP)  # inside its write transaction
        stopped = time.monotonic()
        calls = fleet.calls().total()
        while time.monotonic() - stopped < 7.0:  # past busy_timeout: every write of the workers gives up meanwhile
            assert fleet.all_up(), fleet.logs()
            time.sleep(0.2)
        assert fleet.calls().total() <= calls + 4  # nothing committed meanwhile (a step in flight may call once)
        if then == "continues":
            locker.send_signal(signal.SIGCONT)
            assert locker.communicate(timeout=30)[0].strip() == "committed"
        else:
            locker.kill()
            locker.communicate()
        fleet.finish(threads)
    finally:
        if locker is not None and locker.poll() is None:
            locker.kill()
            locker.communicate()
        fleet.stop_all()
    assert "store error" in fleet.logs()  # the stall was felt, and survived
    assert len(fleet.calls()) == len(threads) * STEPS
