"""Stopping ``graphckpt run`` on a real terminal (a pty): the first Ctrl-C or SIGTERM, and a second Ctrl-C.

The graph's middle step runs a *sync* tool that blocks until the test releases it. A stop must be acknowledged at
once, even while that tool blocks (the tool runs in a worker thread, so the event loop that handles signals is free);
the running task then finishes, its step is committed, and nothing after it runs. A second Ctrl-C quits at once.
Every path leaves the terminal usable: the live display's hidden cursor is shown again.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.waiting import wait_for

pytestmark = pytest.mark.slow

HIDE_CURSOR, SHOW_CURSOR = b"\x1b[?25l", b"\x1b[?25h"

SLOW_GRAPH = """
import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from graphckpt import END, START, StateGraph
from nodes import tool, tool_node


class S(BaseModel):
    tool_calls: list[dict[str, Any]] = []
    tool_results: list[dict[str, Any]] = []
    after_ran: bool = False


@tool
def slow_lookup(key: str) -> str:
    \"\"\"Blocks (a sync call in time.sleep) until the test creates the release file.\"\"\"
    Path(os.environ["SLOW_STARTED"]).touch()
    release, deadline = Path(os.environ["SLOW_RELEASE"]), time.monotonic() + 120
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return f"value of {key}"


def plan(state: S) -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": "slow_lookup", "arguments": '{"key": "k"}'}}
    return {"tool_calls": [call]}


def after(state: S) -> dict[str, Any]:
    return {"after_ran": True}


