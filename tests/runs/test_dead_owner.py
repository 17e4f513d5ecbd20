"""A dead owner is no owner (DESIGN.md invariant 9), with real ``graphckpt`` processes, real SIGKILL and SIGSTOP, the
default 30 s lease, on SQLite and PostgreSQL.

- ``kill -9`` of ``graphckpt run``: ``threads`` shows the thread ``crashed`` at once, and ``graphckpt resume`` at once
  continues it (no wait for the lease) to the state an uninterrupted run ends with.
- The same through a worker: it recovers the dead process's thread at once.
- An owner on another host (simulated with ``$GRAPHCKPT_HOST``) is live for us: ``resume`` is refused naming it and
  its heartbeat's age; ``resume --take-over --yes`` takes the thread, and the old owner (SIGSTOPped, then SIGCONT)
  writes nothing more: its next write fails and the chain is exactly the new owner's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
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

GRAPH = "support.lease_graph:graph"
EXACT = {"first:once": 1, "wait:before": 1, "wait:after": 1, "last:once": 1}


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "dead.db")
        return
    require_postgres()
    schema = f"gc_dead_{uuid.uuid4().hex[:12]}"
    try:
        yield f"{PG_DSN}?schema={schema}"
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _killed_mid_run(cli: Cli, thread: str) -> int:
    """Start ``graphckpt run`` on ``thread``, SIGKILL it inside ``wait`` (``first``'s checkpoint is committed)."""
    proc = cli.start("run", GRAPH, "--thread", thread, "-q")
    try:
        wait_for(lambda: cli.reached() >= 1, 30, what="the run to reach the slow node")
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return proc.pid


def _values(cli: Cli, thread: str) -> object:
    shown = cli.run("show", thread, "--json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)["values"]


def _uninterrupted(tmp_path: Path, db: str) -> object:
    """The state an uninterrupted run ends with (its own side files, same database)."""
    other = tmp_path / "uninterrupted"
    other.mkdir()
    cli = Cli(other, db)
    cli.gate.touch()
    done = cli.run("run", GRAPH, "--thread", "whole", "-q")
    assert done.returncode == 0, done.stderr
    return _values(cli, "whole")


def test_kill_9_then_resume_at_once_ends_exactly(tmp_path: Path, db: str) -> None:
    cli = Cli(tmp_path, db)
    pid = _killed_mid_run(cli, "k9")
    row = cli.thread("k9")
    assert row["status"] == "crashed", row  # at once: the lease (30 s) has not expired
    lease = row["lease"]
    assert isinstance(lease, dict) and lease["pid"] == pid
    listed = cli.run("threads", "--status", "crashed", "--json")
    assert [t["thread_id"] for t in json.loads(listed.stdout)] == ["k9"]
    cli.gate.touch()
    started = time.monotonic()
    resumed = cli.run("resume", "k9", "-q")
    took = time.monotonic() - started
    assert resumed.returncode == 0, resumed.stderr
    print(f"resume after kill -9 took {took:.2f} s (process start included)")
    assert took < 10.0  # (a shared, loaded machine) the lease alone would refuse it for about 30 s
    assert cli.thread("k9")["status"] == "done"
    assert cli.effects() == EXACT
    assert pid not in cli.pids("wait:after")
    assert _values(cli, "k9") == _uninterrupted(tmp_path, db)


def test_a_worker_recovers_a_killed_run_at_once(tmp_path: Path, db: str) -> None:
    cli = Cli(tmp_path, db)
    pid = _killed_mid_run(cli, "w9")
    cli.gate.touch()
    started = time.monotonic()
    worker = cli.start("worker", "--graph", GRAPH, "--poll", "0.1")
    try:
        wait_for(lambda: cli.thread("w9")["status"] == "done", 15, what="the worker to recover the thread")
        took = time.monotonic() - started
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.communicate()
    print(f"worker recovered the killed run in {took:.2f} s (worker start included)")
    assert took < 15.0  # well before the 30 s lease would have expired
    assert cli.effects() == EXACT and pid not in cli.pids("wait:after")
    assert _values(cli, "w9") == _uninterrupted(tmp_path, db)


def test_another_hosts_live_owner_is_refused_and_taken_over_only_on_request(tmp_path: Path, db: str) -> None:
    cli = Cli(tmp_path, db)
    old = cli.start("run", GRAPH, "--thread", "far", "-q", env={"GRAPHCKPT_HOST": "elsewhere"})
    try:
        wait_for(lambda: cli.reached() == 1, 30, what="the far process to reach the slow node")
        os.kill(old.pid, signal.SIGSTOP)
        row = cli.thread("far")
        assert row["status"] == "running"  # another host's process: we cannot see it die
        refused = cli.run("resume", "far", "-q")
        assert refused.returncode != 0
        for needle in ("host elsewhere", f"pid {old.pid}", "heartbeat", "--take-over"):
            assert needle in refused.stderr, refused.stderr
        unconfirmed = cli.run("resume", "far", "--take-over", "-q")  # not a terminal, no --yes: nothing happens
        assert unconfirmed.returncode != 0 and "--yes" in unconfirmed.stderr, unconfirmed.stderr
        assert cli.thread("far")["status"] == "running"
        cli.gate.touch()
        taken = cli.run("resume", "far", "--take-over", "--yes", "-q")
        assert taken.returncode == 0, taken.stderr
        assert cli.thread("far")["status"] == "done"
        chain = cli.steps("far")
        os.kill(old.pid, signal.SIGCONT)
        _out, err = old.communicate(timeout=60)
    finally:
        if old.poll() is None:
            os.kill(old.pid, signal.SIGCONT)
            old.kill()
            old.wait()
    assert old.returncode != 0
    assert "taken over" in err and "Traceback" not in err, err
    assert cli.steps("far") == chain == [0, 1, 2, 3]  # the old owner added nothing after the take-over
    assert cli.effects() == EXACT and old.pid not in cli.pids("wait:after")


def test_a_second_ctrl_c_gives_the_lease_up(tmp_path: Path, db: str) -> None:
    """On another (simulated) host, so only the release, not the dead-owner check, can free the thread."""
    cli = Cli(tmp_path, db)
    proc = cli.start("run", GRAPH, "--thread", "cc", "-q", env={"GRAPHCKPT_HOST": "elsewhere"})
    try:
        wait_for(lambda: cli.reached() >= 1, 30, what="the run to reach the slow node")
        proc.send_signal(signal.SIGINT)
        wait_for(lambda: "Ctrl-C again" in (proc.stderr.readline() if proc.stderr else ""), 10, what="first Ctrl-C")
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    row = cli.thread("cc")
    assert (row["status"], row["lease"]) == ("running", None)
    cli.gate.touch()
    resumed = cli.run("resume", "cc", "-q")
    assert resumed.returncode == 0, resumed.stderr
    assert cli.effects() == EXACT
