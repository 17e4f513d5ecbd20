"""The store's, the durable waits' and the schedules' examples run as a user runs them (``python examples/...``, a
real subprocess, offline, on a temporary SQLite file) and say what their docstrings promise."""

from __future__ import annotations

import subprocess
import sys

from support import REPO, child_env


def _run(name: str) -> str:
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / name)],
        cwd=REPO,
        env=child_env(REPO),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_memory_store_example() -> None:
    out = _run("memory_store.py").splitlines()
    assert out[0] == "I know 2 thing(s) about ann; closest to your question: My city is Oslo"
    assert sorted(out[1:3]) == ["users/ann fact0: I prefer short answers", "users/ann fact1: My city is Oslo"]
    assert out[3] == "namespaces: [('users', 'ann')]"


def test_durable_wait_example() -> None:
    out = _run("durable_wait.py").splitlines()
    assert sum(1 for line in out if line.startswith("reminder-1 is waiting; wakes at ")) == 2  # the sleep, the deadline
    assert out[-3].startswith("reminder-1 done after ")
    assert out[-2:] == ["  reminder sent: send the report", "  nobody answered in time: escalated to the manager"]


def test_cron_schedule_example() -> None:
    out = _run("cron_schedule.py").splitlines()
    head, ticks = out[0], out[1:]
    assert head.startswith("cron ") and head.endswith(f": {len(ticks)} ticks, each run once") and len(ticks) >= 3
    seconds = [int(line.split(":")[0].rsplit("-", 1)[1]) for line in ticks]
    assert seconds == list(range(seconds[0], seconds[0] + len(seconds)))  # consecutive ticks, none doubled
    assert all(line.endswith(": daily report written") for line in ticks)
