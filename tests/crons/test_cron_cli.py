"""``graphckpt cron add/list/delete`` and three ``graphckpt worker`` processes on one SQLite file and on
PostgreSQL: a per-second cron's ticks each run once (consecutive seconds, none doubled) over a measured window, one
worker SIGKILLed in the middle; bad expressions are named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from support import child_env
from support.postgres import PG_DSN, require_postgres
from support.waiting import wait_for

GRAPH = "support.store_graphs:remember"


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "crons.db")
        return
    require_postgres()
    schema = f"gc_crons_{uuid.uuid4().hex[:12]}"
    try:
        yield f"{PG_DSN}?schema={schema}"
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_cron_cli_and_three_workers_one_run_per_tick(tmp_path: Path, db: str) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHCKPT_")}
    env = child_env(base=base)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "graphckpt.cli", *args, "--db", db]
        return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)

    added = cli("cron", "add", GRAPH, "* * * * * *", "--input", '{"fact": "tick"}', "--json")
    assert added.returncode == 0, added.stderr
    cron_id = json.loads(added.stdout)["cron_id"]
    bad = cli("cron", "add", GRAPH, "every day")
    assert bad.returncode == 1 and "not a cron expression" in bad.stderr
    argv = [sys.executable, "-m", "graphckpt.cli", "worker", "--graph", GRAPH, "--db", db, "--lease-seconds", "1"]
    workers = [
        subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]

    def runs_of_cron() -> int:
        listed = cli("cron", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        return int(next(c for c in json.loads(listed.stdout) if c["cron_id"] == cron_id)["runs"])

    try:
        wait_for(lambda: runs_of_cron() >= 3, 60, what="three ticks")
        workers[0].kill()  # one worker dies mid-window
        workers[0].communicate()
        before = runs_of_cron()
        wait_for(lambda: runs_of_cron() >= before + 3, 60, what="three more ticks after the kill")
        deleted = cli("cron", "delete", cron_id)
        assert deleted.returncode == 0 and "deleted" in deleted.stdout

        def done() -> bool:
            listed = json.loads(cli("runs", "--json").stdout)
            mine = [r for r in listed if r["thread_id"].startswith(cron_id)]
            return bool(mine) and all(r["status"] == "done" for r in mine)

        wait_for(done, 60, what="the ticks' runs")
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
            w.communicate()
    mine = [r for r in json.loads(cli("runs", "--json").stdout) if r["thread_id"].startswith(cron_id)]
    ticks = sorted(int(r["thread_id"].rsplit("-", 1)[1]) for r in mine)
    assert len(ticks) == len(set(ticks)), ticks  # none doubled
    assert ticks == list(range(ticks[0], ticks[-1] + 1)), ticks  # none lost, across the kill
    assert len(ticks) >= 6
    assert cli("cron", "list").stdout.strip() == "no crons"
