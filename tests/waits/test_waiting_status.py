"""``waiting`` is visible wherever threads are read, not only in the CLI: ``App.threads(status="waiting")`` and
``ThreadInfo.wake_at`` on every saver; the server's thread search and thread record (LangGraph's status
``interrupted``, with ``graphckpt_status: "waiting"`` and ``wake_at``); the web UI's thread list (a ``waiting``
filter) and thread page, each showing when the thread wakes."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel
from support.serving import Served

from graphckpt import END, START, StateGraph


class State(BaseModel):
    answer: str = ""


def _app(saver: Any, node: Any) -> Any:
    g = StateGraph(State)
    g.add_node("n", node)
    g.add_edge(START, "n")
    g.add_edge("n", END)
    return g.compile(saver=saver)


async def test_app_threads_lists_the_waiting_threads_with_when_each_wakes(saver: Any) -> None:
    def nap(state: State, ctx: Any) -> dict[str, Any]:
        ctx.sleep(600)
        return {}

    def ask(state: State, ctx: Any) -> dict[str, Any]:
        return {"answer": ctx.interrupt("ok?")}

    def ask_by(state: State, ctx: Any) -> dict[str, Any]:
        return {"answer": ctx.interrupt("ok?", timeout=300)}

    sleeper, asker, deadline = _app(saver, nap), _app(saver, ask), _app(saver, ask_by)
    before = dt.datetime.now(dt.UTC)
    await sleeper.ainvoke({}, thread_id="sleeps")
    await asker.ainvoke({}, thread_id="asks")
    await deadline.ainvoke({}, thread_id="asks-by")
    await asker.ainvoke({}, thread_id="answered")
    await asker.aresume("answered", "yes")

    waiting = await sleeper.athreads(status="waiting")
    assert [i.thread_id for i in waiting] == ["asks-by", "sleeps"]  # soonest first
    assert all(i.status == "interrupted" and i.waiting for i in waiting)
    by_id = {i.thread_id: i for i in await sleeper.athreads()}
    assert by_id["sleeps"].wake_at is not None
    assert before + dt.timedelta(seconds=599) < by_id["sleeps"].wake_at < before + dt.timedelta(seconds=660)
    assert by_id["asks-by"].wake_at is not None
    assert by_id["asks"].wake_at is None and not by_id["asks"].waiting  # waits for a person, not a time
    assert by_id["answered"].wake_at is None
    assert (await sleeper.athread("sleeps")).wake_at == by_id["sleeps"].wake_at
    assert (await sleeper.athread("asks")).wake_at is None
    interrupted = {i.thread_id for i in await sleeper.athreads(status="interrupted")}
    assert interrupted == {"sleeps", "asks", "asks-by"}  # waiting is a kind of interrupted
    paged = await sleeper.athreads(status="waiting", limit=1)
    assert len(paged) == 1 and paged[0].waiting
    rest = await sleeper.athreads(status="waiting", limit=5, after=paged[0].cursor)
    assert {i.thread_id for i in [*paged, *rest]} == {"sleeps", "asks-by"}
    await asker.aresume("asks", "fine")  # answered: no longer in the list, never was waiting
    await sleeper.aresume("sleeps", None)  # a resume before the time: the node sleeps again, same time
    again = await sleeper.athread("sleeps")
    assert again.waiting and again.wake_at == by_id["sleeps"].wake_at


def test_the_server_and_the_ui_show_waiting_threads_and_when_they_wake(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    env = {"SLEEP_SECONDS": "600", "SLEEP_SIDE": str(tmp_path / "side.txt")}
    sleeps, done = "support.sleep_graph:graph", "support.store_graphs:remember"
    server = serve([sleeps, done], env=env)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for thread_id, graph in (("w1", sleeps), ("idle1", done)):
            body = {"assistant_id": graph, "input": {}, "if_not_exists": "create"}
            r = client.post(f"/threads/{thread_id}/runs/wait", json=body)
            assert r.status_code == 200, r.text

        found = client.post("/threads/search", json={"status": "waiting"})
        assert found.status_code == 200, found.text
        [thread] = found.json()
        assert thread["thread_id"] == "w1" and thread["status"] == "interrupted"
        assert thread["graphckpt_status"] == "waiting"
        wake = dt.datetime.fromisoformat(thread["wake_at"])
        assert 500 < (wake - dt.datetime.now(dt.UTC)).total_seconds() <= 600
        assert [t["thread_id"] for t in client.post("/threads/search", json={"status": "interrupted"}).json()] == ["w1"]
        everyone = {t["thread_id"]: t for t in client.post("/threads/search", json={}).json()}
        assert everyone["w1"]["wake_at"] == thread["wake_at"] and everyone["idle1"]["wake_at"] is None
        one = client.get("/threads/w1").json()
        assert one["graphckpt_status"] == "waiting" and one["wake_at"] == thread["wake_at"]
        assert client.post("/threads/count", json={"status": "waiting"}).json() == 1

        shown = wake.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        listing = client.get("/ui/", params={"status": "waiting"})
        assert listing.status_code == 200, listing.text
        assert "w1" in listing.text and f"wakes {shown} UTC" in listing.text and "idle1" not in listing.text
        assert '<option value="waiting" selected>' in listing.text
        page = client.get("/ui/threads/w1")
        assert page.status_code == 200 and "s-waiting" in page.text and f"wakes {shown} UTC" in page.text
