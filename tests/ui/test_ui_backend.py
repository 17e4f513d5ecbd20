"""The UI's data layer (:class:`LocalBackend`) over a real SQLite file, without a browser: what it reads when the
graph code is loaded and when it is not, the list's filters and pages, and the one-line errors of actions it cannot
do. The pages themselves are tested in a real browser in test_ui_browser.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import SUPPORT, child_env
from support.ui_world import APPROVAL, approval_graph
from support.waiting import await_for

from graphckpt.savers.sqlite import SqliteSaver
from graphckpt.server.ui import LocalBackend, UIError, thread_list
from graphckpt.server.ui.routes import _line_diff, _split_ref


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "b.db"
    app = approval_graph().compile(saver=SqliteSaver(path))
    with app:
        for i in range(5):
            app.invoke({"service": f"svc{i}"}, thread_id=f"deploy-{i}", tags={"graph": APPROVAL, "team": f"t{i % 2}"})
        app.resume("deploy-0", True)
        app.fork("deploy-0", None, step=1, update={"service": "other"}, new_thread_id="deploy-0-alt")
    return path


async def test_with_the_graph_loaded_it_reads_runs_and_records_the_ui(db: Path) -> None:
    saver = SqliteSaver(db)
    backend = LocalBackend(saver, {APPROVAL: approval_graph().compile(saver=saver)})
    try:
        view = await backend.thread_view("deploy-0")
        assert view.runnable and view.graph is not None and view.info.status == "done"
        assert [s.step for s in view.steps] == [0, 1, 2] and view.steps[1].nodes == ["approve"]
        assert [f["thread_id"] for cp in view.tree["checkpoints"] for f in cp["forks"]] == ["deploy-0-alt"]
        inbox = await backend.inbox()
        assert sorted(i.thread_id for i in inbox) == ["deploy-1", "deploy-2", "deploy-3", "deploy-4"]
        assert all(i.approval and i.question and i.question.startswith("Deploy svc") for i in inbox)
        with pytest.raises(UIError, match=r"thread 'deploy-1' has no open interrupt 'x:0' \(open: .+:0\)"):
            await backend.answer("deploy-1", "x:0", True)
        await backend.answer("deploy-1", next(i.interrupt.id for i in inbox if i.thread_id == "deploy-1"), False)
        # the answer returns once its run claimed the thread; the run goes on in the background

        async def answered() -> bool:
            return (await backend.thread_view("deploy-1")).head.status == "done"

        await await_for(answered, 30, what="the answered thread to finish")
        head = (await backend.thread_view("deploy-1")).head
        assert head.status == "done" and head.metadata["tags"] == {
            "graph": APPROVAL,
            "team": "t1",
            "via": "ui",
            "ui_action": "answer",
        }
        page = await backend.checkpoint_page("deploy-0", (await backend.thread_view("deploy-0")).steps[1].checkpoint_id)
        assert page.values == {"service": "svc0", "approved": True, "comment": None, "deployed": False}
        assert [c.where for c in page.changes] == ["approved"]  # comment stays at its default, None
        assert not page.is_head and page.runnable
    finally:
        await backend.aclose()


async def test_without_the_graph_it_reads_only_and_says_why(db: Path) -> None:
    backend = LocalBackend(SqliteSaver(db))
    try:
        view = await backend.thread_view("deploy-2")
        assert not view.runnable and view.graph is None and view.info.status == "interrupted"
        assert not (await backend.inbox())[0].runnable
        with pytest.raises(UIError, match=rf"cannot fork thread 'deploy-2': its graph {APPROVAL} is not loaded"):
            await backend.fork_and_run("deploy-2", view.head.checkpoint_id, {"service": "x"}, None)
        with pytest.raises(UIError, match="cannot resume thread 'deploy-2'"):
            await backend.resume("deploy-2")
        diff = await backend.diff(("deploy-0", None), ("deploy-0-alt", None))
        assert {c.where for c in diff.changes()} >= {"service"}
    finally:
        await backend.aclose()


async def test_the_list_filters_searches_and_pages(db: Path) -> None:
    backend = LocalBackend(SqliteSaver(db))
    try:
        everything = await backend.thread_page(status=None, graph=None, q=None, after=None, per_page=25)
        assert len(everything.rows) == 6 and everything.graphs == [APPROVAL] and everything.next is None
        assert everything.statuses == ["done", "interrupted", "running"]  # the fork has not run yet
        done = await backend.thread_page(status="done", graph=None, q=None, after=None, per_page=25)
        assert [r.thread_id for r in done.rows] == ["deploy-0"]
        team = await backend.thread_page(status="interrupted", graph=APPROVAL, q='"t1"', after=None, per_page=25)
        assert sorted(r.thread_id for r in team.rows) == ["deploy-1", "deploy-3"]
        none = await backend.thread_page(status=None, graph="other:graph", q=None, after=None, per_page=25)
        assert none.rows == [] and none.next is None
        pages, after = [], None
        while True:  # keyset pages: newest created first, each page after the last row of the one before
            page = await backend.thread_page(status=None, graph=None, q=None, after=after, per_page=4)
            pages.append(page)
            if page.next is None:
                break
            after = page.next
        assert [len(p.rows) for p in pages] == [4, 2] and pages[1].after == pages[0].next
        assert [r.thread_id for p in pages for r in p.rows] == [r.thread_id for r in everything.rows]
        assert everything.rows[0].thread_id == "deploy-0-alt"  # the newest created first
        with pytest.raises(UIError, match="after"):
            await backend.thread_page(status=None, graph=None, q=None, after="not-a-cursor", per_page=4)
        alt = next(r for r in everything.rows if r.thread_id == "deploy-0-alt")
        assert alt.forked_from is not None and alt.forked_from.startswith("deploy-0@")
    finally:
        await backend.aclose()


def test_refs_and_line_diffs() -> None:
    assert _split_ref("t1") == ("t1", None)
    assert _split_ref("a@b@01ab") == ("a@b", "01ab")
    assert _line_diff("one line", "other") is None
    assert _line_diff(1, 2) is None
    lines = _line_diff("\n".join(f"l{i}" for i in range(20)), "\n".join(f"l{i}" for i in range(19)) + "\nlast")
    assert lines is not None
    assert lines[0] == ("…", "17 unchanged lines") and lines[-2:] == [("-", "l19"), ("+", "last")]


async def test_the_timeline_shows_the_audit_record(tmp_path: Path) -> None:
    """A failed attempt and a replayed call (fail once after the journaled call, resume), a lost call (SIGKILL inside
    the call, resume) and the spend, as the audit record holds them, read by a real child process's database."""
    from support.ui_world import EFFECT, effect_graph

    db = tmp_path / "e.db"
    _fail_once_and_kill_inside_a_call(db)
    saver = SqliteSaver(db)
    backend = LocalBackend(saver, {EFFECT: effect_graph(str(db)).compile(saver=saver)})
    try:
        view = await backend.thread_view("killed")
        assert view.info.status in ("running", "crashed")  # crashed once the dead child's lease (0.5 s) expired
        assert [(p["kind"], p["node"]) for p in view.pending] == [("lost call", "ask")]  # not committed yet
        view = await backend.thread_view("flaky")
        assert view.info.status == "failed" and [p["kind"] for p in view.pending] == ["failed attempt"]
        _unblock(db)
        await backend.resume("flaky")

        async def status(*threads: str) -> set[str]:
            return {(await backend.thread_view(t)).info.status for t in threads}

        async def crashed() -> bool:  # resumable once crashed
            return await status("killed") == {"crashed"}

        async def done() -> bool:
            return await status("flaky", "killed") == {"done"}

        await await_for(crashed, 30, interval=0.01, what="the killed thread to show as crashed")
        await backend.resume("killed")
        await await_for(done, 30, interval=0.01, what="both threads to be done")
        flaky = (await backend.thread_view("flaky")).steps[-1]
        assert flaky.attempts == {"ask": 1} and "ConnectionError: the weather service hung up" in flaky.failures[0]
        assert set(flaky.replayed) == {"ask"} and flaky.replayed["ask"] >= 50  # the original call's duration
        killed = await backend.thread_view("killed")
        assert killed.steps[-1].lost == {"ask": 1} and killed.pending == []
        assert killed.row.spend["total"]["lost_calls"] == 1
    finally:
        await backend.aclose()


