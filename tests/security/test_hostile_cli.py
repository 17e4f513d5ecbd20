"""Reading never runs code named by the data, and tampered rows never crash the reading commands.

A thread records the graph that ran it (``tags.graph``); that value arrives verbatim in an imported file or a
database row. The reading commands (``threads``, ``history``, ``show``, ``diff``, ``export``) must never import or
call it: a canary module in the working directory writes a marker when imported, and ``os:abort`` would kill the
process. Only the commands that run the graph (``resume``, ``fork``) load it, and they say so on stderr.

Tampered rows (metadata with rich markup, counts that are not numbers, huge numbers and times, lone surrogates,
metadata that is not an object) are read by every reading command, human and ``--json``: each either prints with the
value escaped or shown as ``?``/``null`` (exit 0), or fails with one line naming the thread (exit 1); never a
traceback, never a write. Every command runs as a memory- and time-bounded child process.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel
from support.hostile import CANARY_MODULE, dump_sqlite, one_line_error, plant_canary, run_cli

from graphckpt import END, START, StateGraph, append
from graphckpt.savers.sqlite import SqliteSaver


class Note(BaseModel):
    text: str


class S(BaseModel):
    log: Annotated[list[str], append] = []
    notes: Annotated[list[Note], append] = []
    n: int = 0


def _build(path: Path, threads: dict[str, str]) -> None:
    """Threads ``{thread_id: recorded graph reference}`` of a three-step graph, in the SQLite file ``path``."""

    def step(s: S) -> dict[str, Any]:
        return {"log": [f"s{s.n}"], "notes": [Note(text=f"n{s.n}")], "n": s.n + 1}

    g = StateGraph(S)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s.n < 3 else END)
    app = g.compile(saver=SqliteSaver(path))
    try:
        for thread_id, ref in threads.items():
            app.invoke({}, thread_id=thread_id, tags={"graph": ref})
    finally:
        app.close()


READING = [
    ["threads"],
    ["threads", "--json"],
    ["history", "{t}"],
    ["history", "{t}", "--json"],
    ["history", "{t}", "--tree"],
    ["show", "{t}"],
    ["show", "{t}", "--json"],
    ["diff", "{t}", "{t}@", "--json"],
    ["export", "{t}"],
]


@pytest.mark.parametrize("ref", [f"{CANARY_MODULE}:app", "os:abort"])
def test_reading_never_imports_the_recorded_graph(tmp_path: Path, ref: str) -> None:
    db = tmp_path / "runs.db"
    _build(db, {"t1": ref, "t2": ref})
    marker = plant_canary(tmp_path)
    before = dump_sqlite(db)
    for args in READING:
        result = run_cli(tmp_path, *(a.format(t="t1") for a in args), db=str(db))
        assert result.code == 0, (args, result.err)
        assert "Traceback" not in result.err and "loading graph" not in result.err
        assert not marker.exists(), f"{args} imported the graph recorded in the thread"
    assert ref in run_cli(tmp_path, "threads", db=str(db)).out  # shown, as data
    shown = json.loads(run_cli(tmp_path, "show", "t1", "--json", db=str(db)).out)
    assert shown["raw"] is True and shown["values"]["notes"][0] == {"text": "n0"}  # a model as plain data
    assert dump_sqlite(db) == before


def test_resume_and_fork_say_which_recorded_graph_they_load(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    _build(db, {"t1": f"{CANARY_MODULE}:app"})
    marker = plant_canary(tmp_path)
    for args in (["resume", "t1"], ["fork", "t1", "0"]):
        marker.unlink(missing_ok=True)
        result = run_cli(tmp_path, *args, db=str(db))
        lines = result.err.strip().splitlines()
        assert lines[0] == f"graphckpt: loading graph {CANARY_MODULE}:app recorded in thread 't1'", result.err
        assert marker.exists()  # running a thread loads its graph: on purpose, and said first
        assert "Traceback" not in result.err and result.code != 0  # the canary is no graph
    given = run_cli(tmp_path, "resume", "t1", "--graph", "no_such_module:app", db=str(db))
    one_line_error(given, "cannot import 'no_such_module'", code=2)  # --graph: the user's choice, nothing said


# -- tampered rows -----------------------------------------------------------------------------------------------------

TAMPERED = {
    "markup": (
        """UPDATE checkpoints SET metadata = '{"source": "[/x]", "durations_ms": {"[bold]": 1, "[/]": 2},
           "tags": {"graph": "[/red]"}}' WHERE thread_id = 't1';
           UPDATE threads SET metadata = '{"tags": {"graph": "[/x]"}}', error = '[/red] boom' WHERE thread_id = 't1'""",
        ["[/x]", "[bold]"],
    ),
    "wrong-types": (
        """UPDATE checkpoints SET metadata = '{"source": 5, "durations_ms": {"a": "slow", "b": true},
           "usage": {"m": {"prompt_tokens": "many", "completion_tokens": [1]}}, "step": "x"}'
           WHERE thread_id = 't1'""",
        [],
    ),
    "huge-numbers": (
        """UPDATE checkpoints SET metadata = '{"source": "loop", "durations_ms": {"a": 1e308, "b": 1e308,
           "c": 1e400}, "usage": {"m": {"prompt_tokens": 123456789012345678901234567890,
           "completion_tokens": -1e400}}}' WHERE thread_id = 't1'""",
        ["123,456,789,012,345,678,901,234,567,890"],
    ),
    "metadata-not-an-object": (
        """UPDATE checkpoints SET metadata = '[1, 2]' WHERE thread_id = 't1';
           UPDATE threads SET metadata = '"text"' WHERE thread_id = 't1'""",
        [],
    ),
    "metadata-not-json": ("UPDATE checkpoints SET metadata = '{not json' WHERE thread_id = 't1'", []),
    "lone-surrogates": (
        """UPDATE checkpoints SET metadata = '{"source": "\\ud800x", "usage": {"\\udcff": {"prompt_tokens": 1}},
           "tags": {"graph": "\\udfff"}}' WHERE thread_id = 't1'""",
        ["\\ud800x"],
    ),
    "huge-checkpoint-time": ("UPDATE checkpoints SET created_at = 1e300 WHERE thread_id = 't1'", []),
    "nan-checkpoint-time": ("UPDATE checkpoints SET created_at = 'nan' WHERE thread_id = 't1'", []),
    "huge-thread-time": ("UPDATE threads SET updated_at = 1e300 WHERE thread_id = 't1'", []),
}


