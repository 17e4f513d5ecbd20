"""Blobs stored with their checkpoint, and pending writes."""

from __future__ import annotations

import dataclasses

import pytest

from graphckpt.errors import ThreadConflictError
from graphckpt.ids import new_id
from graphckpt.savers.base import (
    Blob,
    BlobRange,
    Saver,
    StoredWrite,
)
from graphckpt.testing._records import (
    assert_stored,
    blob_keys,
    commit_chain,
    make_checkpoint,
    new_thread_id,
    thread_row,
)


class BlobAndWriteCases:
    """Cases of :class:`~graphckpt.testing.SaverConformance`; needs its ``saver`` fixture."""

    # -- blobs -------------------------------------------------------------------------------------------------------

    async def test_blobs_are_stored_with_their_checkpoint(self, saver: Saver) -> None:
        """The blobs of a commit come back whole (thread, channel, step, kind, bytes), several channels at once."""
        t, run = new_thread_id("blobs"), new_id()
        a = make_checkpoint(t, 0, channels={"notes": b"\x00snap", "verdict": b"v0"})
        b = dataclasses.replace(make_checkpoint(t, 1, parent=a), blobs=[Blob(t, "notes", 1, "delta", b"\xffdelta1")])
        await saver.commit(a, expected_head=None, run_id=run)
        await saver.commit(b, expected_head=a.checkpoint_id, run_id=run)
        got = await saver.get_blobs([BlobRange(t, "notes", 0, 1), BlobRange(t, "verdict", 0, 1)])
        assert got == [*a.blobs[:1], *b.blobs, *a.blobs[1:]]

    async def test_get_thread_and_checkpoint_reads_both(self, saver: Saver) -> None:
        """The thread row and one of its checkpoints, by id or step; the checkpoint is ``None`` when it is not the
        thread's (or the id and step disagree), both are ``None`` when the thread does not exist or was deleted."""
        t, run = new_thread_id("both"), new_id()
        cps = await commit_chain(saver, t, 3, run_id=run)
        record, cp = await saver.get_thread_and_checkpoint(t, cps[1].checkpoint_id)
        assert record is not None and record.head_checkpoint_id == cps[2].checkpoint_id
        assert_stored(cp, cps[1])
        assert_stored((await saver.get_thread_and_checkpoint(t, step=0))[1], cps[0])
        assert_stored((await saver.get_thread_and_checkpoint(t, cps[2].checkpoint_id, step=2))[1], cps[2])
        assert (await saver.get_thread_and_checkpoint(t, cps[2].checkpoint_id, step=1))[1] is None
        assert (await saver.get_thread_and_checkpoint(t, "no-such-checkpoint"))[1] is None
        assert (await saver.get_thread_and_checkpoint(t, step=7))[1] is None
        other = new_thread_id("both-other")
        await commit_chain(saver, other, 1, run_id=run)
        assert (await saver.get_thread_and_checkpoint(other, cps[1].checkpoint_id))[1] is None
        assert await saver.get_thread_and_checkpoint(new_thread_id("missing"), step=0) == (None, None)
        await saver.delete_thread(t)
        assert await saver.get_thread_and_checkpoint(t, cps[1].checkpoint_id) == (None, None)

    async def test_a_chunk_replaces_the_deltas_it_packs(self, saver: Saver) -> None:
        """A ``chunk`` at step ``a`` committed with the checkpoint at step ``b``: the channel's rows of that thread
        with ``a < step < b`` go, the row at ``a`` is replaced; other channels, other threads, rows outside the
        range and a rejected commit's rows stay."""
        t, other, run = new_thread_id("chunk"), new_thread_id("chunk-other"), new_id()
        cps = await commit_chain(
            saver, t, 6, run_id=run
        )  # blobs x0..x5 (snapshots here; kinds are opaque to the saver)
        await commit_chain(saver, other, 3, run_id=run)
        y = dataclasses.replace(make_checkpoint(t, 6, parent=cps[-1]), blobs=[Blob(t, "y", 6, "delta", b"y6")])
        await saver.commit(y, expected_head=cps[-1].checkpoint_id, run_id=run)
        chunk = Blob(t, "x", 2, "chunk", b"\x00packed x2..x7\xff")
        stale = dataclasses.replace(make_checkpoint(t, 7, parent=cps[-1]), blobs=[chunk])
        with pytest.raises(ThreadConflictError):  # wrong head: nothing is deleted
            await saver.commit(stale, expected_head=cps[-1].checkpoint_id, run_id=run)
        assert len(await saver.get_blobs([BlobRange(t, "x", 0, 9)])) == 6
        packed = dataclasses.replace(make_checkpoint(t, 7, parent=y), blobs=[chunk, Blob(t, "y", 7, "delta", b"y7")])
        await saver.commit(packed, expected_head=y.checkpoint_id, run_id=run)
        got = await saver.get_blobs([BlobRange(t, "x", 0, 9)])
        assert [(b.step, b.kind, b.data) for b in got] == [
            (0, "snapshot", b"x0"),
            (1, "snapshot", b"x1"),
            (2, "chunk", chunk.data),
        ]
        assert await saver.get_blobs([BlobRange(t, "x", 2, 2)]) == [chunk]
        assert await saver.get_blobs([BlobRange(t, "x", 3, 9)]) == []
        assert blob_keys(await saver.get_blobs([BlobRange(t, "y", 0, 9)])) == [(t, "y", 6), (t, "y", 7)]
        assert blob_keys(await saver.get_blobs([BlobRange(other, "x", 0, 9)])) == [(other, "x", s) for s in range(3)]

    async def test_get_blobs_range_is_inclusive_on_both_ends(self, saver: Saver) -> None:
        """``min_step <= step <= max_step``."""
        cps = await commit_chain(saver, new_thread_id("range"), 5, run_id=new_id())
        t = cps[0].thread_id
        got = await saver.get_blobs([BlobRange(t, "x", 1, 3)])
        assert blob_keys(got) == [(t, "x", 1), (t, "x", 2), (t, "x", 3)]
        assert [b.data for b in got] == [b"x1", b"x2", b"x3"]

    async def test_get_blobs_across_threads_ordered_by_channel_then_step(self, saver: Saver) -> None:
        """Ranges over a fork and its source come back in one list ordered by ``(channel, step)``, whatever the
        order of the ranges."""
        run = new_id()
        src = await commit_chain(saver, new_thread_id("src"), 3, run_id=run)
        fork = await commit_chain(saver, new_thread_id("fork"), 2, run_id=run, fork_from=src[1])
        s, f = src[0].thread_id, fork[0].thread_id
        ranges = [BlobRange(f, "x", 2, 9), BlobRange(s, "x", 0, 1)]
        assert blob_keys(await saver.get_blobs(ranges)) == [(s, "x", 0), (s, "x", 1), (f, "x", 2), (f, "x", 3)]
        extra = make_checkpoint(f, 4, parent=fork[-1], channels={"a": b"a4", "z": b"z4"})
        await saver.commit(extra, expected_head=fork[-1].checkpoint_id, run_id=run)
        ranges = [BlobRange(f, "z", 0, 9), BlobRange(f, "x", 0, 9), BlobRange(s, "x", 0, 1), BlobRange(f, "a", 0, 9)]
        assert blob_keys(await saver.get_blobs(ranges)) == [
            (f, "a", 4),
            (s, "x", 0),
            (s, "x", 1),
            (f, "x", 2),
            (f, "x", 3),
            (f, "z", 4),
        ]

    async def test_get_blobs_empty_results(self, saver: Saver) -> None:
        """No ranges, an empty range, an unknown channel or thread, or another thread's steps: no blobs."""
        cps = await commit_chain(saver, new_thread_id("empty"), 2, run_id=new_id())
        t = cps[0].thread_id
        assert await saver.get_blobs([]) == []
        assert await saver.get_blobs([BlobRange(t, "x", 1, 0)]) == []
        assert await saver.get_blobs([BlobRange(t, "x", 5, 9)]) == []
        assert await saver.get_blobs([BlobRange(t, "nope", 0, 9)]) == []
        assert await saver.get_blobs([BlobRange(new_thread_id("nope"), "x", 0, 9)]) == []

    async def test_get_blobs_overlapping_ranges_return_each_blob_once(self, saver: Saver) -> None:
        """A blob inside several ranges is returned once."""
        cps = await commit_chain(saver, new_thread_id("overlap"), 3, run_id=new_id())
        t = cps[0].thread_id
        got = await saver.get_blobs([BlobRange(t, "x", 0, 1), BlobRange(t, "x", 1, 2), BlobRange(t, "x", 0, 2)])
        assert blob_keys(got) == [(t, "x", 0), (t, "x", 1), (t, "x", 2)]

    # -- pending writes ----------------------------------------------------------------------------------------------

    async def test_writes_are_ordered_by_task_kind_index(self, saver: Saver) -> None:
        """``get_writes`` orders by ``(task_id, kind, index)``, with ``index`` compared as a number."""
        run = new_id()
        [cp] = await commit_chain(saver, new_thread_id("writes"), 1, run_id=run)
        w = [
            StoredWrite("task1", "effect", 0, b"e0"),
            StoredWrite("task1", "effect", 2, b"e2"),
            StoredWrite("task1", "effect", 10, b"e10"),
            StoredWrite("task1", "interrupt", 0, b"i0"),
            StoredWrite("task1", "resume", 0, b"r0"),
            StoredWrite("task2", "effect", 1, b"\x00"),
        ]
        await saver.put_writes(cp.thread_id, cp.checkpoint_id, [w[5], w[4]], run_id=run)
        await saver.put_writes(cp.thread_id, cp.checkpoint_id, [w[2], w[0], w[3], w[1]], run_id=run)
        assert await saver.get_writes(cp.thread_id, cp.checkpoint_id) == w
        assert await saver.get_writes(cp.thread_id, new_id()) == []
        assert await saver.get_writes(new_thread_id("nope"), cp.checkpoint_id) == []

    async def test_write_with_the_same_key_replaces_the_stored_one(self, saver: Saver) -> None:
        """A write with an existing ``(task_id, kind, index)`` replaces it; other writes stay."""
        run = new_id()
        [cp] = await commit_chain(saver, new_thread_id("replace"), 1, run_id=run)
        first, other = StoredWrite("t", "result", 0, b"old"), StoredWrite("t", "result", 1, b"keep")
        await saver.put_writes(cp.thread_id, cp.checkpoint_id, [first, other], run_id=run)
        await saver.put_writes(cp.thread_id, cp.checkpoint_id, [StoredWrite("t", "result", 0, b"new")], run_id=run)
        assert await saver.get_writes(cp.thread_id, cp.checkpoint_id) == [StoredWrite("t", "result", 0, b"new"), other]

    async def test_writes_of_the_parent_are_deleted_when_the_child_commits(self, saver: Saver) -> None:
        """Committing a child deletes the writes recorded against its parent, and only those."""
        run = new_id()
        [a] = await commit_chain(saver, new_thread_id("a"), 1, run_id=run)
        [other] = await commit_chain(saver, new_thread_id("other"), 1, run_id=run)
        w = [StoredWrite("t", "result", 0, b"r")]
        await saver.put_writes(a.thread_id, a.checkpoint_id, w, run_id=run)
        await saver.put_writes(other.thread_id, other.checkpoint_id, w, run_id=run)
        b = make_checkpoint(a.thread_id, 1, parent=a)
        await saver.commit(b, expected_head=a.checkpoint_id, run_id=run)
        assert await saver.get_writes(a.thread_id, a.checkpoint_id) == []
        assert await saver.get_writes(other.thread_id, other.checkpoint_id) == w
        await saver.put_writes(b.thread_id, b.checkpoint_id, w, run_id=run)
        assert await saver.get_writes(b.thread_id, b.checkpoint_id) == w

    async def test_put_writes_with_status_changes_thread_status_and_error(self, saver: Saver) -> None:
        """``status``/``error`` go to the thread row with the writes; the next commit takes the checkpoint's status
        and clears ``error``."""
        run = new_id()
        [a] = await commit_chain(saver, new_thread_id("status"), 1, run_id=run)
        t = a.thread_id
        w = [StoredWrite("n", "error", 0, b"E")]
        await saver.put_writes(t, a.checkpoint_id, w, run_id=run, status="failed", error="ValueError: boom")
        row = await thread_row(saver, t)
        assert (row.status, row.error) == ("failed", "ValueError: boom")
        assert await saver.get_writes(t, a.checkpoint_id) == w
        await saver.put_writes(t, a.checkpoint_id, [], run_id=run, status="interrupted")
        row = await thread_row(saver, t)
        assert (row.status, row.error) == ("interrupted", None)
        await saver.put_writes(t, a.checkpoint_id, [], run_id=run, status="failed", error="boom")
        b = make_checkpoint(t, 1, parent=a, status="done")
        await saver.commit(b, expected_head=a.checkpoint_id, run_id=run)
        row = await thread_row(saver, t)
        assert (row.status, row.error, row.head_checkpoint_id) == ("done", None, b.checkpoint_id)

    async def test_put_writes_on_a_checkpoint_that_is_not_the_head_conflicts(self, saver: Saver) -> None:
        """Writes go only against the head; against an older checkpoint nothing is written or changed."""
        run = new_id()
        a, b = await commit_chain(saver, new_thread_id("nothead"), 2, run_id=run)
        w = [StoredWrite("t", "result", 0, b"r")]
        with pytest.raises(ThreadConflictError):
            await saver.put_writes(a.thread_id, a.checkpoint_id, w, run_id=run, status="failed", error="x")
        assert await saver.get_writes(a.thread_id, a.checkpoint_id) == []
        row = await thread_row(saver, a.thread_id)
        assert (row.status, row.error, row.head_checkpoint_id) == ("running", None, b.checkpoint_id)

    async def test_put_writes_with_a_wrong_run_id_conflicts(self, saver: Saver) -> None:
        """Only the owning run writes; another run id conflicts and nothing is written or changed."""
        [a] = await commit_chain(saver, new_thread_id("wrongrun"), 1, run_id=new_id())
        w = [StoredWrite("t", "result", 0, b"r")]
        with pytest.raises(ThreadConflictError):
            await saver.put_writes(a.thread_id, a.checkpoint_id, w, run_id=new_id(), status="failed", error="x")
        assert await saver.get_writes(a.thread_id, a.checkpoint_id) == []
        row = await thread_row(saver, a.thread_id)
        assert (row.status, row.error) == ("running", None)
