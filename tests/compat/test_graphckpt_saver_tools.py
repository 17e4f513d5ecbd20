"""graphckpt's own tools on threads a LangGraph graph wrote through GraphckptSaver: the CLI (``threads``, ``show``,
``history``, ``history --tree``, ``diff``, ``export`` then ``import``) as a subprocess, the server's
``GET /threads/{id}/state`` and ``/history`` and the web UI's thread and checkpoint pages, on a SQLite file written by
a real LangGraph graph. What they report is compared with what LangGraph itself reports (values, next nodes)."""

from __future__ import annotations

import json
import operator
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import httpx
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from support import child_env
from support.serving import Served, read_events

from graphckpt.compat.langgraph import GraphckptSaver
from graphckpt.savers.sqlite import SqliteSaver


class State(TypedDict):
    items: Annotated[list[str], operator.add]
    note: str
    messages: Annotated[list[AnyMessage], add_messages]


def _a(state: State) -> dict[str, Any]:
    return {"items": ["a"], "note": "after a", "messages": [AIMessage("from a", id="m-a")]}


def _b(state: State) -> dict[str, Any]:
    return {"items": ["b"], "note": "after b"}


def _graph(saver: GraphckptSaver) -> Any:
    g = StateGraph(State)
    g.add_node("a", _a)
    g.add_node("b", _b)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    return g.compile(checkpointer=saver, interrupt_before=["b"])


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    """LangGraph's values as graphckpt's tools show them without the graph code: a message as its fields, and no
    reducer field at its empty start value (LangGraph fills ``[]`` from the graph's reducer; a tool without the
    graph shows only what was stored, as for graphckpt's own threads)."""
    out = {k: v for k, v in values.items() if v != []}
    if "messages" in out:
        out["messages"] = [(m.type, m.content, m.id) for m in out["messages"]]
    return out


def _shown(values: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in values.items() if v != []}
    if "messages" in out:
        out["messages"] = [(m["type"], m["content"], m["id"]) for m in out["messages"]]
    return out


@pytest.fixture
def written(tmp_path: Path) -> dict[str, Any]:
    """A thread ``t1``: input, a, interrupt before b, b; then ``update_state`` on the checkpoint before ``a`` (a
    branch). Returns LangGraph's own view of it."""
    db = tmp_path / "lg.db"
    saver = GraphckptSaver(SqliteSaver(db))
    try:
        graph = _graph(saver)
        config = {"configurable": {"thread_id": "t1"}}
        graph.invoke({"items": ["x"], "note": "start", "messages": [HumanMessage("hi", id="m-h")]}, config)
        graph.invoke(None, config)
        main = list(graph.get_state_history(config))
        before_a = next(s for s in main if s.next == ("a",))
        branched = graph.update_state(before_a.config, {"note": "edited"})
        branch = graph.get_state(branched)
        latest = graph.get_state(config)
        writes = {t.config["configurable"]["checkpoint_id"]: t.pending_writes for t in saver.list(config)}
    finally:
        saver.close()
    return {"db": db, "main": main, "before_a": before_a, "branch": branch, "latest": latest, "writes": writes}


def _cli(db: Path, *args: str, cwd: Path) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "graphckpt", "--db", str(db), *args, "--json"],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=cwd,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _cid(snap: Any) -> str:
    return str(snap.config["configurable"]["checkpoint_id"])


def test_threads_show_history_diff_read_a_langgraph_thread(written: dict[str, Any], tmp_path: Path) -> None:
    db, main = written["db"], written["main"]
    branch_id = _cid(written["branch"])
    threads = {t["thread_id"]: t for t in _cli(db, "threads", cwd=tmp_path)}
    member = next(t for t in threads if t != "t1")
    assert set(threads) == {"t1", member}
    assert threads[member]["forked_from"] == f"t1@{_cid(written['before_a'])}"
    assert threads[member]["head"] == branch_id

    shown = _cli(db, "show", "t1", cwd=tmp_path)
    assert shown["checkpoint_id"] == _cid(main[0])
    assert _shown(shown["values"]) == _plain(main[0].values)
    assert shown["next"] == list(main[0].next) == []
    assert shown["metadata"]["source"] == "loop"

    history = _cli(db, "history", "t1", cwd=tmp_path)  # oldest first
    assert [h["checkpoint_id"] for h in history] == [_cid(s) for s in reversed(main)]
    assert [h["next"] for h in history] == [list(s.next) for s in reversed(main)]
    for snap in main:
        past = _cli(db, "show", "t1", "--checkpoint", _cid(snap), cwd=tmp_path)
        assert _shown(past["values"]) == _plain(snap.values), _cid(snap)
        assert past["next"] == list(snap.next)
        assert past["metadata"]["step"] == snap.metadata["step"]

    on_branch = _cli(db, "show", member, cwd=tmp_path)
    assert on_branch["checkpoint_id"] == branch_id
    assert _shown(on_branch["values"]) == _plain(written["branch"].values)
    assert on_branch["next"] == list(written["branch"].next) == ["a"]

    tree = _cli(db, "history", "t1", "--tree", cwd=tmp_path)
    forks = {cp["checkpoint_id"]: cp["forks"] for cp in tree["checkpoints"]}
    fork_at = forks[_cid(written["before_a"])]
    assert [f["thread_id"] for f in fork_at] == [member]
    assert [cp["checkpoint_id"] for cp in fork_at[0]["checkpoints"]] == [branch_id]
    assert all(not f for cid, f in forks.items() if cid != _cid(written["before_a"]))

    interrupted = next(s for s in main if s.next == ("b",))
    diff = _cli(db, "diff", f"t1@{_cid(interrupted)}", "t1", cwd=tmp_path)
    assert diff["changed"]["note"]["before"] == "after a" and diff["changed"]["note"]["after"] == "after b"
    assert diff["changed"]["items"]["appended"] == ["b"]
    across = _cli(db, "diff", "t1", member, cwd=tmp_path)
    assert across["changed"]["items"]["dropped"] == ["a", "b"]
    assert across["changed"]["note"]["after"] == "edited"


