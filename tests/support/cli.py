"""The ``graphckpt`` command as a user runs it, for the CLI tests: a real subprocess in ``tmp_path`` with its own SQLite
file and a small graph module (``cli_graph``: analyze -> write -> review, failing or asking when told through
``CLI_GRAPH_*`` variables), on a pipe (:func:`make_cli`) or on a terminal of a given width (:func:`on_terminal`).

Exit status 0 on success, 1 on runtime errors, 2 on usage errors, and errors as one line without a traceback
(:func:`ok`, :func:`user_error`).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["WIDTHS", "Result", "header_and_rows", "make_cli", "ok", "on_terminal", "user_error"]

GRAPH_MODULE = '''
"""analyze -> write -> review (-> write again while verdict is "fix"); env vars switch on a failure or a question."""
import os
import signal
from typing import Annotated

from pydantic import BaseModel

from graphckpt import END, START, StateGraph, append


class Note(BaseModel):
    author: str
    text: str


class Task(BaseModel):
    request: str
    notes: Annotated[list[Note], append] = []
    verdict: str | None = None
    drafts: int = 0


def analyze(state, ctx):
    ctx.report_usage("offline-model", prompt_tokens=100, completion_tokens=20)
    return {"notes": [Note(author="analyze", text=f"plan for {state.request}")]}


def write(state, ctx):
    if os.environ.get("CLI_GRAPH_FAIL") == "write":
        raise RuntimeError("simulated failure in write")
    ctx.report_usage("offline-model", prompt_tokens=200, completion_tokens=80)
    return {"notes": [Note(author="write", text=f"draft {state.drafts + 1}")], "drafts": state.drafts + 1}


def review(state, ctx):
    if os.environ.get("CLI_GRAPH_ASK"):
        return {"verdict": ctx.interrupt({"question": os.environ.get("CLI_GRAPH_ASK_TEXT", "approve?")})}
    return {"verdict": "fix" if state.verdict == "fix" and state.drafts < 2 else "ok"}


graph = StateGraph(Task)
graph.add_node("analyze", analyze)
graph.add_node("write", write)
graph.add_node("review", review)
graph.add_edge(START, "analyze")
graph.add_edge("analyze", "write")
graph.add_edge("write", "review")
graph.add_conditional_edges("review", lambda s: "write" if s.verdict == "fix" else END)
app = graph.compile(recursion_limit=20)


def make_app():
    return graph.compile()


not_a_graph = 42
'''


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def make_cli(tmp_path: Path) -> Any:
    """``cli(*args, env={...})`` runs ``graphckpt`` in ``tmp_path`` with its own database."""
    (tmp_path / "cli_graph.py").write_text(textwrap.dedent(GRAPH_MODULE))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CLI_GRAPH_", "GRAPHCKPT_"))}
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]  # e.g. a checkout under test
    pythonpath = os.pathsep.join([str(tmp_path), *inherited])
    base.update(GRAPHCKPT_DB=str(tmp_path / "runs.db"), PYTHONPATH=pythonpath, COLUMNS="200")
    base.pop("NO_COLOR", None)

    def run(*args: str, env: dict[str, str] | None = None) -> Result:
        proc = subprocess.run(
            [sys.executable, "-m", "graphckpt.cli", *args],
            cwd=tmp_path,
            env={**base, **(env or {})},
            capture_output=True,
            text=True,
            timeout=60,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run


def ok(result: Result) -> Result:
    assert result.code == 0, result.err
    assert "Traceback" not in result.err
    return result


def user_error(result: Result, code: int, *needles: str) -> None:
    """The expected exit status and one ``graphckpt: error:`` line, last on stderr (after any progress lines of
    ``run``/``resume``), with no traceback."""
    assert result.code == code, (result.out, result.err)
    assert "Traceback" not in result.err
    lines = result.err.strip().splitlines()
    errors = [line for line in lines if line.startswith("graphckpt: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.err
    for needle in needles:
        assert needle in errors[0]


WIDTHS = (60, 80, 120)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def on_terminal(tmp_path: Path, columns: int, *args: str) -> str:
    """What ``graphckpt ARGS`` prints on a terminal ``columns`` wide (escape codes removed)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLI_GRAPH_", "GRAPHCKPT_"))}
    env.update(
        GRAPHCKPT_DB=str(tmp_path / "runs.db"),
        PYTHONPATH=os.pathsep.join([str(tmp_path), *inherited]),
        COLUMNS=str(columns),
        NO_COLOR="1",
        TERM="xterm",
    )
    with subprocess.Popen(
        [sys.executable, "-m", "graphckpt.cli", *args], cwd=tmp_path, env=env, stdout=slave, stderr=subprocess.PIPE
    ) as proc:
        os.close(slave)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        err = proc.stderr.read().decode() if proc.stderr else ""
        assert proc.wait(timeout=60) == 0, err
    os.close(master)
    return ANSI.sub("", b"".join(chunks).decode().replace("\r\n", "\n"))


def header_and_rows(out: str) -> tuple[list[str], list[list[str]]]:
    lines = [line for line in out.splitlines() if line.strip()]
    header = [cell.strip() for cell in lines[0].split("┃")]
    rows = [[cell.strip() for cell in line.split("│")] for line in lines[2:] if "│" in line]  # not the audit lines
    return header, rows
