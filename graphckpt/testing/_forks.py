"""Forks keep their lineage; deleting a thread keeps what its forks need."""

from __future__ import annotations

import pytest

from graphckpt.errors import ThreadConflictError, ThreadNotFoundError
from graphckpt.ids import new_id
from graphckpt.savers.base import (
    BlobRange,
    Saver,
    StoredWrite,
)
from graphckpt.testing._records import (
    assert_stored,
    blob_keys,
    checkpoint_ids,
    commit_chain,
    make_checkpoint,
    new_thread_id,
    thread_ids,
    thread_row,
)


class ForkAndDeleteCases:
    """Cases of :class:`~graphckpt.testing.SaverConformance`; needs its ``saver`` fixture."""

    # -- forks -------------------------------------------------------------------------------------------------------

    async def test_fork_records_its_lineage_and_leaves_the_source_unchanged(self, saver: Saver) -> None:
        """A fork is a new thread whose first checkpoint's parent is in the source thread. Its row names the
        source thread and checkpoint; it stores only its own checkpoints; the source (row, checkpoints, writes) is
        untouched."""
        run = new_id()
        src = await commit_chain(saver, new_thread_id("src"), 3, run_id=run)
        s = src[0].thread_id
        w = [StoredWrite("t", "result", 0, b"r")]
        await saver.put_writes(s, src[-1].checkpoint_id, w, run_id=run)
        before = await saver.get_thread(s)
        fork = await commit_chain(saver, new_thread_id("fork"), 2, run_id=new_id(), fork_from=src[2])
        f = fork[0].thread_id
        assert (fork[0].parent_thread_id, fork[0].parent_checkpoint_id) == (s, src[2].checkpoint_id)
        assert_stored(await saver.get_checkpoint(f, fork[0].checkpoint_id), fork[0])
        row = await thread_row(saver, f)
        assert (row.parent_thread_id, row.parent_checkpoint_id) == (s, src[2].checkpoint_id)
        assert row.head_checkpoint_id == fork[1].checkpoint_id
        assert checkpoint_ids(await saver.list_checkpoints(f)) == checkpoint_ids(fork[::-1])
        assert await saver.get_checkpoint(f, step=2) is None
        assert await saver.get_checkpoint(f, src[2].checkpoint_id) is None
        assert await saver.get_thread(s) == before
        assert checkpoint_ids(await saver.list_checkpoints(s)) == checkpoint_ids(src[::-1])
        assert await saver.get_writes(s, src[-1].checkpoint_id) == w

    # -- deleting threads --------------------------------------------------------------------------------------------

    async def test_delete_thread_removes_it_everywhere(self, saver: Saver) -> None:
        """A deleted thread without forks is gone: row, list entry, head, checkpoints, blobs and writes."""
        run = new_id()
        cps = await commit_chain(saver, new_thread_id("del"), 2, run_id=run)
        [keep] = await commit_chain(saver, new_thread_id("keep"), 1, run_id=run)
        t = cps[0].thread_id
        await saver.put_writes(t, cps[1].checkpoint_id, [StoredWrite("t", "result", 0, b"r")], run_id=run)
        await saver.delete_thread(t)
        assert await saver.get_thread(t) is None
        assert thread_ids(await saver.list_threads(), [t, keep.thread_id]) == [keep.thread_id]
        assert await saver.get_checkpoint(t) is None
        for cp in cps:
            assert await saver.get_checkpoint(t, cp.checkpoint_id) is None
        assert await saver.list_checkpoints(t) == []
        assert await saver.get_blobs([BlobRange(t, "x", 0, 9)]) == []
        assert await saver.get_writes(t, cps[1].checkpoint_id) == []
        assert_stored(await saver.get_checkpoint(keep.thread_id), keep)

    async def test_delete_of_an_unknown_thread_is_not_found(self, saver: Saver) -> None:
        """Deleting a thread that never existed, or twice, raises ``ThreadNotFoundError``."""
        with pytest.raises(ThreadNotFoundError):
            await saver.delete_thread(new_thread_id("nope"))
        [a] = await commit_chain(saver, new_thread_id("twice"), 1, run_id=new_id())
        await saver.delete_thread(a.thread_id)
        with pytest.raises(ThreadNotFoundError):
            await saver.delete_thread(a.thread_id)

    async def test_deleted_thread_id_can_be_reused(self, saver: Saver) -> None:
        """With no fork depending on it, a deleted thread's id starts afresh: none of the old rows show."""
        old = await commit_chain(saver, new_thread_id("reuse"), 3, run_id=new_id())
        t = old[0].thread_id
        await saver.delete_thread(t)
        [new] = await commit_chain(saver, t, 1, run_id=new_id())
        assert checkpoint_ids(await saver.list_checkpoints(t)) == [new.checkpoint_id]
        assert blob_keys(await saver.get_blobs([BlobRange(t, "x", 0, 9)])) == [(t, "x", 0)]
        assert (await saver.get_blobs([BlobRange(t, "x", 0, 0)]))[0].data == b"x0"
        assert await saver.get_checkpoint(t, old[2].checkpoint_id) is None

    async def test_delete_keeps_the_lineage_a_fork_needs(self, saver: Saver) -> None:
        """Deleting a fork's source keeps its checkpoints and blobs up to the fork point, readable by id; later
        ones are gone; the thread itself is gone; the fork is untouched."""
        run = new_id()
        src = await commit_chain(saver, new_thread_id("src"), 4, run_id=run)
        fork = await commit_chain(saver, new_thread_id("fork"), 2, run_id=run, fork_from=src[1])
        s, f = src[0].thread_id, fork[0].thread_id
        fork_before = await saver.get_thread(f)
        await saver.delete_thread(s)
        assert await saver.get_thread(s) is None
        assert thread_ids(await saver.list_threads(), [s, f]) == [f]
        assert await saver.get_checkpoint(s) is None
        for cp in src[:2]:
            assert_stored(await saver.get_checkpoint(s, cp.checkpoint_id), cp)
        for cp in src[2:]:
            assert await saver.get_checkpoint(s, cp.checkpoint_id) is None
        assert blob_keys(await saver.get_blobs([BlobRange(s, "x", 0, 9)])) == [(s, "x", 0), (s, "x", 1)]
        assert await saver.get_thread(f) == fork_before
        assert checkpoint_ids(await saver.list_checkpoints(f)) == checkpoint_ids(fork[::-1])
        assert blob_keys(await saver.get_blobs([BlobRange(f, "x", 0, 9)])) == [(f, "x", 2), (f, "x", 3)]

    async def test_delete_keeps_lineage_through_a_deleted_intermediate_fork(self, saver: Saver) -> None:
        """A fork of a fork keeps its whole lineage when both ancestors are deleted, in either order."""
        for order in ("middle_first", "root_first"):
            run = new_id()
            root = await commit_chain(saver, new_thread_id("root"), 3, run_id=run)
            mid = await commit_chain(saver, new_thread_id("mid"), 3, run_id=run, fork_from=root[0])  # steps 1, 2, 3
            leaf = await commit_chain(
                saver, new_thread_id("leaf"), 1, run_id=run, fork_from=mid[1]
            )  # step 3, needs mid up to step 2
            first, second = (mid, root) if order == "middle_first" else (root, mid)
            await saver.delete_thread(first[0].thread_id)
            await saver.delete_thread(second[0].thread_id)
            for cp in (root[0], mid[0], mid[1], leaf[0]):
                assert_stored(await saver.get_checkpoint(cp.thread_id, cp.checkpoint_id), cp)
            for cp in (root[1], root[2], mid[2]):
                assert await saver.get_checkpoint(cp.thread_id, cp.checkpoint_id) is None, order
            ranges = [BlobRange(root[0].thread_id, "x", 0, 0), BlobRange(mid[0].thread_id, "x", 1, 2)]
            assert len(await saver.get_blobs(ranges)) == 3

    async def test_deleted_source_id_is_reusable_only_after_its_forks_are_deleted(self, saver: Saver) -> None:
        """While a fork needs a deleted thread's rows, its id cannot be created again; once the fork is deleted
        too, the id is free and the kept rows are gone."""
        run = new_id()
        src = await commit_chain(saver, new_thread_id("src"), 2, run_id=run)
        fork = await commit_chain(saver, new_thread_id("fork"), 1, run_id=run, fork_from=src[0])
        s = src[0].thread_id
        await saver.delete_thread(s)
        with pytest.raises(ThreadConflictError):
            await saver.commit(make_checkpoint(s, 0), expected_head=None, run_id=run)
        assert_stored(await saver.get_checkpoint(s, src[0].checkpoint_id), src[0])
        await saver.delete_thread(fork[0].thread_id)
        assert await saver.get_checkpoint(s, src[0].checkpoint_id) is None
        [again] = await commit_chain(saver, s, 1, run_id=run)
        assert checkpoint_ids(await saver.list_checkpoints(s)) == [again.checkpoint_id]