def test_export_then_import_into_a_new_file(written: dict[str, Any], tmp_path: Path) -> None:
    db, main = written["db"], written["main"]
    out = tmp_path / "t1.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "graphckpt", "--db", str(db), "export", "t1"],
        capture_output=True,
        env=child_env(),
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out.write_bytes(done.stdout)
    fresh = tmp_path / "imported.db"
    done = subprocess.run(
        [sys.executable, "-m", "graphckpt", "--db", str(fresh), "import", str(out)],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    history = _cli(fresh, "history", "t1", cwd=tmp_path)
    assert [h["checkpoint_id"] for h in history] == [_cid(s) for s in reversed(main)]
    for snap in main:
        past = _cli(fresh, "show", "t1", "--checkpoint", _cid(snap), cwd=tmp_path)
        assert _shown(past["values"]) == _plain(snap.values)
        assert past["next"] == list(snap.next)
    # and LangGraph reads the imported thread back through the compat saver
    saver = GraphckptSaver(SqliteSaver(fresh))
    try:
        graph = _graph(saver)
        config = {"configurable": {"thread_id": "t1"}}
        again = graph.get_state(config)
        assert _plain(again.values) == _plain(main[0].values)
        assert [_cid(s) for s in graph.get_state_history({"configurable": {"thread_id": "t1"}})] == [
            _cid(s) for s in main
        ]
        # every checkpoint's kept writes (its tasks' results, LangGraph's history) came along
        kept = {t.config["configurable"]["checkpoint_id"]: t.pending_writes for t in saver.list(config)}
        assert kept == {cid: w for cid, w in written["writes"].items() if cid in kept} and any(kept.values())
        # and the compat saver writes on: the imported thread is still LangGraph's
        graph.update_state(config, {"note": "after import"})
        assert graph.get_state(config).values["note"] == "after import"
    finally:
        saver.close()


def test_server_state_and_history_of_a_langgraph_thread(written: dict[str, Any], tmp_path: Path) -> None:
    db, main = written["db"], written["main"]
    server = Served(tmp_path, ["support.server_graphs:counter"], db=str(db)).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            state = client.get("/threads/t1/state")
            assert state.status_code == 200, state.text
            body = state.json()
            assert body["checkpoint"]["checkpoint_id"] == _cid(main[0])
            assert _shown(body["values"]) == _plain(main[0].values)
            assert body["next"] == []
            interrupted = next(s for s in main if s.next == ("b",))
            past = client.get(f"/threads/t1/state/{_cid(interrupted)}").json()
            assert _shown(past["values"]) == _plain(interrupted.values) and past["next"] == ["b"]
            history = client.get("/threads/t1/history", params={"limit": 10})
            assert history.status_code == 200, history.text
            found = history.json()
            assert [h["checkpoint"]["checkpoint_id"] for h in found] == [_cid(s) for s in main]
            assert [h["next"] for h in found] == [list(s.next) for s in main]
            assert [_shown(h["values"]) for h in found] == [_plain(s.values) for s in main]
            page = client.get("/ui/threads/t1")  # the web UI's thread page, then its head checkpoint's
            assert page.status_code == 200, page.text
            assert _cid(main[0])[:12] in page.text and _cid(written["before_a"])[:12] in page.text
            page = client.get(f"/ui/threads/t1@{_cid(main[0])}")
            assert page.status_code == 200, page.text
            assert "after b" in page.text
    finally:
        server.stop()


def test_serve_streams_a_langgraph_thread_from_the_event_log(written: dict[str, Any], tmp_path: Path) -> None:
    """``GET /threads/{id}/stream`` replays what the compat saver wrote: a ``values`` event per checkpoint (the
    state LangGraph reports there, oldest first) and, per step after the input, the ``updates`` of the nodes that made
    it (the stream of a thread a LangGraph engine may still write stays open: ``limit`` ends the read)."""
    db, main = written["db"], written["main"]
    server = Served(tmp_path, ["support.server_graphs:counter"], db=str(db)).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            events = read_events(
                client, "/threads/t1/stream", params={"stream_mode": "values,updates"}, limit=2 * len(main) - 2
            )
    finally:
        server.stop()
    values = [data for _id, kind, data in events if kind == "values"]
    assert [_shown(v) for v in values] == [_plain(s.values) for s in reversed(main)]
    updates = [data for _id, kind, data in events if kind == "updates"]
    assert {"a": {"items": ["a"], "note": "after a", "messages": [updates[0]["a"]["messages"][0]]}} == updates[0]
    assert updates[0]["a"]["messages"][0]["content"] == "from a"
    assert updates[1] == {"b": {"items": ["b"], "note": "after b"}}
