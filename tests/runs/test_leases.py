"""Leases with real ``graphckpt`` processes (DESIGN.md invariant 9: one live owner), on SQLite and PostgreSQL.

- **The trial**: ``graphckpt run`` holds thread ``live1``; a ``graphckpt resume live1`` started while it runs is
  refused (exit 1, naming the owner's host, pid and worker id and its heartbeat's age); the first process finishes
  normally; every node and every effect ran once.
- **The zombie**: a process is SIGSTOPped inside a node, past its lease; ``threads --status crashed`` lists the
  thread; another process resumes it (a takeover) and finishes it; on SIGCONT the first gets ``LeaseLostError``
  before its next effect runs, writes nothing, and the chain has no duplicate step.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from support.lease_cli import Cli
from support.postgres import PG_DSN, require_postgres
from support.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "leases.db")
        return
    require_postgres()
    schema = f"gc_lease_{uuid.uuid4().hex[:12]}"
    try:
        yield f"{PG_DSN}?schema={schema}"
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_the_trial_a_second_resume_is_refused_while_the_first_runs(tmp_path: Path, db: str) -> None:
    cli = Cli(tmp_path, db)
    first = cli.start("run", "support.lease_graph:graph", "--thread", "live1", "-q")
    try:
        wait_for(lambda: cli.reached() == 1, 30, what="the first process to reach the slow node")
        second = cli.run("resume", "live1", "-q")
        assert second.returncode != 0, second.stderr
        message = second.stderr.strip().splitlines()[-1]
        row = cli.thread("live1")
        lease = row["lease"]
        assert isinstance(lease, dict) and row["status"] == "running"
        assert lease["pid"] == first.pid
        for needle in (f"pid {first.pid}", f"host {lease['host']}", f"worker {lease['worker_id']}", "heartbeat"):
            assert needle in message, message
        cli.gate.touch()
        _out, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, err
    assert cli.effects() == {"first:once": 1, "wait:before": 1, "wait:after": 1, "last:once": 1}
    assert set(cli.pids("wait:after")) == {first.pid}
    row = cli.thread("live1")
    assert (row["status"], row["lease"]) == ("done", None)


def test_the_zombie_stops_at_its_next_write_after_a_takeover(tmp_path: Path, db: str) -> None:
    cli = Cli(tmp_path, db)
    zombie = cli.start("run", "support.lease_graph:graph", "--thread", "z", "-q", "--lease-seconds", "1")
    try:
        wait_for(lambda: cli.reached() == 1, 30, what="the first process to reach the slow node")
        os.kill(zombie.pid, signal.SIGSTOP)
        wait_for(lambda: cli.thread("z")["status"] == "crashed", 10, what="the paused process's lease to expire")
        crashed = cli.run("threads", "--status", "crashed", "--json")
        assert [t["thread_id"] for t in json.loads(crashed.stdout)] == ["z"]
        cli.gate.touch()
        takeover = cli.run("resume", "z", "-q")
        assert takeover.returncode == 0, takeover.stderr
        assert cli.thread("z")["status"] == "done"
        os.kill(zombie.pid, signal.SIGCONT)
        _out, err = zombie.communicate(timeout=60)
    finally:
        if zombie.poll() is None:
            os.kill(zombie.pid, signal.SIGCONT)
            zombie.kill()
            zombie.wait()
    assert zombie.returncode != 0
    assert "was taken over by" in err and "lost its lease" in err and "Traceback" not in err, err
    assert cli.effects() == {"first:once": 1, "wait:before": 1, "wait:after": 1, "last:once": 1}
    assert zombie.pid not in cli.pids("wait:after")
    steps = cli.steps("z")
    assert steps == list(range(len(steps))) and len(steps) == 4  # input, first, wait, last: no duplicate step
