"""``graphckpt import-langgraph``: a file LangGraph's own SqliteSaver wrote, copied into graphckpt by the CLI (a
subprocess), then read back by LangGraph through GraphckptSaver: the same values and history. A type outside the
allow-list stops the import, naming it; ``--allow MODULE:CLASS`` lets it through."""

from __future__ import annotations

import json
import operator
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver as LangGraphSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from support import child_env
from support.postgres import PG_DSN

from graphckpt.compat.langgraph import GraphckptSaver
from graphckpt.savers.sqlite import SqliteSaver


class State(TypedDict):
    items: Annotated[list[str], operator.add]
    messages: Annotated[list[AnyMessage], add_messages]


def _step(state: State) -> dict[str, Any]:
    n = len(state["items"])
    return {"items": ["a"], "messages": [AIMessage("y" * 500, id=f"ai-{n}")]}


def _graph(checkpointer: Any) -> Any:
    g = StateGraph(State)
    g.add_node("step", _step)
    g.add_edge(START, "step")
    g.add_edge("step", END)
    return g.compile(checkpointer=checkpointer)


def _run(*args: str, cwd: Path, extra: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "graphckpt", *args],
        capture_output=True,
        text=True,
        env=child_env(*([extra] if extra else [])),
        cwd=cwd,
        timeout=180,
    )


def _view(graph: Any, thread: str) -> list[Any]:
    config = {"configurable": {"thread_id": thread}}
    return [
        (
            s.config["configurable"]["checkpoint_id"],
            s.next,
            s.values.get("items"),
            [(m.type, m.content, m.id) for m in s.values.get("messages", [])],
            s.metadata.get("step"),
        )
        for s in graph.get_state_history(config)
    ]


def test_a_langgraph_sqlite_file_is_imported_and_reads_the_same(tmp_path: Path) -> None:
    source = tmp_path / "langgraph.db"
    conn = sqlite3.connect(source, check_same_thread=False)
    graph = _graph(LangGraphSqliteSaver(conn))
    for thread in ("t1", "t2"):
        for i in range(4):
            config = {"configurable": {"thread_id": thread}}
            graph.invoke({"items": [str(i)], "messages": [HumanMessage(f"q{i}", id=f"h-{thread}-{i}")]}, config)
    theirs = {t: _view(graph, t) for t in ("t1", "t2")}
    rows = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    conn.close()

    target = tmp_path / "graphckpt.db"
    done = _run("--db", str(target), "import-langgraph", str(source), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["threads"] == 2 and sorted(report["thread_ids"]) == ["t1", "t2"]
    assert report["checkpoints"] == rows == 2 * 4 * 3
    assert report["bytes_before"] >= source.stat().st_size > 0
    assert report["bytes_after"] > 0

    saver = GraphckptSaver(SqliteSaver(target))
    try:
        ours = _graph(saver)
        for thread in ("t1", "t2"):
            assert _view(ours, thread) == theirs[thread]
        # and the graph continues on the imported thread
        ours.invoke({"items": ["more"]}, {"configurable": {"thread_id": "t1"}})
        assert ours.get_state({"configurable": {"thread_id": "t1"}}).values["items"][-2:] == ["more", "a"]
    finally:
        saver.close()
    shown = _run("--db", str(target), "show", "t2", "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["values"]["items"] == theirs["t2"][0][2]


def test_a_langgraph_postgres_database_is_imported_and_reads_the_same(tmp_path: Path, pg_schema_name: str) -> None:
    """The source written by LangGraph's own PostgresSaver in a fresh schema, read (only) from a postgresql:// URL."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver as LangGraphPostgresSaver
    from psycopg.rows import dict_row

    with psycopg.connect(PG_DSN, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{pg_schema_name}"')
    options = f"-c search_path={pg_schema_name}"
    with psycopg.connect(PG_DSN, autocommit=True, prepare_threshold=0, row_factory=dict_row, options=options) as conn:
        lg = LangGraphPostgresSaver(conn)
        lg.setup()
        graph = _graph(lg)
        for thread in ("p1", "p2"):
            for i in range(3):
                config = {"configurable": {"thread_id": thread}}
                graph.invoke({"items": [str(i)], "messages": [HumanMessage(f"q{i}", id=f"h-{thread}-{i}")]}, config)
        theirs = {t: _view(graph, t) for t in ("p1", "p2")}
        rows = conn.execute("SELECT count(*) AS n FROM checkpoints").fetchone()["n"]  # type: ignore[index]

    target = tmp_path / "graphckpt.db"
    source = f"{PG_DSN}?schema={pg_schema_name}"
    done = _run("--db", str(target), "import-langgraph", source, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert sorted(report["thread_ids"]) == ["p1", "p2"] and report["checkpoints"] == rows == 2 * 3 * 3
    assert report["bytes_before"] > report["bytes_after"] > 0
    saver = GraphckptSaver(SqliteSaver(target))
    try:
        ours = _graph(saver)
        for thread in ("p1", "p2"):
            assert _view(ours, thread) == theirs[thread]
    finally:
        saver.close()
    # a schema without LangGraph's tables is named, not a stack trace
    missing = _run("--db", str(target), "import-langgraph", f"{PG_DSN}?schema=nowhere_{pg_schema_name}", cwd=tmp_path)
    assert missing.returncode != 0 and "no LangGraph checkpoints" in missing.stderr
    assert "Traceback" not in missing.stderr


USER_MODULE = """
from pydantic import BaseModel


class Point(BaseModel):
    x: int
    y: int
"""


def test_a_type_outside_the_allow_list_is_refused_by_name(tmp_path: Path) -> None:
    mod = tmp_path / "mods"
    mod.mkdir()
    (mod / "usertypes_r27.py").write_text(textwrap.dedent(USER_MODULE))
    script = tmp_path / "write.py"
    script.write_text(
        textwrap.dedent(
            """
            import sqlite3, sys
            from typing import TypedDict
            from langgraph.checkpoint.sqlite import SqliteSaver
            from langgraph.graph import END, START, StateGraph
            from usertypes_r27 import Point

            class S(TypedDict):
                p: Point

            def move(s):
                return {"p": Point(x=s["p"].x + 1, y=2)}

            g = StateGraph(S)
            g.add_node("move", move)
            g.add_edge(START, "move")
            g.add_edge("move", END)
            conn = sqlite3.connect(sys.argv[1], check_same_thread=False)
            graph = g.compile(checkpointer=SqliteSaver(conn))
            graph.invoke({"p": Point(x=1, y=1)}, {"configurable": {"thread_id": "p"}})
            conn.close()
            """
        )
    )
    source = tmp_path / "points.db"
    made = subprocess.run(
        [sys.executable, str(script), str(source)], env=child_env(mod), capture_output=True, text=True, timeout=120
    )
    assert made.returncode == 0, made.stderr

    target = tmp_path / "graphckpt.db"
    refused = _run("--db", str(target), "import-langgraph", str(source), cwd=tmp_path, extra=mod)
    assert refused.returncode == 1
    assert "usertypes_r27.Point" in refused.stderr and "allow-list" in refused.stderr

    allowed = _run(
        "--db",
        str(target),
        "import-langgraph",
        str(source),
        "--allow",
        "usertypes_r27:Point",
        "--json",
        cwd=tmp_path,
        extra=mod,
    )
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads(allowed.stdout)["threads"] == 1
    shown = _run("--db", str(target), "show", "p", "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["values"]["p"] == {"x": 2, "y": 2}
