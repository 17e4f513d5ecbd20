"""The CLI in a user's first hour: steps as checkpoint specs, an exit status for "waiting",
``threads --limit``, a confirmed ``delete``, and a module without the named graph saying what it has."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.cli import make_cli, ok, user_error


@pytest.fixture
def cli(tmp_path: Path) -> Any:
    return make_cli(tmp_path)


def test_fork_and_show_take_a_step(cli: Any) -> None:
    ok(cli("run", "cli_graph:app", "--input", '{"request": "weather"}', "--thread", "t1", "-q"))
    history = ok(cli("history", "t1", "--json")).json()
    shown = ok(cli("show", "t1", "--step", "1", "--json")).json()
    assert shown["checkpoint_id"] == history[1]["checkpoint_id"] and shown["step"] == 1
    forked = ok(cli("fork", "t1", "--step", "2", "--new-thread", "alt", "--json")).json()
    assert forked["next"] == ["review"] and forked["step"] == 3
    assert ok(cli("history", "alt", "--json")).json()[2]["checkpoint_id"] == history[2]["checkpoint_id"]
    assert ok(cli("show", "alt", "--step", "1", "--json")).json()["checkpoint_id"] == history[1]["checkpoint_id"]
    user_error(cli("fork", "t1", "1"), 1, "no checkpoint '1'", "pass --step 1")
    user_error(cli("show", "t1", "--checkpoint", "2"), 1, "no checkpoint '2'", "pass --step 2")
    user_error(cli("fork", "t1", "--step", "9"), 1, "no checkpoint of step 9 (steps 0-3)")
    user_error(cli("fork", "t1"), 2, "a CHECKPOINT or --step N")
    user_error(cli("fork", "t1", history[1]["checkpoint_id"], "--step", "1"), 2, "a CHECKPOINT or --step N")
    user_error(cli("show", "t1", "--step", "-1"), 2, "a step is 0 or more")


def test_resume_exits_3_while_the_thread_waits_for_an_answer(cli: Any) -> None:
    ask = {"CLI_GRAPH_ASK": "1"}
    failed = cli(
        "run",
        "cli_graph:app",
        "--input",
        '{"request": "q"}',
        "--thread",
        "t1",
        "-q",
        env={**ask, "CLI_GRAPH_FAIL": "write"},
    )
    assert failed.code == 1
    waiting = cli("resume", "t1", "-q", env=ask)  # write runs, then review asks
    assert waiting.code == 3, waiting.err
    assert "interrupted" in waiting.out and "--answer JSON" in waiting.out and "Traceback" not in waiting.err
    as_json = cli("resume", "t1", "--answer", '"later"', "--json", env={**ask})
    assert as_json.code == 0 and as_json.json()["status"] == "done"  # an answer that finishes: 0
    assert "3 `resume` left the thread interrupted" in ok(cli("--help")).out


def test_threads_limit(cli: Any) -> None:
    for tid in ("a", "b", "c"):
        ok(cli("run", "cli_graph:app", "--input", '{"request": "x"}', "--thread", tid, "-q"))
    assert [t["thread_id"] for t in ok(cli("threads", "--limit", "2", "--json")).json()] == ["c", "b"]
    table = ok(cli("threads", "--limit", "1")).out
    assert "c" in table.split("\n")[2] and len([line for line in table.splitlines() if "done" in line]) == 1
    user_error(cli("threads", "--limit", "0"), 2, "must be 1 or more")


def _delete_on_terminal(tmp_path: Path, answer: str) -> subprocess.CompletedProcess[str]:
    """``graphckpt delete t1`` with a terminal on stdin that has ``answer`` typed into it."""
    master, slave = pty.openpty()
    os.write(master, answer.encode())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLI_GRAPH_", "GRAPHCKPT_"))}
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update(GRAPHCKPT_DB=str(tmp_path / "runs.db"), PYTHONPATH=os.pathsep.join([str(tmp_path), *inherited]))
    try:
        return subprocess.run(
            [sys.executable, "-m", "graphckpt.cli", "delete", "t1"],
            cwd=tmp_path,
            env=env,
            stdin=slave,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.close(slave)
        os.close(master)


def test_delete_asks_on_a_terminal_and_needs_yes_elsewhere(cli: Any, tmp_path: Path) -> None:
    ok(cli("run", "cli_graph:app", "--input", '{"request": "x"}', "--thread", "t1", "-q"))
    refused = cli("delete", "t1")  # stdin is not a terminal
    user_error(refused, 2, "pass --yes")
    assert len(refused.err.strip().splitlines()) == 1
    kept = _delete_on_terminal(tmp_path, "n\n")
    assert kept.returncode == 1 and "delete thread 't1' (done at step 3)? [y/N]" in kept.stderr
    assert "not deleted" in kept.stderr
    assert [t["thread_id"] for t in ok(cli("threads", "--json")).json()] == ["t1"]
    gone = _delete_on_terminal(tmp_path, "y\n")
    assert gone.returncode == 0 and "deleted thread t1" in gone.stdout
    assert ok(cli("threads", "--json")).json() == []
    ok(cli("run", "cli_graph:app", "--input", '{"request": "x"}', "--thread", "t2", "-q"))
    assert ok(cli("delete", "t2", "--yes")).out.strip() == "deleted thread t2"


def test_a_missing_attribute_lists_the_graphs_the_module_has(cli: Any, tmp_path: Path) -> None:
    user_error(
        cli("run", "cli_graph:grpah"),
        2,
        "has no attribute 'grpah'",
        "StateGraph graph",
        "App app",
        "use cli_graph:graph",
    )
    (tmp_path / "empty_mod.py").write_text("x = 1\n")
    user_error(cli("run", "empty_mod:graph"), 2, "it has no StateGraph or App")
