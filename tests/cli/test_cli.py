"""The ``graphckpt`` command, driven as a real subprocess against a SQLite file and a small graph module.

Each test runs ``python -m graphckpt.cli`` with ``GRAPHCKPT_DB`` pointing at a temporary database and the test graph
module (written to ``tmp_path``) on ``PYTHONPATH``. Output is checked as a user (or a script, with ``--json``) sees it:
exit status 0 on success, 1 on runtime errors, 2 on usage errors, and errors as one line without a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from support import REPO
from support.cli import make_cli, ok, user_error
from support.postgres import PG_DSN, require_postgres


@pytest.fixture
def cli(tmp_path: Path) -> Any:
    """A CLI with an empty database of its own."""
    return make_cli(tmp_path)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A CLI whose database holds thread ``t1`` (done), shared by tests that do not write."""
    tmp_path = tmp_path_factory.mktemp("seeded")
    run = make_cli(tmp_path)
    ok(run("run", "cli_graph:app", "--input", '{"request": "weather"}', "--thread", "t1", "-q"))
    (tmp_path / "notes.txt").write_text("this is not a database\n" * 100)
    (tmp_path / "latin1.jsonl").write_bytes('{"kind": "café"}\n'.encode("latin-1"))
    return run


def test_run_then_read_everything(cli: Any) -> None:
    run = ok(cli("run", "cli_graph:app", "--input", '{"request": "weather"}', "--thread", "t1"))
    assert "thread t1: done at step 3" in run.out
    assert "400 tokens" in run.out
    assert "analyze" in run.err and "-> END" in run.err  # one progress line per step, on stderr

    threads = ok(cli("threads", "--json")).json()
    assert [(t["thread_id"], t["status"], t["step"], t["graph"]) for t in threads] == [
        ("t1", "done", 3, "cli_graph:app")
    ]
    assert set(threads[0]) == {
        "thread_id",
        "status",
        "step",
        "head",
        "created_at",
        "updated_at",
        "forked_from",
        "graph",
        "error",
        "lease",
        "spend",
    }
    assert threads[0]["spend"]["total"]["tokens"] == 400 and threads[0]["spend"]["own"]["tokens"] == 400

    history = ok(cli("history", "t1", "--json")).json()
    assert [(h["step"], h["source"], h["ran"], h["next"], h["tokens"]) for h in history] == [
        (0, "input", ["input"], ["analyze"], 0),
        (1, "loop", ["analyze"], ["write"], 120),
        (2, "loop", ["write"], ["review"], 280),
        (3, "loop", ["review"], [], 0),
    ]
    table = ok(cli("history", "t1")).out
    for column in ("step", "checkpoint", "source", "next", "duration", "tokens"):
        assert column in table
    assert history[1]["checkpoint_id"][:12] in table and "END" in table

    shown = ok(cli("show", "t1", "--json")).json()
    assert shown["raw"] is True and shown["status"] == "done"  # the recorded graph is never imported to read
    graph = ["--graph", "cli_graph:app"]  # defaults of fields not yet written need the schema
    decoded = ok(cli("show", "t1", "--json", *graph)).json()
    assert decoded["raw"] is False and decoded["values"] == shown["values"]
    assert shown["values"] == {
        "request": "weather",
        "notes": [{"author": "analyze", "text": "plan for weather"}, {"author": "write", "text": "draft 1"}],
        "verdict": "ok",
        "drafts": 1,
    }
    older = ok(cli("show", "t1", "--checkpoint", history[1]["checkpoint_id"][:20], "--json", *graph)).json()
    assert older["step"] == 1 and older["values"]["drafts"] == 0
    human = ok(cli("show", "t1")).out
    assert "step 3" in human and '"request": "weather"' in human


def test_failure_then_resume(cli: Any) -> None:
    fail = {"CLI_GRAPH_FAIL": "write"}
    failed = cli("run", "cli_graph:graph", "--input", '{"request": "x"}', "--thread", "t2", env=fail)
    user_error(failed, 1, "node 'write' failed", "simulated failure in write", "graphckpt resume t2")
    assert "analyze" in failed.err.splitlines()[1]  # the progress of the steps that did finish
    threads = ok(cli("threads", "--status", "failed", "--json")).json()
    assert [t["thread_id"] for t in threads] == ["t2"] and "simulated failure" in threads[0]["error"]
    assert ok(cli("threads", "--status", "done", "--json")).json() == []
    again = cli("run", "cli_graph:graph", "--input", '{"request": "x"}', "--thread", "t2")
    user_error(again, 1, "is failed", "graphckpt resume t2")

    resumed = ok(cli("resume", "t2", "--json")).json()  # the graph is found in the thread's tags
    assert resumed["status"] == "done" and resumed["run"]["checkpoints"] == 2
    assert resumed["run"]["tokens"] == 280  # analyze is not run again
    assert ok(cli("threads", "--json")).json()[0]["graph"] == "cli_graph:graph"