@pytest.mark.parametrize("case", list(TAMPERED))
def test_tampered_rows_never_crash_a_reading_command(tmp_path: Path, case: str) -> None:
    db = tmp_path / "runs.db"
    _build(db, {"t1": "mod:app", "t2": "mod:app"})
    statements, shown = TAMPERED[case]
    with sqlite3.connect(db) as conn:
        conn.executescript(statements)
    marker = plant_canary(tmp_path)
    before = dump_sqlite(db)
    outputs = []
    for args in READING:
        result = run_cli(tmp_path, *(a.format(t="t1") for a in args), db=str(db))
        assert "Traceback" not in result.err + result.out, (args, result.err)
        if result.code != 0:
            one_line_error(result, "thread 't1'", code=1)  # names the thread it could not read
        elif "--json" in args:
            json.loads(result.out)  # strict JSON, even with lone surrogates (escaped)
        outputs.append(result.out)
    for needle in shown:
        assert any(needle in out for out in outputs), needle
    assert dump_sqlite(db) == before and not marker.exists()


def test_tampered_history_shows_question_marks_not_a_crash(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    _build(db, {"t1": "mod:app"})
    with sqlite3.connect(db) as conn:
        conn.executescript(TAMPERED["metadata-not-an-object"][0] + "; UPDATE checkpoints SET created_at = 1e300")
    table = run_cli(tmp_path, "history", "t1", db=str(db))
    assert table.code == 0 and table.out.count(" ? ") == 4, table.out + table.err  # the source of each step
    rows = json.loads(run_cli(tmp_path, "history", "t1", "--json", db=str(db)).out)
    assert [(r["source"], r["created_at"], r["tokens"]) for r in rows] == [(None, None, 0)] * 4
    shown = json.loads(run_cli(tmp_path, "show", "t1", "--json", db=str(db)).out)
    assert shown["metadata"] is None and shown["created_at"] is None and shown["values"]["n"] == 3


@pytest.mark.parametrize("argv", [[b"show", b"\xff\xfe"], [b"history", b"t\xc3"], [b"diff", b"a", b"\x80@x"]])
def test_non_utf8_arguments_are_one_line(tmp_path: Path, argv: list[bytes]) -> None:
    db = tmp_path / "runs.db"
    _build(db, {"t1": "mod:app"})
    one_line_error(run_cli(tmp_path, *argv, db=str(db)), "is not UTF-8 text", code=2)
