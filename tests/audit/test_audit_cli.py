"""The audit record of ``graphckpt demo``, read with the CLI: its failure at step 3 (``check``, a simulated timeout)
stays visible in ``history weather`` after the thread was resumed, with its traceback in ``--json``; ``show
--json`` carries the schema version; ``threads`` shows each thread's tokens and a fork's spend is its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "GRAPHCKPT_"))}
    env["COLUMNS"] = "200"
    out = subprocess.run(
        [sys.executable, "-m", "graphckpt", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("audit-demo")
    _cli(cwd, "demo")
    return cwd


def test_the_demo_failure_is_in_history_after_its_resume(demo: Path) -> None:
    text = _cli(demo, "history", "weather").stdout
    assert "check (1 failed attempt)" in text
    assert "failed attempts\n  step 3 check attempt 1 at" in text and "TimeoutError: simulated timeout" in text
    assert "total: 4 model calls" in text
    steps = json.loads(_cli(demo, "history", "weather", "--json").stdout)
    (attempt,) = [a for s in steps for a in s["attempts"]]
    assert (attempt["step"], attempt["node"], attempt["attempt"], attempt["type"]) == (3, "check", 1, "TimeoutError")
    assert attempt["traceback"].startswith("Traceback (most recent call last):")
    assert "TimeoutError: simulated timeout" in attempt["traceback"]
    assert all(s["schema_version"] == 1 for s in steps)
    assert [len(s["calls"]) for s in steps] == [0, 1, 1, 1, 1]  # one journaled model call per node
    shown = json.loads(_cli(demo, "show", "weather", "--json").stdout)
    assert shown["schema_version"] == 1 and shown["attempts"] == []


def test_threads_show_totals_and_a_fork_its_own_spend(demo: Path) -> None:
    threads = {t["thread_id"]: t for t in json.loads(_cli(demo, "threads", "--json").stdout)}
    weather, fork = threads["weather"]["spend"], threads["weather-fahrenheit"]["spend"]
    assert weather["inherited"]["tokens"] == 0 and weather["own"]["calls"] == 4
    steps = json.loads(_cli(demo, "history", "weather", "--json").stdout)
    shared = sum(s["tokens"] for s in steps if s["step"] <= 2)
    assert fork["inherited"]["tokens"] == shared and fork["inherited"]["calls"] == 2
    assert fork["own"]["calls"] == 3 and fork["total"]["tokens"] == fork["own"]["tokens"] + shared
    table = _cli(demo, "threads").stdout
    assert "tokens" in table.splitlines()[0]
    rows = {line.split()[0]: line for line in table.splitlines()[2:] if line.strip()}
    # a fork's row counts its own tokens only: the inherited ones are its parent's row's
    assert f" {weather['own']['tokens']:,} " in rows["weather"]
    assert f" {fork['own']['tokens']:,} " in rows["weather-fahrenheit"]
    assert f"{fork['total']['tokens']:,}" not in rows["weather-fahrenheit"]
    history = _cli(demo, "history", "weather-fahrenheit").stdout
    assert f"inherited: 2 model calls, {shared:,} tokens" in history