def test_interrupt_and_answer(cli: Any) -> None:
    ask = {"CLI_GRAPH_ASK": "1"}
    run = ok(cli("run", "cli_graph:make_app", "--input", '{"request": "q"}', "--thread", "t3", "-q", env=ask))
    assert "interrupted" in run.out and '"approve?"' in run.out and "--answer JSON" in run.out
    assert run.err == ""  # --quiet
    user_error(cli("resume", "t3", env=ask), 1, "waiting for an answer", "--answer JSON")
    done = ok(cli("resume", "t3", "--answer", '"approved"', "--json", env=ask)).json()
    assert done["status"] == "done" and done["values"]["verdict"] == "approved"


def test_fork_tree_and_diff(cli: Any) -> None:
    ok(cli("run", "cli_graph:app", "--input", '{"request": "weather"}', "--thread", "t1", "-q"))
    after_write = ok(cli("history", "t1", "--json")).json()[2]["checkpoint_id"]
    fork = ok(cli("fork", "t1", after_write, "--set", 'verdict="fix"', "--new-thread", "alt"))
    assert "-> thread alt" in fork.out and "graphckpt resume alt" in fork.out
    ok(cli("resume", "alt", "-q"))
    forked = ok(cli("fork", "t1", after_write[:20], "--new-thread", "alt2", "--json")).json()
    assert forked["thread_id"] == "alt2" and forked["next"] == ["review"]

    history = ok(cli("history", "alt", "--json")).json()
    assert [h["thread_id"] for h in history] == ["t1"] * 3 + ["alt"] * 4  # the lineage crosses the fork point
    tree = ok(cli("history", "alt", "--tree", "--json")).json()
    assert tree["thread_id"] == "t1"
    branch_point = tree["checkpoints"][2]
    assert branch_point["checkpoint_id"] == after_write
    assert [f["thread_id"] for f in branch_point["forks"]] == ["alt", "alt2"]
    assert [c["step"] for c in branch_point["forks"][0]["checkpoints"]] == [3, 4, 5, 6]
    drawn = ok(cli("history", "alt", "--tree")).out
    assert drawn.index("t1") < drawn.index("alt") < drawn.index("alt2")
    assert "├──" in drawn or "+--" in drawn

    diff = ok(cli("diff", "t1", "alt", "--json")).json()
    assert diff["added"] == {} and diff["removed"] == {}
    assert diff["changed"]["drafts"] == {"before": 1, "after": 2}
    assert diff["changed"]["notes"]["appended"] == [{"author": "write", "text": "draft 2"}]
    assert "~ drafts: 1 -> 2" in ok(cli("diff", "t1", f"alt@{history[-1]['checkpoint_id']}")).out
    same = ok(cli("diff", f"t1@{after_write}", "alt2")).out
    assert "(no differences)" in same


def test_reading_without_the_graph_code(cli: Any, tmp_path: Path) -> None:
    ok(cli("run", "cli_graph:app", "--input", '{"request": "weather"}', "--thread", "t1", "-q"))
    (tmp_path / "cli_graph.py").unlink()  # the code that wrote the database is gone
    assert ok(cli("threads", "--json")).json()[0]["thread_id"] == "t1"
    assert len(ok(cli("history", "t1", "--json")).json()) == 4
    shown = ok(cli("show", "t1", "--json"))
    assert "read without the graph code" in shown.err
    values = shown.json()["values"]
    assert shown.json()["raw"] is True
    assert values["notes"][1] == {"author": "write", "text": "draft 1"}  # a model, as plain data
    assert ok(cli("diff", "t1", "t1", "--json")).json()["changed"] == {}
    user_error(cli("resume", "t1"), 2, "cannot resume thread 't1'", "--graph")


