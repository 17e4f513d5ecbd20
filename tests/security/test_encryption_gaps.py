"""Encryption at rest where it was missing: a durable wait's wake-up queues its resume run sealed (so a worker under
``require_encryption`` resumes it), a page of threads filters on encrypted metadata, and the writes LangGraph's
checkpointer keeps per checkpoint (``put_kept_writes``) are sealed: a marker string in each appears nowhere in the
SQLite files or in a ``pg_dump`` of the PostgreSQL schema, and everything reads back."""

from __future__ import annotations

import asyncio
import operator
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from pydantic import BaseModel
from support.postgres import PG_DSN
from support.waiting import await_for
from test_encryption import pg_dump, sqlite_bytes

from graphckpt import END, START, StateGraph, Worker
from graphckpt.encryption import Keyring
from graphckpt.savers.base import Saver
from graphckpt.savers.postgres import PostgresSaver
from graphckpt.savers.sqlite import SqliteSaver

MARKER = "ZQX-gap-marker-5521"
RING = Keyring({"k1": os.urandom(32)}, require=True)
GRAPH = "tests:sealed-waits"


@pytest.fixture(params=["sqlite", "postgres"])
async def sealed(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[Saver, Any]]:
    """A saver with a keyring that requires encryption, and a function returning every stored byte."""
    if request.param == "sqlite":
        path = tmp_path / "s.db"
        async with SqliteSaver(path, encryption=RING) as s:
            yield s, lambda: sqlite_bytes(path)
        return
    pg_schema = request.getfixturevalue("pg_schema_name")
    async with PostgresSaver(PG_DSN, schema=pg_schema, encryption=RING) as p:
        yield p, lambda: pg_dump(pg_schema)


class State(BaseModel):
    doc: str = ""
    woke: bool = False


async def test_a_woken_wait_resumes_under_required_encryption(sealed: tuple[Saver, Any]) -> None:
    saver, stored = sealed

    async def node(state: State, ctx: Any) -> dict[str, Any]:
        ctx.sleep(0.3)
        return {"woke": True, "doc": state.doc + " woke"}

    g = StateGraph(State)
    g.add_node("n", node)
    g.add_edge(START, "n")
    g.add_edge("n", END)
    app = g.compile(saver=saver)
    worker = Worker({GRAPH: app}, poll=0.05)
    loop = asyncio.ensure_future(worker.run())
    try:
        await app.asubmit({"doc": MARKER}, thread_id="w", graph=GRAPH)
        await await_for(lambda: _done(app, "w"), 15, what="the woken thread to finish")
    finally:
        worker.stop()
        await loop
    assert (await app.aget_state("w")).values == State(doc=f"{MARKER} woke", woke=True)
    runs = await saver.list_runs(thread_id="w")
    assert [(r.kind, r.status) for r in runs] == [("input", "interrupted"), ("resume", "done")]
    [wait] = await saver.list_waits()
    assert wait.status == "fired"
    assert MARKER.encode() not in stored()


async def _done(app: Any, thread_id: str) -> bool:
    found = await app.store.saver.get_thread(thread_id)
    return found is not None and found.status == "done"


async def test_pages_filter_on_encrypted_metadata(sealed: tuple[Saver, Any]) -> None:
    saver, stored = sealed
    g = StateGraph(State)
    g.add_node("n", lambda s: {"woke": True})
    g.add_edge(START, "n")
    g.add_edge("n", END)
    app = g.compile(saver=saver)
    for i in range(7):
        await app.ainvoke({}, thread_id=f"p{i}", tags={"customer": MARKER if i % 2 else "other"})
    pages, after = [], None
    while True:
        page = await saver.page_threads(limit=2, after=after, metadata={"tags": {"customer": MARKER}})
        pages.append([r.thread_id for r in page.threads])
        if (after := page.next) is None:
            break
    assert pages == [["p5", "p3"], ["p1"]]
    assert MARKER.encode() not in stored()


class LgState(TypedDict):
    notes: Annotated[list[str], operator.add]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_langgraph_kept_writes_are_sealed(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    from langgraph.graph import END as LG_END
    from langgraph.graph import START as LG_START
    from langgraph.graph import StateGraph as LgGraph
    from langgraph.types import Command, interrupt

    from graphckpt.compat.langgraph import GraphckptSaver

    saver: Saver
    if kind == "sqlite":
        saver, stored = SqliteSaver(tmp_path / "lg.db", encryption=RING), lambda: sqlite_bytes(tmp_path / "lg.db")
    else:
        schema = request.getfixturevalue("pg_schema_name")
        saver, stored = PostgresSaver(PG_DSN, schema=schema, encryption=RING), lambda: pg_dump(schema)

    def ask(s: LgState) -> dict[str, Any]:
        return {"notes": [f"{MARKER} {interrupt({'q': MARKER})}"]}

    g = LgGraph(LgState)
    g.add_node("first", lambda s: {"notes": [f"first {MARKER}"]})
    g.add_node("ask", ask)
    g.add_edge(LG_START, "first")
    g.add_edge("first", "ask")
    g.add_edge("ask", LG_END)
    checkpointer = GraphckptSaver(saver)
    try:
        app = g.compile(checkpointer=checkpointer)
        config: Any = {"configurable": {"thread_id": "lg"}}
        app.invoke({"notes": []}, config)
        app.invoke(Command(resume="yes"), config)
        assert app.get_state(config).values["notes"] == [f"first {MARKER}", f"{MARKER} yes"]
        kept = [t for t in checkpointer.list(config) if t.pending_writes]
        assert kept, "LangGraph's pending writes are kept per checkpoint"
    finally:
        checkpointer.close()
    assert MARKER.encode() not in stored()
