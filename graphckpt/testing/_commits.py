"""Commit and claim as compare-and-set on the thread's head and owner."""

from __future__ import annotations

import asyncio

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
    assert_unchanged,
    commit_chain,
    make_checkpoint,
    new_thread_id,
    thread_row,
)


class CommitCases:
    """Cases of :class:`~graphckpt.testing.SaverConformance`; needs its ``saver`` fixture."""

    # -- commit: compare-and-set -------------------------------------------------------------------------------------

    async def test_commit_creating_an_existing_thread_conflicts(self, saver: Saver) -> None:
        """``expected_head=None`` means "create the thread"; if it exists, nothing is written."""
        run = new_id()
        [a] = await commit_chain(saver, new_thread_id("exists"), 1, run_id=run)
        again = make_checkpoint(a.thread_id, 1)
        with pytest.raises(ThreadConflictError):
            await saver.commit(again, expected_head=None, run_id=run)
        await assert_unchanged(saver, a.thread_id, a, again)

    async def test_commit_with_a_wrong_expected_head_conflicts(self, saver: Saver) -> None:
        """A stale ``expected_head`` conflicts; nothing is written and the parent's writes survive."""
        run = new_id()
        a, b = await commit_chain(saver, new_thread_id("stale"), 2, run_id=run)
        await saver.put_writes(b.thread_id, b.checkpoint_id, [StoredWrite("t", "result", 0, b"r")], run_id=run)
        late = make_checkpoint(a.thread_id, 2, parent=b, channels={"x": b"late"})
        for wrong in (a.checkpoint_id, new_id()):
            with pytest.raises(ThreadConflictError):
                await saver.commit(late, expected_head=wrong, run_id=run)
            await assert_unchanged(saver, a.thread_id, b, late)
        assert await saver.get_writes(b.thread_id, b.checkpoint_id) == [StoredWrite("t", "result", 0, b"r")]

    async def test_commit_with_a_wrong_run_id_conflicts(self, saver: Saver) -> None:
        """The head matches but the run does not own the thread: conflict, nothing written."""
        [a] = await commit_chain(saver, new_thread_id("notowner"), 1, run_id=new_id())
        b = make_checkpoint(a.thread_id, 1, parent=a, channels={"x": b"b"})
        with pytest.raises(ThreadConflictError):
            await saver.commit(b, expected_head=a.checkpoint_id, run_id=new_id())
        await assert_unchanged(saver, a.thread_id, a, b)

    async def test_commit_at_an_existing_step_conflicts(self, saver: Saver) -> None:
        """Steps are unique within a thread: a second checkpoint at a used step conflicts, nothing written."""
        run = new_id()
        a, b = await commit_chain(saver, new_thread_id("samestep"), 2, run_id=run)
        dup = make_checkpoint(a.thread_id, 1, parent=b)
        with pytest.raises(ThreadConflictError):
            await saver.commit(dup, expected_head=b.checkpoint_id, run_id=run)
        await assert_unchanged(saver, a.thread_id, b, dup)
        assert_stored(await saver.get_checkpoint(a.thread_id, step=1), b)

    async def test_commit_to_an_unknown_thread_with_an_expected_head_fails(self, saver: Saver) -> None:
        """An ``expected_head`` on a thread that does not exist cannot match: the commit fails, nothing written."""
        t = new_thread_id("ghost")
        cp = make_checkpoint(t, 1)
        with pytest.raises((ThreadConflictError, ThreadNotFoundError)):
            await saver.commit(cp, expected_head=new_id(), run_id=new_id())
        assert await saver.get_thread(t) is None
        assert await saver.get_checkpoint(t, cp.checkpoint_id) is None

    async def test_concurrent_commits_exactly_one_wins(self, saver: Saver) -> None:
        """Two writers racing from the same head: one commits, the other gets ``ThreadConflictError``."""
        run = new_id()
        [a] = await commit_chain(saver, new_thread_id("race"), 1, run_id=run)
        one, two = (make_checkpoint(a.thread_id, 1, parent=a, channels={"x": n}) for n in (b"1", b"2"))
        results = await asyncio.gather(
            saver.commit(one, expected_head=a.checkpoint_id, run_id=run),
            saver.commit(two, expected_head=a.checkpoint_id, run_id=run),
            return_exceptions=True,
        )
        assert sorted(type(r).__name__ for r in results) == ["NoneType", "ThreadConflictError"], results
        winner, loser = (one, two) if results[0] is None else (two, one)
        assert_stored(await saver.get_checkpoint(a.thread_id), winner)
        assert await saver.get_checkpoint(a.thread_id, loser.checkpoint_id) is None
        assert await saver.get_blobs([BlobRange(a.thread_id, "x", 1, 1)]) == list(winner.blobs)

    # -- claim -------------------------------------------------------------------------------------------------------

    async def test_claim_transfers_ownership_and_sets_running(self, saver: Saver) -> None:
        """A claim with the right head and owner makes the new run the owner and the thread ``running``."""
        old, new = new_id(), new_id()
        [a] = await commit_chain(saver, new_thread_id("claim"), 1, run_id=old)
        await saver.put_writes(a.thread_id, a.checkpoint_id, [], run_id=old, status="failed", error="boom")
        await saver.claim(a.thread_id, expected_head=a.checkpoint_id, expected_run_id=old, run_id=new)
        row = await thread_row(saver, a.thread_id)
        assert (row.run_id, row.status, row.head_checkpoint_id) == (new, "running", a.checkpoint_id)
        b = make_checkpoint(a.thread_id, 1, parent=a)
        await saver.commit(b, expected_head=a.checkpoint_id, run_id=new)
        assert_stored(await saver.get_checkpoint(a.thread_id), b)

    async def test_claim_with_a_wrong_head_or_owner_conflicts(self, saver: Saver) -> None:
        """A stale head or a previous owner that is no longer the owner conflicts; the owner does not change."""
        old = new_id()
        a, b = await commit_chain(saver, new_thread_id("claimcas"), 2, run_id=old)
        with pytest.raises(ThreadConflictError):
            await saver.claim(a.thread_id, expected_head=a.checkpoint_id, expected_run_id=old, run_id=new_id())
        with pytest.raises(ThreadConflictError):
            await saver.claim(a.thread_id, expected_head=b.checkpoint_id, expected_run_id=new_id(), run_id=new_id())
        assert (await thread_row(saver, a.thread_id)).run_id == old

    async def test_claim_of_an_unknown_thread_is_not_found(self, saver: Saver) -> None:
        with pytest.raises(ThreadNotFoundError):
            await saver.claim(new_thread_id("nope"), expected_head=new_id(), expected_run_id=new_id(), run_id=new_id())

    async def test_the_old_run_cannot_write_after_a_claim(self, saver: Saver) -> None:
        """After a claim, commits and writes with the previous run id conflict and change nothing."""
        old, new = new_id(), new_id()
        [a] = await commit_chain(saver, new_thread_id("takeover"), 1, run_id=old)
        await saver.claim(a.thread_id, expected_head=a.checkpoint_id, expected_run_id=old, run_id=new)
        b = make_checkpoint(a.thread_id, 1, parent=a, channels={"x": b"b"})
        with pytest.raises(ThreadConflictError):
            await saver.commit(b, expected_head=a.checkpoint_id, run_id=old)
        await assert_unchanged(saver, a.thread_id, a, b)
        with pytest.raises(ThreadConflictError):
            await saver.put_writes(a.thread_id, a.checkpoint_id, [StoredWrite("t", "result", 0, b"r")], run_id=old)
        assert await saver.get_writes(a.thread_id, a.checkpoint_id) == []