def test_graph_delete_and_help(cli: Any) -> None:
    mermaid = ok(cli("graph", "cli_graph:graph")).out
    assert mermaid.startswith("flowchart TD") and '["analyze"]' in mermaid
    ok(cli("run", "cli_graph:app", "--input", '{"request": "weather"}', "--thread", "gone", "-q"))
    assert ok(cli("delete", "gone", "--yes")).out.strip() == "deleted thread gone"
    assert ok(cli("threads", "--json")).json() == []
    assert "no threads" in ok(cli("threads")).out
    assert "fork" in ok(cli("--help")).out
    assert "--set KEY=JSON" in ok(cli("fork", "--help")).out


def test_export_then_import_into_another_database(cli: Any, tmp_path: Path) -> None:
    ok(cli("run", "cli_graph:app", "--input", '{"request": "weather"}', "--thread", "t1", "-q"))
    assert "exported thread t1" in ok(cli("export", "t1", "-o", "t1.jsonl")).err
    other = ["--db", str(tmp_path / "other.db")]
    assert ok(cli("import", "t1.jsonl", "--json", *other)).json() == {"imported": "t1"}
    copied = ok(cli("show", "t1", "--json", *other)).json()
    assert copied["values"] == ok(cli("show", "t1", "--json")).json()["values"]
    assert ok(cli("export", "t1")).out.splitlines()[0].startswith("{")
    user_error(cli("import", "missing.jsonl"), 2, "cannot read 'missing.jsonl'")
    (tmp_path / "junk.jsonl").write_text("not json\n")
    user_error(cli("import", "junk.jsonl"), 1, "not a graphckpt record")
    (tmp_path / "empty.jsonl").write_text("\n")
    user_error(cli("import", "empty.jsonl"), 1, "not a graphckpt thread export (it is empty)")


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["show", "nope"], 1, "no thread 'nope'"),
        (["history", "nope", "--tree"], 1, "no thread 'nope'"),
        (["show", "t1", "--checkpoint", "ffff"], 1, "no checkpoint 'ffff'"),
        (["fork", "t1", "ffff"], 1, "no checkpoint 'ffff'"),
        (["diff", "@x", "t1"], 2, "THREAD@CHECKPOINT"),
        (["history", "t1", "--limit", "0"], 2, "argument --limit: must be 1 or more, got 0"),
        (["history", "t1", "--limit", "-1"], 2, "argument --limit: must be 1 or more, got -1"),
        (["history", "t1", "--limit", "x"], 2, "argument --limit: 'x' is not an integer"),
        (["run", "cli_graph:app", "--recursion-limit", "0"], 2, "argument --recursion-limit: must be 1 or more"),
        (["resume", "t1", "--recursion-limit", "-1"], 2, "argument --recursion-limit: must be 1 or more"),
        (["import", "latin1.jsonl"], 2, "'latin1.jsonl' is not a graphckpt export: not UTF-8 text (byte 13)"),
        (["run", "cli_graph:app", "--input", "@latin1.jsonl"], 2, "--input: 'latin1.jsonl' is not UTF-8 text"),
        (["threads", "--db", "postgresql://nobody:secretpw@127.0.0.1:9/x?schema=s"], 1, "nobody@127.0.0.1:9/x"),
        (["threads", "--db", "postgresql://u@h/x?schema="], 2, "?schema=NAME"),
        (["run", "cli_graph:app", "--db", "postgresql://u:secretpw%zz@127.0.0.1:9/x"], 1, "percent-encoded"),
        (["threads", "--db", "postgresql://u:secretpw%zz@127.0.0.1:9/x"], 1, "percent-encoded"),
        (["threads", "--db", "postgresql://u:secretpw@[::1:5432/x"], 2, "--db is not a valid postgresql:// URL"),
        (["import", "x.jsonl", "--db", "postgres://u:secretpw@h:port/x"], 2, "--db is not a valid postgresql:// URL"),
        (["--db", "postgresql://u:secretpw@127.0.0.1:9/x", "demo"], 2, "the demo needs a SQLite file, not u@127"),
        (["run", "cli_graph:app", "--input", "{bad"], 2, "--input is not valid JSON"),
        (["resume", "t1", "--answer", "nope"], 2, "--answer is not valid JSON"),
        (["fork", "t1", "x", "--set", "verdict=fix"], 2, "not valid JSON"),
        (["run", "cli_graph:missing"], 2, "has no attribute 'missing'"),
        (["run", "cli_graph:not_a_graph"], 2, "not a StateGraph"),
        (["run", "no_such_module:app"], 2, "cannot import 'no_such_module'"),
        (["run", "no-colon"], 2, "MODULE:ATTR"),
        (["run", "cli_graph:app", "--input", '{"request": 5}'], 1, "'request'"),
        (["show", ""], 2, "argument ID: must not be empty"),
        (["show", "t1", "--checkpoint", ""], 2, "argument --checkpoint: must not be empty"),
        (["run", "cli_graph:app", "--thread", ""], 2, "argument --thread: must not be empty"),
        (["fork", "t1", "", "--new-thread", "b"], 2, "argument CHECKPOINT: must not be empty"),
        (["fork", "t1", "ffff", "--new-thread", ""], 2, "argument --new-thread: must not be empty"),
        (["threads", "--status", "weird"], 2, "invalid choice"),
        (["frobnicate"], 2, "invalid choice"),
        (["threads", "--bogus"], 2, "unrecognized arguments: --bogus"),
        (["--db", "/no/such/dir/x.db", "threads"], 1, "no database"),
        (["--db", "/no/such/dir/x.db", "run", "cli_graph:app", "--input", '{"request": "x"}'], 1, "does not exist"),
        (["threads", "--db", "notes.txt"], 1, "not a database"),
        (["threads", "--db", "postgresql://nobody@127.0.0.1:9/x"], 1, "PostgreSQL"),
    ],
)
def test_user_errors_are_one_line(seeded: Any, args: list[str], code: int, needle: str) -> None:
    result = seeded(*args)
    user_error(result, code, needle)
    assert "secretpw" not in result.err + result.out


