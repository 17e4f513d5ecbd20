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
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from conftest import PG_DSN, require_postgres
from psycopg import sql

pytestmark = pytest.mark.slow
TESTS = Path(__file__).parent


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.02)


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


class Cli:
    """``graphckpt`` processes on one database, with the side file and gate of ``lease_graph``."""

    def __init__(self, tmp_path: Path, db: str) -> None:
        self.db, self.side, self.gate = db, tmp_path / "side.txt", tmp_path / "gate"
        inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHCKPT_")}
        self.env.update(PYTHONPATH=os.pathsep.join([str(TESTS), *inherited]), LEASE_SIDE=str(self.side),
                        LEASE_GATE=str(self.gate), COLUMNS="200")  # fmt: skip
        self.cwd = tmp_path

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "graphckpt.cli", *args, "--db", self.db],
            cwd=self.cwd, env={**self.env, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        proc = self.start(*args)
        out, err = proc.communicate(timeout=60)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def reached(self) -> int:
        """How many times ``wait`` got past its journaled ``wait:before`` (see ``lease_graph``)."""
        path = Path(f"{self.gate}.reached")
        return len(path.read_text().splitlines()) if path.exists() else 0

    def effects(self) -> Counter[str]:
        text = self.side.read_text() if self.side.exists() else ""
        return Counter(line.split("\t")[0] for line in text.splitlines())

    def pids(self, effect: str) -> list[int]:
        text = self.side.read_text() if self.side.exists() else ""
        return [int(p) for e, p in (line.split("\t") for line in text.splitlines()) if e == effect]

    def thread(self, thread_id: str) -> dict[str, object]:
        done = self.run("threads", "--json")
        assert done.returncode == 0, done.stderr
        [row] = [t for t in json.loads(done.stdout) if t["thread_id"] == thread_id]
        return dict(row)

    def steps(self, thread_id: str) -> list[int]:
        done = self.run("history", thread_id, "--json")
        assert done.returncode == 0, done.stderr
        return sorted(int(c["step"]) for c in json.loads(done.stdout))


def test_the_trial_a_second_resume_is_refused_while_the_first_runs(tmp_path: Path, db: str) -> None:
    cli = Cli(tmp_path, db)
    first = cli.start("run", "lease_graph:graph", "--thread", "live1", "-q")
    try:
        wait_for(lambda: cli.reached() == 1, 30, "the first process to reach the slow node")
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
    zombie = cli.start("run", "lease_graph:graph", "--thread", "z", "-q", "--lease-seconds", "1")
    try:
        wait_for(lambda: cli.reached() == 1, 30, "the first process to reach the slow node")
        os.kill(zombie.pid, signal.SIGSTOP)
        wait_for(lambda: cli.thread("z")["status"] == "crashed", 10, "the paused process's lease to expire")
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
