"""Workers with real processes (``graphckpt worker``): submitted runs are each run by one worker; a worker SIGKILLed
mid-run is taken over once its lease expires (the sweeper re-queues its run, a claim runs it); a rolling restart (a
new worker up before the old one exits on SIGTERM) strands nothing; every thread ends with the state of a
single-process run, and external calls repeat at most once per kill (only a kill between a call and its journal
commit repeats one). SQLite: three processes on one file. PostgreSQL: three processes.

Two kills and a rolling restart on 20 threads x 5 steps; the issue's kill campaign (a random worker SIGKILLed every
2 s, threads of a ``chat_node`` graph on the loopback model) is ``test_campaign.py``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
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

pytestmark = pytest.mark.slow
THREADS, STEPS = 20, 5


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "workers.db")
        return
    require_postgres()
    schema = f"gc_workers_{uuid.uuid4().hex[:12]}"
    try:
        yield f"{PG_DSN}?schema={schema}"
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


class Fleet:
    def __init__(self, tmp_path: Path, db: str) -> None:
        self.db, self.side, self.cwd = db, tmp_path / "calls.txt", tmp_path
        base = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHCKPT_")}
        self.env = child_env(base=base, WORKER_SIDE=str(self.side), WORKER_STEPS=str(STEPS), WORKER_SLEEP="0.05")
        self.workers: list[subprocess.Popen[str]] = []

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "graphckpt.cli", *args, "--db", self.db],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def start_worker(self) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "graphckpt.cli",
                "worker",
                "--graph",
                "support.worker_graph:graph",
                "--db",
                self.db,
                "--concurrency",
                "2",
                "--lease-seconds",
                "1",
                "--poll",
                "0.1",
            ],
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.workers.append(proc)
        return proc

    def runs(self) -> list[dict[str, object]]:
        done = self.cli("runs", "--json")
        assert done.returncode == 0, done.stderr
        return list(json.loads(done.stdout))

    def calls(self) -> Counter[str]:
        text = self.side.read_text() if self.side.exists() else ""
        return Counter(line.split("\t")[0] for line in text.splitlines())

    def stop_all(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


def test_workers_run_every_submitted_thread_once_through_kills_and_a_rolling_restart(tmp_path: Path, db: str) -> None:
    fleet = Fleet(tmp_path, db)
    ids = [f"w{i}" for i in range(THREADS)]
    first = fleet.cli("submit", "support.worker_graph:graph", "--thread", ids[0])
    assert first.returncode == 0 and "queued run" in first.stdout, first.stderr
    for thread_id in ids[1:]:
        assert fleet.cli("submit", "support.worker_graph:graph", "--thread", thread_id).returncode == 0
    busy = fleet.cli("submit", "support.worker_graph:graph", "--thread", ids[0])  # multitask=reject: refused at once
    assert busy.returncode == 1 and "already has run" in busy.stderr, busy.stderr
    kills = 0
    try:
        for _ in range(3):
            fleet.start_worker()
        rng = random.Random(14)
        for _ in range(2):  # SIGKILL a worker mid-run, then start a replacement
            target = (kills + 1) * 12
            wait_for(lambda t=target: fleet.calls().total() >= t, 60, what="workers to make progress")  # type: ignore[misc]
            victim = rng.choice([w for w in fleet.workers if w.poll() is None])
            victim.kill()
            victim.communicate()
            kills += 1
            fleet.start_worker()
        old = next(w for w in fleet.workers if w.poll() is None)  # rolling restart: the new one is up first
        fleet.start_worker()
        old.send_signal(signal.SIGTERM)
        _out, err = old.communicate(timeout=60)
        assert old.returncode == 0 and "worker stopped after" in err, err
        wait_for(lambda: all(r["status"] == "done" for r in fleet.runs()), 120, what="every run to be done")
    finally:
        fleet.stop_all()
    runs = fleet.runs()
    assert sorted(r["thread_id"] for r in runs) == sorted(ids)  # one run per thread: none lost, none duplicated
    threads = {t["thread_id"]: t for t in json.loads(fleet.cli("threads", "--json").stdout)}
    for thread_id in ids:
        assert (threads[thread_id]["status"], threads[thread_id]["step"], threads[thread_id]["lease"]) == (
            "done",
            STEPS,
            None,
        )
        state = json.loads(fleet.cli("show", thread_id, "--json").stdout)
        values = state.get("values", state)
        assert values["n"] == STEPS and values["results"] == [f"r{n}" for n in range(STEPS)], state
    calls = fleet.calls()
    assert len(calls) == THREADS * STEPS  # every step's call was made
    repeats = calls.total() - len(calls)
    assert repeats <= kills * 2, calls  # at most one in-flight call per run a killed worker held (concurrency 2)


def test_a_recursion_limit_submitted_by_the_cli_ends_the_run_in_a_worker_process(tmp_path: Path, db: str) -> None:
    """``graphckpt submit --recursion-limit N`` reaches the worker process that runs it: past N super-steps the run
    ends ``failed`` with the engine's recursion error; a run without one takes the graph's whole loop."""
    fleet = Fleet(tmp_path, db)
    limited = fleet.cli(
        "submit", "support.worker_graph:graph", "--thread", "limited", "--recursion-limit", "2", "--json"
    )
    assert limited.returncode == 0, limited.stderr
    assert fleet.cli("submit", "support.worker_graph:graph", "--thread", "free").returncode == 0
    bad = fleet.cli("submit", "support.worker_graph:graph", "--thread", "bad", "--recursion-limit", "0")
    assert bad.returncode != 0 and "--recursion-limit" in bad.stderr
    try:
        fleet.start_worker()
        wait_for(
            lambda: all(r["status"] not in ("queued", "running") for r in fleet.runs()), 60, what="both runs to end"
        )
    finally:
        fleet.stop_all()
    runs = {str(r["thread_id"]): r for r in fleet.runs()}
    assert runs["limited"]["run_id"] == json.loads(limited.stdout)["run_id"]
    assert runs["limited"]["status"] == "failed" and "recursion_limit=2" in str(runs["limited"]["error"])
    assert str(runs["limited"]["error"]).startswith("RecursionLimitError: ")
    assert runs["free"]["status"] == "done" and "bad" not in runs