def test_no_color_and_plain_tables(cli: Any) -> None:
    ok(cli("run", "cli_graph:app", "--input", '{"request": "weather"}', "--thread", "t1", "-q"))
    green = "\x1b[32m"  # the colour of status "done"
    assert green in ok(cli("threads", env={"FORCE_COLOR": "1"})).out
    plain = ok(cli("threads", env={"NO_COLOR": "1", "FORCE_COLOR": "1"})).out
    assert green not in plain and "t1" in plain and "done" in plain and "│" in plain
    assert "\x1b[" not in ok(cli("history", "t1")).out  # not a terminal: no escape codes


def test_demo_is_loaded_from_the_source_tree(cli: Any) -> None:
    example = REPO / "examples" / "agent_task.py"
    if not example.is_file():
        user_error(cli("demo"), 1, "agent_task.py")
        return
    shown = ok(cli("demo", "--", "--help"))  # arguments after `demo` go to the demo's own parser
    assert "agent_task" in shown.out and "--online" in shown.out


def test_demo_gets_the_global_db(cli: Any, tmp_path: Path) -> None:
    example = REPO / "examples" / "agent_task.py"
    if not example.is_file():
        pytest.skip("the demo ships with the source checkout")
    db = tmp_path / "demo.db"
    shown = ok(cli("--db", str(db), "demo"))
    assert f"database  {db}" in shown.out and db.is_file()
    user_error(cli("--db", "a.db", "demo", "--db", "b.db"), 2, "give the demo's database once")
    ignored = ok(cli("demo", env={"GRAPHCKPT_DB": str(tmp_path / "mine.db")}))  # set by make_cli too
    assert "ignores $GRAPHCKPT_DB" in ignored.err and not (tmp_path / "mine.db").exists()


def test_thread_ids_in_hints_are_shell_quoted(cli: Any) -> None:
    tid = "it's b"
    failed = cli(
        "run", "cli_graph:graph", "--input", '{"request": "x"}', "--thread", tid, env={"CLI_GRAPH_FAIL": "write"}
    )
    user_error(failed, 1, """then run `graphckpt resume 'it'"'"'s b'`""")
    user_error(cli("run", "cli_graph:graph", "--thread", tid), 1, """`graphckpt resume 'it'"'"'s b'`""")
    ask = {"CLI_GRAPH_ASK": "1"}
    ok(cli("run", "cli_graph:make_app", "--input", '{"request": "q"}', "--thread", "a b", "-q", env=ask))
    user_error(cli("resume", "a b", env=ask), 1, "`graphckpt resume 'a b' --answer JSON`")
    waiting = ok(cli("show", "a b")).out
    assert "a b" in waiting
    run = ok(cli("run", "cli_graph:make_app", "--input", '{"request": "q"}', "--thread", "c;d", "-q", env=ask))
    assert "continue with: graphckpt resume 'c;d' --answer JSON" in run.out
    ok(cli("run", "cli_graph:app", "--input", '{"request": "q"}', "--thread", "plain", "-q"))
    first = ok(cli("history", "plain", "--json")).json()[1]["checkpoint_id"]
    fork = ok(cli("fork", "plain", first, "--new-thread", "x y"))
    assert "run it with: graphckpt resume 'x y'" in fork.out


