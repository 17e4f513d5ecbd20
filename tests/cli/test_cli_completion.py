"""Shell completion: the real command answers argcomplete's protocol with commands, thread ids and
checkpoint ids from the database on its command line; ``import graphckpt.cli`` does not load argcomplete."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TypedDict

from graphckpt import END, START, StateGraph
from graphckpt.savers.sqlite import SqliteSaver


def complete(line: str, cwd: Path) -> list[str]:
    """What the shell would offer for ``line`` (the cursor at its end)."""
    out = cwd / "completions.txt"
    env = {
        **os.environ,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "graphckpt.cli"], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return sorted(w.strip() for w in out.read_text().split("\n") if w.strip() and not w.startswith("-"))


class Counter(TypedDict, total=False):
    n: int


def _db(tmp_path: Path) -> Path:
    g = StateGraph(Counter)
    g.add_node("a", lambda s: {"n": 1})
    g.add_edge(START, "a")
    g.add_edge("a", END)
    db = tmp_path / "graphckpt.db"
    app = g.compile(saver=SqliteSaver(db))
    for thread in ("alpha", "alps", "beta"):
        app.invoke({}, thread_id=thread)
    app.close()
    return db


def test_commands_thread_ids_and_checkpoint_ids_complete(tmp_path: Path) -> None:
    _db(tmp_path)
    assert {"resume", "history", "threads"} <= set(complete("graphckpt ", tmp_path))
    assert complete("graphckpt resume al", tmp_path) == ["alpha", "alps"]
    assert complete("graphckpt history b", tmp_path) == ["beta"]
    checkpoints = complete("graphckpt fork alpha ", tmp_path)
    assert len(checkpoints) == 2 and all(len(c) == 24 for c in checkpoints)


def test_completion_without_a_database_offers_no_ids_and_creates_nothing(tmp_path: Path) -> None:
    assert complete("graphckpt resume ", tmp_path) == []
    assert not (tmp_path / "graphckpt.db").exists()


def test_start_up_does_not_load_argcomplete() -> None:
    code = "import sys, graphckpt.cli; graphckpt.cli.build_parser(); print('argcomplete' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == (
        "False"
    )
