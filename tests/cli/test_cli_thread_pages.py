"""Pages of threads through the API (``App.threads(limit=, after=)``) and the CLI (``graphckpt threads --limit``,
``--after``, ``--all``): newest created first, each thread on one page, a hint naming the next page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict

import pytest
from support.cli import make_cli, ok

from graphckpt import END, START, StateGraph
from graphckpt.errors import InvalidCursorError
from graphckpt.savers.sqlite import SqliteSaver


class S(TypedDict):
    n: int


def _app(db: Path) -> Any:
    g = StateGraph(S)
    g.add_node("inc", lambda s: {"n": s["n"] + 1})
    g.add_edge(START, "inc")
    g.add_edge("inc", END)
    return g.compile(saver=SqliteSaver(str(db)))


@pytest.fixture
def seven(tmp_path: Path) -> tuple[Any, list[str]]:
    """A CLI whose database holds threads t0..t6, created in that order (so listed t6 first)."""
    cli = make_cli(tmp_path)
    app = _app(tmp_path / "runs.db")
    names = [f"t{i}" for i in range(7)]
    for name in names:
        app.invoke({"n": 0}, thread_id=name)
    app.close()
    return cli, list(reversed(names))


def test_app_threads_pages_follow_the_cursor(tmp_path: Path) -> None:
    app = _app(tmp_path / "a.db")
    try:
        for i in range(5):
            app.invoke({"n": i}, thread_id=f"x{i}")
        first = app.threads(limit=2)
        assert [i.thread_id for i in first] == ["x4", "x3"]
        app.invoke({"n": 9}, thread_id="x0")  # an update does not move a thread between pages
        app.invoke({"n": 9}, thread_id="late")  # a new thread goes to the front, not between pages
        rest = app.threads(limit=10, after=first[-1].cursor)
        assert [i.thread_id for i in rest] == ["x2", "x1", "x0"]
        assert [i.thread_id for i in app.threads(status="done", limit=1)] == ["late"]
        assert len(app.threads()) == 6  # the old call: every thread
        with pytest.raises(InvalidCursorError):
            app.threads(limit=2, after="garbage")
    finally:
        app.close()


def test_cli_threads_shows_a_first_page_and_how_to_see_more(seven: tuple[Any, list[str]]) -> None:
    cli, newest_first = seven
    shown = ok(cli("threads", "--limit", "3", "--json"))
    assert [t["thread_id"] for t in shown.json()] == newest_first[:3]
    assert "--after" in shown.err and "--all" in shown.err
    cursor = shown.err.split("--after ", 1)[1].split(",", 1)[0].strip()
    nxt = ok(cli("threads", "--limit", "3", "--after", cursor, "--json")).json()
    assert [t["thread_id"] for t in nxt] == newest_first[3:6]
    table = ok(cli("threads", "--limit", "3")).out
    assert "t6" in table and "t3" not in table and "--after" in table
    assert "--after" not in ok(cli("threads")).out  # 7 threads: all on the default page of 50


def test_cli_threads_all_prints_every_thread_page_by_page(seven: tuple[Any, list[str]]) -> None:
    cli, newest_first = seven
    every = ok(cli("threads", "--all", "--json", env={"GRAPHCKPT_LIST_PAGE": "2"}))
    assert [t["thread_id"] for t in json.loads(every.out)] == newest_first
    assert all(name in ok(cli("threads", "--all")).out for name in newest_first)
    assert json.loads(ok(cli("threads", "--all", "--json", "--status", "failed")).out) == []
    assert "no threads with status failed" in ok(cli("threads", "--all", "--status", "failed")).out