def test_diff_sides_with_at_in_the_thread_id(cli: Any) -> None:
    ok(cli("run", "cli_graph:app", "--input", '{"request": "weather"}', "--thread", "a@b", "-q"))
    ok(cli("run", "cli_graph:app", "--input", '{"request": "rain"}', "--thread", "c", "-q"))
    head = ok(cli("diff", "a@b", "c", "--json")).json()  # the whole spec names a thread: its head
    assert head["a"].startswith("a@b@") and head["changed"]["request"]["before"] == "weather"
    assert ok(cli("diff", "a@b@", "c@", "--json")).json() == head  # a trailing @ is the head too
    first = ok(cli("history", "a@b", "--json")).json()[1]["checkpoint_id"]
    older = ok(
        cli("diff", f"a@b@{first[:20]}", "a@b", "--json", "--graph", "cli_graph:app")
    ).json()  # split at the last @
    assert older["a"] == f"a@b@{first}" and "drafts" in older["changed"]
    user_error(cli("diff", "nope@x", "c"), 1, "no thread 'nope'")


NAN_GRAPH = """
import os
import signal
from graphckpt import END, START, StateGraph
from pydantic import BaseModel


class S(BaseModel):
    score: float = 0.0
    scores: list[float] = []


def score(state):
    value = float(os.environ["SCORE"])
    return {"score": value, "scores": [1.0, value]}


graph = StateGraph(S)
graph.add_node("score", score)
graph.add_edge(START, "score")
graph.add_edge("score", END)
"""


