"""Storage grows with change, not with state (invariant 7), and stored bytes are checked when read (invariant 6)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from graphckpt import END, START, CorruptCheckpointError, Saver, StateGraph, append
from graphckpt.savers.base import BlobRange


class Chat(BaseModel):
    messages: Annotated[list[str], append] = []
    n: int = 0
    title: str = "unchanged"


def chat_app(saver: Saver, steps: int, size: int = 1024, **options: Any) -> Any:
    def step(s: Chat) -> dict[str, Any]:
        return {"messages": [f"{s.n:05d}".ljust(size, "x")], "n": s.n + 1}

    g = StateGraph(Chat)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s.n < steps else END)
    return g.compile(saver=saver, recursion_limit=steps + 10, **options)


async def stored_bytes(saver: Saver, thread_id: str, last_step: int) -> int:
    cps = await saver.list_checkpoints(thread_id)
    blobs = await saver.get_blobs([BlobRange(thread_id, c, 0, last_step) for c in Chat.model_fields])
    return sum(len(b.data) for b in blobs) + sum(len(cp.body) for cp in cps)


async def test_300_appends_of_1_kib_store_less_than_twice_the_messages(saver: Saver) -> None:
    app = chat_app(saver, 300)
    snap = await app.ainvoke({}, thread_id="w2")
    assert len(snap.values.messages) == 300
    total = await stored_bytes(saver, "w2", snap.step)
    assert total < 2 * 300 * 1024, total


async def test_unchanged_channels_store_nothing(saver: Saver) -> None:
    app = chat_app(saver, 20)
    await app.ainvoke({"title": "set once, " + "long " * 40}, thread_id="t")
    title_blobs = await saver.get_blobs([BlobRange("t", "title", 0, 100)])
    assert [b.step for b in title_blobs] == [0]
    message_blobs = await saver.get_blobs([BlobRange("t", "messages", 0, 100)])
    assert [b.kind for b in message_blobs] == ["snapshot"] + ["delta"] * 19
    assert all(len(b.data) < 1100 for b in message_blobs)


async def test_snapshot_every_bounds_the_delta_chain(saver: Saver) -> None:
    app = chat_app(saver, 25, size=10, snapshot_every=10)
    snap = await app.ainvoke({}, thread_id="t")
    blobs = await saver.get_blobs([BlobRange("t", "messages", 0, 100)])
    kinds = [b.kind for b in blobs]
    assert [i for i, k in enumerate(kinds) if k == "snapshot"] == [0, 10, 20]
    for past in await app.ahistory("t"):  # every checkpoint still reads back exactly
        assert len(past.values.messages) == past.values.n
    assert snap.values.messages[-1].startswith("00024")


async def test_corrupt_blob_names_thread_and_checkpoint(tmp_path: Path) -> None:
    from graphckpt.savers.sqlite import SqliteSaver

    path = tmp_path / "c.db"
    async with SqliteSaver(path) as saver:
        app = chat_app(saver, 3)
        snap = await app.ainvoke({}, thread_id="victim")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE blobs SET data = x'c1c1c1' WHERE channel = 'messages' AND step = ?", (snap.step,))
    async with SqliteSaver(path) as saver:
        app = chat_app(saver, 3)
        with pytest.raises(CorruptCheckpointError, match=f"checkpoint {snap.checkpoint_id} of thread 'victim'") as info:
            await app.aget_state("victim")
        assert info.value.thread_id == "victim" and info.value.checkpoint_id == snap.checkpoint_id
        parent = snap.parent
        assert parent is not None
        older = await app.aget_state("victim", parent.checkpoint_id)  # only the corrupt checkpoint is affected
        assert older.values.n == snap.values.n - 1


async def test_small_plain_fields_ride_in_the_checkpoint_body(saver: Saver) -> None:
    """A counter that changes every step costs a few bytes in each body instead of a blob row of its own, and its
    value is read back without a blob query."""
    app = chat_app(saver, 10, size=10)
    snap = await app.ainvoke({}, thread_id="t")
    assert await saver.get_blobs([BlobRange("t", c, 0, 100) for c in ("n", "title")]) == []
    assert (await app.aget_state("t", step=4)).values.n == 4
    assert snap.values.n == 10 and snap.values.title == "unchanged"
