"""Erasure: ``delete_thread`` removes every row holding a thread's data (checkpoints, blobs, pending writes, journaled
effects, interrupts, events, runs, its subgraphs' threads), refuses a thread that forks depend on unless asked to
cascade, and on SQLite leaves no byte of a deleted value in the database, WAL or shared-memory files."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from support.postgres import PG_DSN, require_postgres
from support.rowdump import contains, pg_rows, sqlite_file_bytes, sqlite_rows
from support.subgraphs import child_graph, parent_graph

from graphckpt import Context, StateGraph, ThreadHasForksError, ThreadNotFoundError
from graphckpt.app import App
from graphckpt.savers.postgres import PostgresSaver
from graphckpt.savers.sqlite import SqliteSaver


class S(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    note: str


def marked_app(saver: Any) -> App:
    """write (puts the thread's marker in state) -> ask (journals a tool result and interrupts, both marked)."""

    def write(s: S, ctx: Context) -> dict[str, Any]:
        return {"log": [f"{s['note']}-state"]}

    def ask(s: S, ctx: Context) -> dict[str, Any]:
        tool = ctx.effect(lambda: f"{s['note']}-tool")
        answer = ctx.interrupt(f"{s['note']}-ask")
        return {"log": [tool, str(answer)]}

    g = StateGraph(S)
    g.add_sequence([write, ask])
    g.set_entry_point("write")
    return g.compile(saver=saver)


async def test_a_thread_with_forks_is_refused_naming_them_unless_cascade(saver: Any) -> None:
    app = marked_app(saver)
    await app.ainvoke({"note": "src"}, thread_id="src")
    await app.ainvoke({"note": "other"}, thread_id="other")
    [first, *_] = reversed(await app.ahistory("src"))
    f1 = await app.afork("src", first.checkpoint_id, new_thread_id="f1")
    await app.afork("f1", f1.checkpoint_id, new_thread_id="f2")  # a fork of the fork
    with pytest.raises(ThreadHasForksError, match=r"thread 'src' has 2 fork\(s\).*'f1', 'f2'") as caught:
        await app.adelete_thread("src")
    assert caught.value.forks == ["f1", "f2"]
    assert (await app.aget_state("src")).values["log"] == ["src-state"]  # nothing was deleted
    assert sorted(await app.adelete_thread("src", cascade=True)) == ["f1", "f2", "src"]
    assert sorted(t.thread_id for t in await app.athreads()) == ["other"]
    for gone in ("src", "f1", "f2"):
        with pytest.raises(ThreadNotFoundError):
            await app.aget_state(gone)
    assert await saver.thread_forks("src") == []


async def test_a_fork_is_deleted_alone_and_its_source_keeps_everything(saver: Any) -> None:
    app = marked_app(saver)
    await app.ainvoke({"note": "src"}, thread_id="src")
    await app.afork("src", step=0, new_thread_id="f1")
    assert await app.adelete_thread("f1") == ["f1"]
    assert (await app.aget_state("src")).values["log"] == ["src-state"]
    assert await app.adelete_thread("src") == ["src"]


async def test_subgraph_child_threads_go_with_their_parent(saver: Any) -> None:
    calls: dict[str, int] = {}
    app = parent_graph(child_graph(calls), saver, calls)
    await app.ainvoke({"log": ["in"], "x": 1}, thread_id="t")
    children = [r.thread_id for r in await saver.list_threads() if r.thread_id != "t"]
    assert children
    deleted = await app.adelete_thread("t")
    assert sorted(deleted) == sorted([*children, "t"])
    assert await saver.list_threads() == []


def _in_files(path: Path, needle: str) -> list[str]:
    return [name for name, data in sqlite_file_bytes(path).items() if needle.encode() in data]


async def test_sqlite_erasure_leaves_no_byte_of_the_thread_in_any_file(tmp_path: Path) -> None:
    db = tmp_path / "erase.db"
    gone, kept = "ERASEME-9f3c1", "KEEPME-7c1a0"
    async with SqliteSaver(db) as saver:
        app = marked_app(saver)
        for i in range(5):  # some history: deltas, pending writes replaced, a chunk or two
            await app.ainvoke({"note": gone}, thread_id=f"gone-{i}" if i else "gone")
        await app.ainvoke({"note": kept}, thread_id="kept")
        await app.aresume("gone", "yes")  # an answered interrupt: pending writes deleted by the next commit
        await app.ainvoke({"note": gone}, thread_id="gone")
        assert _in_files(db, gone) and _in_files(db, kept)
        for i in range(5):
            await app.adelete_thread(f"gone-{i}" if i else "gone")
        assert _in_files(db, gone) == []  # while open: database, WAL and shm as they are
        assert contains(sqlite_rows(db), "gone") == []
        assert _in_files(db, kept) == ["erase.db"]
        assert (await app.aget_state("kept")).values["log"] == [f"{kept}-state"]
    assert _in_files(db, gone) == []


async def test_postgres_erasure_leaves_no_row_naming_the_thread(pg_schema: str) -> None:
    require_postgres()
    gone, kept = "ERASEME-5d2e8", "KEEPME-0b7f4"
    async with PostgresSaver(PG_DSN, schema=pg_schema) as saver:
        app = marked_app(saver)
        await app.ainvoke({"note": gone}, thread_id="gone")
        await app.ainvoke({"note": kept}, thread_id="kept")
        assert contains(await pg_rows(PG_DSN, pg_schema), gone)
        await app.adelete_thread("gone")
        rows = await pg_rows(PG_DSN, pg_schema)
        assert contains(rows, gone) == [] and contains(rows, "gone") == []
        assert contains(rows, kept)