def _fail_once_and_kill_inside_a_call(db: Path) -> None:
    """``flaky``: failed once after its journaled call; ``killed``: SIGKILLed inside its call (children of
    ``support/ui_world.py effect``)."""
    import os
    import signal
    import subprocess
    import sys

    env = child_env(GRAPHCKPT_LEASE_SECONDS="0.5")
    world = [sys.executable, str(SUPPORT / "ui_world.py"), "effect", str(db)]
    Path(f"{db}.fail").touch()
    subprocess.run([*world, "flaky"], env=env, check=True, timeout=60)  # fails once after the call
    Path(f"{db}.block").touch()
    child = subprocess.Popen([*world, "killed"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "in-call"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        if child.stdout is not None:
            child.stdout.close()


def _unblock(db: Path) -> None:
    Path(f"{db}.block").unlink()


def test_the_stand_alone_ui_serves_a_database(db: Path) -> None:
    """``create_ui_app`` (``python -m graphckpt.server.ui``): the same pages over one saver, polling while a thread
    runs, no cancel (only ``graphckpt serve`` has a run queue)."""
    from starlette.testclient import TestClient

    from graphckpt.server.ui import create_ui_app

    saver = SqliteSaver(db)
    ui = create_ui_app(saver, {APPROVAL: approval_graph().compile(saver=saver)})
    with TestClient(ui, base_url="http://127.0.0.1:8123") as client:
        home = client.get("/", follow_redirects=False)
        assert home.status_code == 307 and home.headers["location"] == "/ui/"
        page = client.get("/ui/")
        assert page.status_code == 200 and 'href="/ui/threads/deploy-0-alt"' in page.text
        assert client.get("/ui/threads/deploy-1").status_code == 200
        assert client.get("/ui/events/deploy-1").status_code == 404  # no live stream: it polls
        token = client.cookies["graphckpt_csrf"]
        cancel = client.post("/ui/actions/cancel", data={"csrf": token, "thread": "deploy-1"})
        assert cancel.status_code == 422 and "only `graphckpt serve`" in cancel.text


async def test_the_list_reads_a_page_not_every_thread_and_a_search_reads_a_bounded_walk(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saver = SqliteSaver(db)
    backend = LocalBackend(saver)

    async def every_thread(*args: object, **kwargs: object) -> None:
        raise AssertionError("the list read every thread")

    monkeypatch.setattr(saver, "list_threads", every_thread)
    try:
        first = await backend.thread_page(status=None, graph=None, q=None, after=None, per_page=2)
        assert [r.thread_id for r in first.rows] == ["deploy-0-alt", "deploy-4"] and first.read == 3  # one more
        monkeypatch.setattr(thread_list, "SCAN", 3)
        seen, after, pages = [], None, 0
        while True:  # newest first: alt, 4, 3 | 2, 1, 0 | (nothing)
            page = await backend.thread_page(status=None, graph=None, q="deploy-1", after=after, per_page=25)
            pages += 1
            assert page.read <= 3
            seen += [r.thread_id for r in page.rows]
            if page.next is None:
                break
            assert page.cut  # fewer matches than a page in the bounded walk: the next page searches on
            after = page.next
        assert seen == ["deploy-1"] and pages == 3
    finally:
        await backend.aclose()