graph = StateGraph(S)
graph.add_node("plan", plan)
graph.add_node("tools", tool_node([slow_lookup]))
graph.add_node("after", after)
graph.add_edge(START, "plan")
graph.add_edge("plan", "tools")
graph.add_edge("tools", "after")
graph.add_edge("after", END)
"""


class Terminal:
    """``graphckpt run`` on the slave side of a pty (its controlling terminal); everything it writes is collected."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started, self.release = tmp_path / "started", tmp_path / "release"
        (tmp_path / "slow_graph.py").write_text(SLOW_GRAPH)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHCKPT_", "OPENAI_"))}
        env.pop("NO_COLOR", None)
        inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env.update(
            TERM="xterm-256color",
            COLUMNS="100",
            GRAPHCKPT_DB=str(tmp_path / "runs.db"),
            PYTHONPATH=os.pathsep.join([str(tmp_path), *inherited]),
            SLOW_STARTED=str(self.started),
            SLOW_RELEASE=str(self.release),
        )
        self.env = env
        argv = [sys.executable, "-m", "graphckpt.cli", "run", "slow_graph:graph", "--thread", "s", "--input", "{}"]
        pid, fd = pty.fork()
        if pid == 0:  # the child: the pty is its controlling terminal, so \x03 on it is a SIGINT
            try:
                os.chdir(tmp_path)
                os.execve(sys.executable, argv, env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.output = b""
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.status: int | None = None

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:  # EIO: the child closed its side
                chunk = b""
            with self._changed:
                if not chunk:
                    self._changed.notify_all()
                    return
                self.output += chunk
                self._changed.notify_all()

    def expect(self, text: bytes, timeout: float) -> float:
        """Wait until the output holds ``text``; the seconds it took. Fails with the output after ``timeout``."""
        start = time.monotonic()
        with self._changed:
            found = self._changed.wait_for(lambda: text in self.output or not self._reader.is_alive(), timeout)
            if text not in self.output:
                pytest.fail(f"{text!r} not seen within {timeout}s (found={found}); output:\n{self.text()}")
        return time.monotonic() - start

    def wait_for_file(self, path: Path, timeout: float) -> None:
        with contextlib.suppress(AssertionError):
            wait_for(lambda: path.exists() or not self._reader.is_alive(), timeout, interval=0.01, what=path.name)
        if not path.exists():
            pytest.fail(f"{path.name} did not appear within {timeout}s; output:\n{self.text()}")

    def ctrl_c(self) -> None:
        os.write(self.fd, b"\x03")

    def wait(self, timeout: float) -> int:
        """The exit status (130 for ``os._exit(130)``, 143 ...), waiting at most ``timeout`` seconds."""

        def exited() -> bool:
            if self.status is None:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                self.status = os.waitstatus_to_exitcode(status) if pid else None
            return self.status is not None

        try:
            wait_for(exited, timeout, interval=0.01, what="graphckpt to exit")
        except AssertionError:
            pytest.fail(f"graphckpt did not exit within {timeout}s; output:\n{self.text()}")
        self._reader.join(timeout)
        return self.status

    def text(self) -> str:
        return self.output.decode(errors="replace")

    def close(self) -> None:
        if self.status is None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    term = Terminal(tmp_path)
    try:
        yield term
    finally:
        term.close()


def _steps(db: Path) -> list[int]:
    """The steps of the checkpoints committed in ``db``, read with the stdlib sqlite3 module."""
    with sqlite3.connect(db) as conn:
        return sorted(row[0] for row in conn.execute("SELECT step FROM checkpoints"))


def _show(term: Terminal) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-m", "graphckpt.cli", "show", "s", "--json"],
        cwd=term.tmp_path,
        env=term.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    data: dict[str, object] = json.loads(proc.stdout)
    return data


def _assert_cursor_restored(term: Terminal) -> None:
    assert HIDE_CURSOR in term.output, term.text()  # the live display was on (else the check below proves nothing)
    after_last_hide = term.output[term.output.rindex(HIDE_CURSOR) :]
    assert SHOW_CURSOR in after_last_hide, f"the cursor was left hidden; output:\n{term.text()}"


def _start(term: Terminal) -> None:
    """Run until the sync tool of step 2 blocks, with the live display (cursor hidden) on."""
    term.wait_for_file(term.started, 60)
    term.expect(HIDE_CURSOR, 10)
    assert _steps(term.tmp_path / "runs.db") == [0, 1]  # input and plan; the tool's step is running


@pytest.mark.parametrize(
    ("how", "notice", "stopped", "status"),
    [
        ("ctrl-c", b"Ctrl-C: stopping after the running task(s)", b"stopped after step 2 (resume with:", 130),
        ("sigterm", b"SIGTERM: stopping after the running task(s)", b"stopped after step 2 on SIGTERM (resume", 143),
    ],
)
def test_a_stop_is_acknowledged_at_once_and_stops_after_the_running_task(
    terminal: Terminal, how: str, notice: bytes, stopped: bytes, status: int
) -> None:
    _start(terminal)
    if how == "ctrl-c":
        terminal.ctrl_c()
    else:
        os.kill(terminal.pid, signal.SIGTERM)
    took = terminal.expect(notice, 5)
    assert took < 1.0, f"the stop was acknowledged after {took:.2f}s"
    assert _steps(terminal.tmp_path / "runs.db") == [0, 1]  # the tool still blocks: nothing new was committed
    terminal.release.touch()  # the running task finishes
    terminal.expect(stopped, 60)
    assert terminal.wait(60) == status
    assert b"graphckpt resume s)" in terminal.output
    assert b"error" not in terminal.output and b"interrupted" not in terminal.output, terminal.text()
    assert b"Traceback" not in terminal.output
    assert _steps(terminal.tmp_path / "runs.db") == [0, 1, 2]  # the running task's step, and no step after it
    head = _show(terminal)
    values = head["values"]
    assert isinstance(values, dict)
    assert values["tool_results"] == [{"tool_call_id": "c1", "name": "slow_lookup", "output": "value of k"}]
    assert "after_ran" not in values and head["status"] == "running"  # show reads raw: a field never written is absent
    _assert_cursor_restored(terminal)


def test_a_second_ctrl_c_quits_at_once_and_restores_the_terminal(terminal: Terminal) -> None:
    _start(terminal)
    terminal.ctrl_c()
    terminal.expect(b"Ctrl-C: stopping after the running task(s)", 5)
    terminal.ctrl_c()  # the tool still blocks (never released): quit without it
    terminal.expect(b"quit without waiting for the running task(s)", 5)
    assert terminal.wait(30) == 130
    assert b"error" not in terminal.output and b"Traceback" not in terminal.output, terminal.text()
    _assert_cursor_restored(terminal)
    assert _steps(terminal.tmp_path / "runs.db") == [0, 1]  # the unfinished step was not committed
