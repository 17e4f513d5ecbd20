"""Delta chunks: every ``CHUNK``-th delta of a channel packs the loose ones before it into one row.

Reading any past checkpoint, forking inside a chunk, resuming after a failure, continuing a finished thread and
exporting must all see exactly the values an unpacked store would give.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import msgpack
import pytest
from pydantic import BaseModel

from graphckpt import END, START, CorruptCheckpointError, NodeError, Saver, StateGraph, ThreadStateError, append, codec
from graphckpt.codec import CHUNK, CHUNK_DELTA_MAX
from graphckpt.savers.base import Blob, BlobRange
from graphckpt.savers.memory import MemorySaver
from graphckpt.savers.sqlite import SqliteSaver
from graphckpt.transfer import export_thread, import_thread


class Log(BaseModel):
    items: Annotated[list[str], append] = []
    n: int = 0
    stop: int = 0
    fail_at: int = -1


def log_app(saver: Saver, item: Callable[[Log], str] = lambda s: f"item-{s.n}", **options: Any) -> Any:
    """``step`` appends ``item(state)`` and counts, until ``n`` reaches ``stop``."""

    def step(s: Log) -> dict[str, Any]:
        return {"items": [item(s)], "n": s.n + 1}

    g = StateGraph(Log)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s.n < s.stop else END)
    return g.compile(saver=saver, recursion_limit=1000, **options)


async def item_blobs(saver: Saver, thread_id: str) -> list[Blob]:
    return await saver.get_blobs([BlobRange(thread_id, "items", 0, 10_000)])


def expected(n: int) -> list[str]:
    return [f"item-{k}" for k in range(n)]


async def test_deltas_are_packed_and_every_past_checkpoint_reads_back(saver: Saver) -> None:
    app = log_app(saver)
    steps = 3 * CHUNK + 5
    await app.ainvoke({"stop": steps}, thread_id="t")
    kinds = [b.kind for b in await item_blobs(saver, "t")]
    # the first append stores the list (step 1), the next ones deltas: packed CHUNK at a time
    assert kinds == ["snapshot"] + ["chunk"] * 3 + ["delta"] * (steps - 1 - 3 * CHUNK)
    history = await app.ahistory("t")
    assert len(history) == steps + 1
    for snap in history:  # one fold over the whole page
        assert snap.values.items == expected(snap.values.n)
    for step in (1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK + 7, steps):  # and one checkpoint at a time
        snap = await app.aget_state("t", step=step)
        assert snap.values.items == expected(step)


async def test_fork_inside_a_chunk_sees_only_its_own_lineage(saver: Saver) -> None:
    app = log_app(saver)
    await app.ainvoke({"stop": 2 * CHUNK + 3}, thread_id="src")
    at = CHUNK + 4  # the source's chunk for steps CHUNK+1 .. 2*CHUNK reaches past the fork point
    fork = await app.afork("src", step=at, update={"stop": at + 2 * CHUNK}, new_thread_id="fork")
    assert fork.values.items == expected(at)
    done = await app.aresume("fork")
    assert done.values.items == expected(at + 2 * CHUNK)
    assert "chunk" in [b.kind for b in await item_blobs(saver, "fork")]
    for snap in await app.ahistory("fork"):  # walks into the source up to the fork point
        assert snap.values.items == expected(snap.values.n)
    again = await app.afork("fork", step=at + CHUNK + 1, update={"stop": at + CHUNK + 3}, new_thread_id="fork2")
    assert (await app.aresume(again.thread_id)).values.items == expected(at + CHUNK + 3)
    source = await app.aget_state("src")
    assert source.values.items == expected(2 * CHUNK + 3)


async def test_resume_in_a_new_app_packs_the_deltas_stored_before_the_failure(saver: Saver) -> None:
    broken = [True]

    def flaky_item(s: Log) -> str:
        if s.n == s.fail_at and broken[0]:
            raise RuntimeError(f"planned failure at n={s.n}")
        return f"item-{s.n}"

    def flaky_app() -> Any:  # a fresh app, as a new process would build: the loose deltas come from storage
        return log_app(saver, flaky_item)

    # the list is stored at step 1, deltas from step 2: at the failure, one chunk and 15 loose deltas are stored
    fail_at, more = CHUNK + 16, CHUNK - 1
    with pytest.raises(NodeError):
        await flaky_app().ainvoke({"stop": fail_at + more, "fail_at": fail_at}, thread_id="t")
    assert [b.kind for b in await item_blobs(saver, "t")].count("delta") == 15
    broken[0] = False
    done = await flaky_app().aresume("t")
    assert done.values.items == expected(fail_at + more)
    # 15 + 31 deltas: packed once more, 14 left. (Without the stored loose ones, 46 would be left unpacked.)
    assert [b.kind for b in await item_blobs(saver, "t")].count("delta") == 15 + more - CHUNK
    for snap in await flaky_app().ahistory("t"):
        assert snap.values.items == expected(snap.values.n)


async def test_new_turns_on_a_done_thread_keep_packing(saver: Saver) -> None:
    app = log_app(saver)
    for total in range(1, 2 * CHUNK + 1):  # one step per turn: an input checkpoint, then the node's
        snap = await app.ainvoke({"stop": total}, thread_id="chat")
        assert snap.values.items == expected(total)
    blobs = await item_blobs(saver, "chat")
    assert len([b for b in blobs if b.kind == "delta"]) < CHUNK
    for snap in await app.ahistory("chat"):
        assert snap.values.items == expected(snap.values.n)


async def test_snapshots_reset_the_packing(saver: Saver) -> None:
    app = log_app(saver, snapshot_every=CHUNK + 8)
    steps = 3 * CHUNK
    await app.ainvoke({"stop": steps}, thread_id="t")
    kinds = [b.kind for b in await item_blobs(saver, "t")]
    assert kinds.count("snapshot") == 3 and "chunk" in kinds
    for snap in await app.ahistory("t"):
        assert snap.values.items == expected(snap.values.n)


async def test_export_and_import_of_a_packed_fork(saver: Saver, tmp_path: Path) -> None:
    app = log_app(saver)
    await app.ainvoke({"stop": 2 * CHUNK + 1}, thread_id="src")
    await app.afork("src", step=CHUNK + 3, update={"stop": 2 * CHUNK + 9}, new_thread_id="fork")
    await app.aresume("fork")
    lines = [line async for line in export_thread(saver, "fork")]
    target = MemorySaver()
    await import_thread(target, lines)
    copy = log_app(target)
    for snap in await copy.ahistory("fork"):
        assert snap.values.items == expected(snap.values.n)
    assert (await copy.aget_state("fork")).values.items == expected(2 * CHUNK + 9)


@pytest.mark.parametrize("bad", [msgpack.packb(["two", ["x"]]), msgpack.packb([2, "x"]), msgpack.packb([2])])
async def test_a_chunk_of_the_wrong_shape_is_a_corrupt_checkpoint(tmp_path: Path, bad: bytes) -> None:
    saver = SqliteSaver(tmp_path / "c.db")
    async with saver:
        app = log_app(saver)
        await app.ainvoke({"stop": CHUNK + 5}, thread_id="t")
        chunk = next(b for b in await item_blobs(saver, "t") if b.kind == "chunk")
        with sqlite3.connect(tmp_path / "c.db") as conn:
            conn.execute("UPDATE blobs SET data = ? WHERE step = ? AND channel = 'items'", (bad, chunk.step))
        with pytest.raises(CorruptCheckpointError, match=r"thread 't'.*unexpected blob"):
            await app.aget_state("t", step=CHUNK)


async def test_large_deltas_keep_their_own_rows_and_are_never_packed(saver: Saver) -> None:
    """The appends at n=10 and n=50 are larger than CHUNK_DELTA_MAX: they keep their rows, the small ones waiting
    before them stay unpacked, and a run resumed in a new app (rebuilding what waits from storage) never packs across
    them: every checkpoint reads exactly what was appended."""
    big = "x" * (CHUNK_DELTA_MAX + 100)
    large_at = (10, 50)

    def sized_app() -> Any:
        return log_app(saver, lambda s: f"item-{s.n}" + (big if s.n in large_at else ""))

    def want(n: int) -> list[str]:
        return [f"item-{k}" + (big if k in large_at else "") for k in range(n)]

    # first run: a chunk after n=10, then n=43..49 wait, n=50 is large, n=51..54 wait when the run ends
    await sized_app().ainvoke({"stop": 55}, thread_id="t")
    await sized_app().ainvoke({"stop": 3 * CHUNK}, thread_id="t")  # a new turn, in a new app
    blobs = await item_blobs(saver, "t")
    large = [b for b in blobs if len(b.data) > CHUNK_DELTA_MAX]
    assert len(large) == 2 and all(b.kind == "delta" for b in large)
    assert [b.kind for b in blobs].count("chunk") == 2
    assert all(len(b.data) <= CHUNK * CHUNK_DELTA_MAX for b in blobs if b.kind == "chunk")
    for snap in await sized_app().ahistory("t"):
        assert snap.values.items == want(snap.values.n)


async def test_importing_a_second_fork_after_the_source_packed_its_deltas(
    saver: Saver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first export carries the source's loose deltas 2..5; by the second export they (and 6..8) sit in one chunk
    # keyed by step 2, a checkpoint the target already has and the import skips: steps 6..8 were lost.
    monkeypatch.setattr(codec, "CHUNK", 8)
    app = log_app(saver)
    await app.ainvoke({"stop": 6}, thread_id="src")  # items stored at step 1, deltas 2..6 stay loose
    await app.afork("src", step=5, update={"stop": 7}, new_thread_id="f1")
    target = MemorySaver()
    await import_thread(target, [line async for line in export_thread(saver, "f1")])
    await app.ainvoke({"stop": 12}, thread_id="src")  # a new turn: deltas 2..9 are packed
    await app.afork("src", step=8, update={"stop": 10}, new_thread_id="f2")
    await import_thread(target, [line async for line in export_thread(saver, "f2")])
    copy = log_app(target)
    head = (await copy.aget_state("f2")).values
    assert head.n == 7 and head.items == expected(7)
    for snap in await copy.ahistory("f2"):
        assert snap.values.items == expected(snap.values.n)


async def test_continuing_an_imported_ancestor_cut_inside_a_chunk(
    saver: Saver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The export of a fork carries the source up to the fork point, with the source's chunk whole (its deltas past
    # the fork point too). Continuing that source in the target (now: through a fork, as it is partial) folded them
    # as well as its own new deltas.
    monkeypatch.setattr(codec, "CHUNK", 4)
    app = log_app(saver)
    await app.ainvoke({"stop": 10}, thread_id="src")  # chunks at 2 (2..5) and 6 (6..9)
    await app.afork("src", step=3, update={"stop": 4}, new_thread_id="f")
    target = MemorySaver()
    await import_thread(target, [line async for line in export_thread(saver, "f")])
    copy = log_app(target)
    assert (await copy.aget_state("src")).values.items == expected(3)
    with pytest.raises(ThreadStateError, match="partial"):  # the source's own run stayed in the source
        await copy.aresume("src")
    head = await copy.aget_state("src")  # continuing it means forking it: the fork reads src's blobs up to the cut
    await copy.afork("src", head.checkpoint_id, new_thread_id="again")
    done = await copy.aresume("again")
    assert done.values.items == expected(10)
    for snap in await copy.ahistory("again"):
        assert snap.values.items == expected(snap.values.n)


async def test_a_resumed_run_packs_at_most_chunk_deltas_of_an_imported_thread(saver: Saver) -> None:
    # An import stores every delta as a row of its own (export splits chunks): the target's thread has many more than
    # CHUNK loose deltas. Continuing it packed them all into one chunk, past the bound on a chunk's size (and on what a
    # run holds in memory to pack).
    source = MemorySaver()
    steps = 3 * CHUNK + 5
    await log_app(source).ainvoke({"stop": steps}, thread_id="t")
    await import_thread(saver, [line async for line in export_thread(source, "t")])
    assert [b.kind for b in await item_blobs(saver, "t")].count("delta") == steps - 1
    copy = log_app(saver)
    done = await copy.ainvoke({"stop": steps + CHUNK}, thread_id="t")
    assert done.values.items == expected(steps + CHUNK)
    chunks = [b for b in await item_blobs(saver, "t") if b.kind == "chunk"]
    assert chunks and all(len(codec.split_chunk(b.data)) <= CHUNK for b in chunks)
    for snap in await copy.ahistory("t"):
        assert snap.values.items == expected(snap.values.n)