def _strict_json(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_json_output_is_strict_with_nan_and_infinity(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "nan_graph.py").write_text(NAN_GRAPH)
    for tid, value in (("n1", "nan"), ("n2", "nan"), ("i1", "inf")):
        ok(cli("run", "nan_graph:graph", "--thread", tid, "-q", env={"SCORE": value}))
    shown = _strict_json(ok(cli("show", "n1", "--json")).out)
    assert shown["values"] == {"score": None, "scores": [1.0, None]}  # documented: non-finite numbers are null
    assert _strict_json(ok(cli("show", "n1", "--raw", "--json")).out)["values"]["score"] is None
    _strict_json(ok(cli("history", "n1", "--json")).out)
    _strict_json(ok(cli("threads", "--json")).out)
    assert _strict_json(ok(cli("diff", "n1", "n2", "--json")).out)["changed"] == {}  # NaN in both: no change
    assert "(no differences)" in ok(cli("diff", "n1", "n2")).out
    assert _strict_json(ok(cli("diff", "n1", "n2", "--raw", "--json")).out)["changed"] == {}
    changed = _strict_json(ok(cli("diff", "n1", "i1", "--json")).out)["changed"]
    assert changed["score"] == {"before": None, "after": None}
    assert changed["scores"]["common"] == 1 and changed["scores"]["appended"] == [None]
    assert "NaN" in ok(cli("--help")).out or "null" in ok(cli("--help")).out


@pytest.fixture
def pg_url() -> Any:
    """``(url with a password and ?schema=, schema, password)`` for a fresh schema, dropped afterwards."""
    require_postgres()
    import psycopg

    schema = f"gc_cli_{uuid.uuid4().hex[:12]}"
    parts = urlsplit(PG_DSN)
    password = parts.password or "secretpw"  # a trust-auth server ignores it; it must never be printed either way
    netloc = (
        parts.netloc
        if parts.password
        else f"{parts.username or 'postgres'}:{password}@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    )
    url = urlunsplit(parts._replace(netloc=netloc, query=f"schema={schema}"))
    try:
        yield url, schema, password
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _pg_exists(schema: str, table: str | None = None) -> bool:
    import psycopg

    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        if table is None:
            row = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
        else:
            row = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".{table}',)).fetchone()
            row = row if row and row[0] is not None else None
    return row is not None


def test_postgres_reading_creates_nothing_and_never_shows_the_password(cli: Any, pg_url: Any) -> None:
    url, schema, password = pg_url
    for args in (
        ["threads"],
        ["threads", "--status", "failed"],
        ["history", "t1"],
        ["show", "t1"],
        ["diff", "t1", "t2"],
        ["export", "t1"],
        ["delete", "t1"],
        ["resume", "t1"],
    ):
        result = cli("--db", url, *args)
        user_error(result, 1, f"no graphckpt tables in schema '{schema}' of ", "@127.0.0.1:5432/test")
        assert password not in result.err + result.out
    assert not _pg_exists(schema)  # reading made neither the schema nor a table

    run = ok(cli("--db", url, "run", "cli_graph:app", "--input", '{"request": "pg"}', "--thread", "t1", "-q"))
    assert password not in run.out + run.err
    assert _pg_exists(schema, "threads") and _pg_exists(schema, "graphckpt_migrations")  # ?schema= is the schema
    listed = ok(cli("--db", url, "threads", "--json")).json()
    assert [t["thread_id"] for t in listed] == ["t1"]
    empty = ok(cli("--db", url, "threads", "--status", "failed"))
    assert f"no threads with status failed in postgres@127.0.0.1:5432/test (schema {schema})" in empty.out
    assert password not in empty.out + empty.err
    env_db = ok(cli("threads", "--json", env={"GRAPHCKPT_DB": url})).json()
    assert [t["thread_id"] for t in env_db] == ["t1"]


WAITING_GRAPH = """
import sys
from graphckpt import END, START, StateGraph
from pydantic import BaseModel


class S(BaseModel):
    n: int = 0
    calls: list[int] = []


def step(state):
    if state.n == 2:
        sys.stderr.write("node waits for stdin\\n")
        sys.stderr.flush()
        sys.stdin.readline()  # the test lets it finish after the Ctrl-C
    return {"n": state.n + 1, "calls": [*state.calls, state.n]}


graph = StateGraph(S)
graph.add_node("step", step)
graph.add_edge(START, "step")
graph.add_conditional_edges("step", lambda s: "step" if s.n < 50 else END)
"""


def test_first_ctrl_c_stops_after_the_running_task(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "waiting_graph.py").write_text(WAITING_GRAPH)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHCKPT_")}
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update(GRAPHCKPT_DB=str(tmp_path / "runs.db"), PYTHONPATH=os.pathsep.join([str(tmp_path), *inherited]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "graphckpt.cli", "run", "waiting_graph:graph", "--thread", "w"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stderr is not None
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "node waits for stdin" in line:
            proc.send_signal(signal.SIGINT)  # while the node of step 3 runs
        if "stopping after the running task(s)" in line:
            break
    assert "stopping after the running task(s)" in seen[-1], seen
    proc.stdin.write("go on\n")  # the running node finishes
    proc.stdin.flush()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "graphckpt resume w" in err.strip().splitlines()[-1]
    head = ok(cli("show", "w", "--json")).json()
    assert head["status"] == "running" and 3 <= head["step"] < 50  # the running task's step was committed
    assert head["values"]["calls"][:3] == [0, 1, 2]
    resumed = ok(cli("resume", "w", "-q", "--json"))
    assert "node waits for stdin" not in resumed.err  # the node of step 3 is not run again
    assert resumed.json()["values"]["calls"] == list(range(50))


def test_history_tree_takes_limit(cli: Any) -> None:
    ok(cli("run", "cli_graph:app", "--input", '{"request": "weather"}', "--thread", "t1", "-q"))
    first = ok(cli("history", "t1", "--json")).json()[1]["checkpoint_id"]
    ok(cli("fork", "t1", first, "--new-thread", "alt"))
    tree = ok(cli("history", "t1", "--tree", "--limit", "2", "--json")).json()
    assert [c["step"] for c in tree["checkpoints"]] == [2, 3]  # only each thread's newest 2
    assert [f["thread_id"] for f in tree["forks"]] == ["alt"]  # its fork point is not shown: under the thread
    drawn = ok(cli("history", "t1", "--tree", "--limit", "1")).out
    assert "analyze" not in drawn and "review" in drawn and "forked from t1@" in drawn


def test_history_tree_limit_keeps_the_thread_total(cli: Any) -> None:
    ok(cli("run", "cli_graph:app", "--input", '{"request": "weather"}', "--thread", "t1", "-q"))  # 400 tokens
    tree = ok(cli("history", "t1", "--tree", "--limit", "2", "--json")).json()
    assert tree["tokens"] == 400 and tree["hidden"] == 2
    assert sum(c["tokens"] for c in tree["checkpoints"]) == 280  # what the two shown spent
    drawn = ok(cli("history", "t1", "--tree", "--limit", "2")).out.splitlines()[0]
    assert "400 tokens" in drawn and "2 older checkpoints not shown" in drawn


def test_piped_tables_never_cut_ids(cli: Any) -> None:
    tid = "customer-4711-session-" + "0123456789" * 6  # long ids, as scripts make them
    ok(cli("run", "cli_graph:app", "--input", '{"request": "weather"}', "--thread", tid, "-q"))
    first = ok(cli("history", tid, "--json")).json()[1]["checkpoint_id"]
    ok(cli("fork", tid, first, "--new-thread", f"{tid}-alt"))
    assert cli("resume", f"{tid}-alt", "-q", env={"CLI_GRAPH_FAIL": "write"}).code == 1  # an error to show too
    for args in (["threads"], ["history", f"{tid}-alt"], ["history", f"{tid}-alt", "--tree"]):
        out = ok(cli(*args)).out  # stdout is a pipe (COLUMNS=200, as in make_cli)
        assert "…" not in out, out
        assert f"{tid}-alt" in out and first[:12] in out  # ids abbreviated like git, never cut
        assert "cli_graph:app" in out or args[0] == "history"


def test_questions_in_other_scripts_are_shown_as_written(cli: Any) -> None:
    ask = {"CLI_GRAPH_ASK": "1", "CLI_GRAPH_ASK_TEXT": "承認しますか? ☃"}
    run = ok(cli("run", "cli_graph:app", "--input", '{"request": "q"}', "--thread", "t1", "-q", env=ask))
    assert 'asks: {"question": "承認しますか? ☃"}' in run.out
    user_error(cli("resume", "t1", env=ask), 1, 'waiting for an answer to {"question": "承認しますか? ☃"}')


def test_reading_a_sqlite_file_without_the_tables_creates_nothing(cli: Any, tmp_path: Path) -> None:
    import sqlite3

    foreign = tmp_path / "app.db"  # another program's database
    with contextlib.closing(sqlite3.connect(foreign)) as conn:
        conn.execute("CREATE TABLE users (id INTEGER)")
        conn.commit()
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    for db in (foreign, empty):
        for args in (["threads"], ["history", "t1"], ["show", "t1"], ["export", "t1"], ["delete", "t1"]):
            user_error(cli("--db", str(db), *args), 1, f"no graphckpt tables in {str(db)!r}")
    with contextlib.closing(sqlite3.connect(foreign)) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["users"]
    assert empty.stat().st_size == 0
    ok(cli("--db", str(empty), "run", "cli_graph:app", "--input", '{"request": "x"}', "--thread", "t1", "-q"))
    assert ok(cli("--db", str(empty), "threads", "--json")).json()[0]["thread_id"] == "t1"


def test_imported_ancestor_is_listed_partial_and_not_resumed(cli: Any, tmp_path: Path) -> None:
    """After export | import of a fork, its source thread (brought up to the fork point) is ``partial``: not in
    ``threads --status running``, the list a recovery reads, and ``resume`` refuses it."""
    ok(cli("run", "cli_graph:app", "--input", '{"request": "weather"}', "--thread", "t1", "-q"))
    after_write = ok(cli("history", "t1", "--json")).json()[2]["checkpoint_id"]
    ok(cli("fork", "t1", after_write, "--set", 'verdict="fix"', "--new-thread", "alt"))
    ok(cli("export", "alt", "-o", "alt.jsonl"))
    other = ["--db", str(tmp_path / "other.db")]
    ok(cli("import", "alt.jsonl", *other))
    assert [t["thread_id"] for t in ok(cli("threads", "--status", "running", "--json", *other)).json()] == ["alt"]
    assert [t["thread_id"] for t in ok(cli("threads", "--status", "partial", "--json", *other)).json()] == ["t1"]
    assert "partial" in ok(cli("threads", *other)).out
    user_error(cli("resume", "t1", "--graph", "cli_graph:app", *other), 1, "thread 't1' is partial", "fork it")
    assert ok(cli("show", "t1", "--json", *other)).json()["status"] == "partial"
    ok(cli("resume", "alt", "-q", *other))
