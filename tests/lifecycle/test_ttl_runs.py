"""A TTL set when a run starts (``invoke``/``resume``/``stream``/``submit`` with ``ttl=``, or ``ttl`` in a served
run's body, LangGraph's ``{"strategy": "delete", "ttl": minutes}``), besides thread creation: it replaces the
thread's TTL and keeps its other tags; a bad one is refused naming ``ttl``. ``graphckpt serve`` sweeps: a served
thread whose short TTL ran out disappears within a bounded wait, one without a TTL stays (and LangGraph's
``POST /threads/prune`` with ``strategy: keep_latest`` trims it to its head)."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from support.serving import Served
from support.waiting import wait_for
from test_ttl import ttl_app

from graphckpt import ids
from graphckpt.errors import InvalidUpdateError
from graphckpt.prune import prune, ttl_of, ttl_seconds


async def _ttl(app: Any, thread_id: str) -> float | None:
    record = await app.saver.get_thread(thread_id)
    return None if record is None else ttl_of(record.metadata)


async def test_a_ttl_given_to_a_run_sets_the_threads(saver: Any) -> None:
    app = ttl_app(saver)
    await app.ainvoke({}, thread_id="a", ttl=datetime.timedelta(hours=2), tags={"owner": "me"})
    assert await _ttl(app, "a") == 7200
    await app.ainvoke({}, thread_id="b", ttl={"strategy": "delete", "ttl": 30})
    assert await _ttl(app, "b") == 1800
    await app.ainvoke({}, thread_id="a", ttl="1d", tags=None)  # a new turn: the TTL changes, the tags stay
    record = await saver.get_thread("a")
    assert record.metadata["tags"] == {"owner": "me", "ttl": 86400}
    chunks = [c async for c in app.astream({}, thread_id="c", ttl=90)]
    assert chunks and await _ttl(app, "c") == 90
    await app.ainvoke({}, thread_id="plain")
    assert await _ttl(app, "plain") is None
    for bad in (0, "soon", {"strategy": "archive", "ttl": 5}, {"ttl": "5"}, True, datetime.timedelta(0)):
        with pytest.raises(InvalidUpdateError, match="ttl"):
            await app.ainvoke({}, thread_id="never", ttl=bad)
    assert await saver.get_thread("never") is None  # refused before anything was written


async def test_a_ttl_from_a_run_expires_the_thread_from_its_last_activity(
    saver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = ttl_app(saver)
    t0 = ids.now()
    monkeypatch.setattr(ids, "now", lambda: t0)
    await app.ainvoke({}, thread_id="short", ttl=60)
    await app.ainvoke({}, thread_id="long", ttl=3600)
    monkeypatch.setattr(ids, "now", lambda: t0 + 61)
    report = await prune(saver, expired=True)
    assert report.threads == ["short"]
    assert [r.thread_id for r in await saver.list_threads()] == ["long"]


def test_ttl_seconds_shapes() -> None:
    assert ttl_seconds(datetime.timedelta(minutes=5)) == 300
    assert ttl_seconds({"strategy": "delete", "ttl": 1.5}) == 90
    assert ttl_seconds("12h") == 43200 and ttl_seconds(7) == 7
    with pytest.raises(InvalidUpdateError, match=r"ttl\.ttl must be a number of minutes"):
        ttl_seconds({"ttl": None})


def test_a_served_thread_with_a_short_ttl_disappears(serve: Callable[..., Served]) -> None:
    server = serve(["support.server_graphs:counter"], args=["--ttl-sweep-every", "0.2"])
    with httpx.Client(base_url=server.url, timeout=30) as c:
        bad = c.post("/threads/x/runs/wait", json={"input": {"limit": 1}, "ttl": {"strategy": "delete", "ttl": 0}})
        assert bad.status_code == 422 and "ttl" in bad.text, bad.text
        short = {"input": {"limit": 1}, "ttl": {"strategy": "delete", "ttl": 0.02}}  # 1.2 s
        c.post("/threads/short/runs/wait", json=short).raise_for_status()
        c.post("/threads/kept/runs/wait", json={"input": {"limit": 1}}).raise_for_status()
        assert c.get("/threads/short").status_code == 200

        wait_for(lambda: c.get("/threads/short").status_code == 404, 20, interval=0.1, what="the sweep by serve")
        assert c.get("/threads/kept").status_code == 200
        # the same server: LangGraph's prune with strategy keep_latest keeps each thread's head only
        state = c.get("/threads/kept/state").json()
        assert len(c.post("/threads/kept/history", json={"limit": 100}).json()) > 1
        body = {"thread_ids": ["kept", "nobody"], "strategy": "keep_latest"}
        assert c.post("/threads/prune", json=body).json() == {"pruned_count": 1}
        [head] = c.post("/threads/kept/history", json={"limit": 100}).json()
        assert head["values"] == state["values"] == c.get("/threads/kept/state").json()["values"]
