"""A LangGraph run on GraphckptSaver killed with SIGKILL mid-step resumes with ``invoke(None, config)`` exactly as
on LangGraph's own SqliteSaver: the parallel task that had finished is not run again (its write was kept), the one
that was running runs again, and values, next nodes and history agree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import langgraph_kill_child as child
from support.waiting import wait_for

CHILD = Path(child.__file__)


def _kill_then_resume(kind: str, tmp_path: Path) -> list[Any]:
    db, marks = tmp_path / f"{kind}.db", tmp_path / f"{kind}.marks"
    Path(f"{marks}.block").touch()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CHILD.parents[2]), str(CHILD.parents[1])])}
    proc = subprocess.Popen([sys.executable, str(CHILD), kind, str(db), str(marks)], env=env)
    try:
        wait_for(lambda: marks.exists() and {"quick", "slow"} <= set(marks.read_text().split()), 60, what="slow runs")
        saver = child.checkpointer(kind, str(db))
        config = {"configurable": {"thread_id": "killed"}}

        def quick_is_stored() -> bool:
            """Every write of ``quick`` is stored: its ``log`` and its barrier write towards ``join`` (LangGraph's
            SqliteSaver in autocommit mode stores a task's writes one row at a time: a kill between the two rows
            loses the barrier and ``join`` never runs, on LangGraph's side, about one run in 12)."""
            state = saver.get_tuple(config)
            if state is None:
                return False
            tasks = {w[0] for w in state.pending_writes if w[1] == "log" and w[2] == ["quick"]}
            return any(sum(w[0] == task for w in state.pending_writes) >= 2 for task in tasks)

        wait_for(quick_is_stored, 60, what="quick's write stored")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    Path(f"{marks}.block").unlink()
    graph = child.build(saver, marks)
    before = graph.get_state(config)
    out = graph.invoke(None, config)
    history = [(s.values, s.next, s.metadata["source"], s.metadata["step"]) for s in graph.get_state_history(config)]
    if hasattr(saver, "close"):
        saver.close()
    return [before.values, before.next, out, sorted(marks.read_text().split()), history]  # parallel: any order


def test_sigkill_mid_step_then_resume_matches_langgraph(tmp_path: Path) -> None:
    ours = _kill_then_resume("ours", tmp_path)
    theirs = _kill_then_resume("theirs", tmp_path)
    assert ours == theirs
    assert ours[1] == ("slow",)  # quick finished before the kill: only slow is still to run
    assert ours[3].count("quick") == 1 and ours[3].count("slow") == 2  # quick kept, slow ran again
    assert sorted(ours[2]["log"]) == ["join", "quick", "slow", "start"]


pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")
