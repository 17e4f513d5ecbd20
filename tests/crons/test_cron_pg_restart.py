"""A per-second cron fired by three ``graphckpt worker`` processes across PostgreSQL restarts (a private cluster,
never the shared server): one fast restart (every connection dropped) and one crash (``pg_ctl stop -m immediate``)
followed by a few seconds with no database at all. Over the measured window each tick runs exactly once: the thread
ids (``<cron_id>-<tick>``) are consecutive seconds, none missing, none doubled. The ticks that fell while the database
was down are within the missed-tick grace (60 s), so the stated policy runs each of them, late, and skips none."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import child_env
from support.pgcluster import private_cluster
from support.waiting import wait_for

GRAPH = "support.store_graphs:remember"
pytestmark = pytest.mark.slow  # about 25 s
DOWN = 3.0
"""Seconds the database stays down after the crash."""


def _at(iso: object) -> float:
    return dt.datetime.fromisoformat(str(iso)).timestamp() if iso else 0.0


def test_a_per_second_cron_across_postgres_restarts_runs_each_tick_once(tmp_path: Path) -> None:
    with private_cluster() as cluster:
        db = f"{cluster.dsn}?schema=gc"
        base = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHCKPT_")}
        env = child_env(base=base)

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            argv = [sys.executable, "-m", "graphckpt.cli", *args, "--db", db]
            return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)

        added = cli("cron", "add", GRAPH, "* * * * * *", "--input", '{"fact": "tick"}', "--json")
        assert added.returncode == 0, added.stderr
        cron_id = json.loads(added.stdout)["cron_id"]
        argv = [sys.executable, "-m", "graphckpt.cli", "worker", "--graph", GRAPH, "--db", db]
        argv += ["--lease-seconds", "1", "--poll", "0.1"]
        logs = [tmp_path / f"worker{i}.log" for i in range(3)]
        workers = []
        for log in logs:
            with log.open("w") as err:
                workers.append(subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err))

        def cron() -> dict[str, object]:
            listed = cli("cron", "list", "--json")
            assert listed.returncode == 0, listed.stderr
            return dict(next(c for c in json.loads(listed.stdout) if c["cron_id"] == cron_id))

        def runs_of_cron() -> int:
            return int(str(cron()["runs"]))

        def all_up() -> str:
            return "".join(f"--- {log.name}\n{log.read_text()[-2000:]}" for log in logs)

        started = time.monotonic()
        try:
            wait_for(lambda: runs_of_cron() >= 3, 60, what="three ticks")
            cluster.restart()  # fast: every worker's connections are dropped
            assert all(w.poll() is None for w in workers), all_up()
            before = runs_of_cron()
            wait_for(lambda: runs_of_cron() >= before + 3, 60, what="three ticks after the restart")
            cluster.stop()  # a crash: no shutdown checkpoint, open transactions lost
            down = time.time()
            wait_for(lambda: time.time() > down + DOWN, DOWN + 5, what="the database to stay down a while")
            cluster.start()
            up = time.time()
            assert all(w.poll() is None for w in workers), all_up()
            wait_for(lambda: _at(cron()["last_run_at"]) > up + 2, 60, what="ticks after the crash")
            record = cron()
            deleted = cli("cron", "delete", cron_id)
            assert deleted.returncode == 0, deleted.stderr

            def finished() -> bool:
                listed = json.loads(cli("runs", "--json").stdout)
                mine = [r for r in listed if r["thread_id"].startswith(cron_id)]
                return bool(mine) and all(r["status"] == "done" for r in mine)

            wait_for(finished, 60, what="the ticks' runs to finish")
            assert all(w.poll() is None for w in workers), all_up()
        finally:
            for w in workers:
                if w.poll() is None:
                    w.kill()
                w.wait()
        window = time.monotonic() - started
        mine = [r for r in json.loads(cli("runs", "--json").stdout) if r["thread_id"].startswith(cron_id)]
        ticks = sorted(int(r["thread_id"].rsplit("-", 1)[1]) for r in mine)
        assert len(ticks) == len(set(ticks)), ticks  # none doubled
        assert ticks == list(range(ticks[0], ticks[-1] + 1)), ticks  # none lost, across both restarts
        assert any(down <= t <= up for t in ticks), (down, up, ticks)  # the ticks of the downtime ran, late
        assert ticks[-1] > up
        assert record["skipped"] == 0, record  # late, not missed: none skipped
        assert int(str(record["runs"])) <= len(ticks), record  # (ticks may fire between the read and the delete)
        print(f"per-second cron, 3 workers, 2 PostgreSQL restarts: {len(ticks)} ticks once each in {window:.1f} s")
