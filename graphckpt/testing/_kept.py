"""Kept writes (recorded against any checkpoint, kept after the next commit) and thread families."""

from __future__ import annotations

import pytest

from graphckpt.errors import LeaseLostError, ThreadConflictError, ThreadNotFoundError
from graphckpt.ids import new_id
from graphckpt.savers.base import FAMILY_SEP, Saver, StoredWrite
from graphckpt.testing._records import commit_chain, make_checkpoint, new_thread_id


def _w(task: str, index: int, data: bytes) -> StoredWrite:
    return StoredWrite(task, "result", index, data)


class KeptWriteAndFamilyCases:
    """Cases of :class:`~graphckpt.testing.SaverConformance`; needs its ``saver`` fixture."""

    async def test_kept_writes_on_a_past_checkpoint_survive_later_commits(self, saver: Saver) -> None:
        """Kept writes go to any stored checkpoint of the thread, not only the head, and the next commits leave
        them (and the head's own) in place, while ordinary pending writes are still cleared by the next commit."""
        t, run = new_thread_id("kept"), new_id()
        cps = await commit_chain(saver, t, 2, run_id=run)
        await saver.put_kept_writes(t, cps[0].checkpoint_id, [_w("a", 0, b"past"), _w("a", -1, b"neg")], run_id=run)
        await saver.put_kept_writes(t, cps[1].checkpoint_id, [_w("b", 0, b"head")], run_id=run)
        await saver.put_writes(t, cps[1].checkpoint_id, [_w("c", 0, b"plain")], run_id=run)
        nxt = make_checkpoint(t, 2, parent=cps[1])
        await saver.commit(nxt, expected_head=cps[1].checkpoint_id, run_id=run)
        assert await saver.get_kept_writes(t, cps[0].checkpoint_id) == [_w("a", -1, b"neg"), _w("a", 0, b"past")]
        assert await saver.get_kept_writes(t, cps[1].checkpoint_id) == [_w("b", 0, b"head")]
        assert await saver.get_writes(t, cps[1].checkpoint_id) == []  # the plain ones went with the commit
        await saver.put_kept_writes(t, cps[0].checkpoint_id, [_w("a", 0, b"again")], run_id=run)
        assert await saver.get_kept_writes(t, cps[0].checkpoint_id) == [_w("a", -1, b"neg"), _w("a", 0, b"again")]

    async def test_kept_writes_that_arrive_before_their_checkpoint_are_not_lost(self, saver: Saver) -> None:
        """Writes recorded against a checkpoint id not committed yet are read back once it is."""
        t, run = new_thread_id("early"), new_id()
        [first] = await commit_chain(saver, t, 1, run_id=run)
        early = make_checkpoint(t, 1, parent=first)
        await saver.put_kept_writes(t, early.checkpoint_id, [_w("x", 0, b"early")], run_id=run)
        await saver.commit(early, expected_head=first.checkpoint_id, run_id=run)
        assert await saver.get_kept_writes(t, early.checkpoint_id) == [_w("x", 0, b"early")]

    async def test_commit_records_kept_writes_in_its_transaction(self, saver: Saver) -> None:
        """``commit(kept_writes=...)`` replaces the parent's kept writes and adds the new checkpoint's own, all or
        nothing: a commit that loses its compare-and-set records none of them."""
        t, run = new_thread_id("kept-commit"), new_id()
        cps = await commit_chain(saver, t, 2, run_id=run)
        await saver.put_kept_writes(t, cps[1].checkpoint_id, [_w("a", 0, b"whole"), _w("b", 0, b"other")], run_id=run)
        nxt = make_checkpoint(t, 2, parent=cps[1])
        kept = {cps[1].checkpoint_id: [_w("a", 0, b"ref")], nxt.checkpoint_id: [_w("c", 0, b"own")]}
        lost = make_checkpoint(t, 2, parent=cps[0])
        with pytest.raises(ThreadConflictError):
            await saver.commit(lost, expected_head=cps[0].checkpoint_id, run_id=run, kept_writes=kept)
        assert await saver.get_kept_writes(t, cps[1].checkpoint_id) == [_w("a", 0, b"whole"), _w("b", 0, b"other")]
        assert await saver.get_kept_writes(t, nxt.checkpoint_id) == []
        await saver.commit(nxt, expected_head=cps[1].checkpoint_id, run_id=run, kept_writes=kept)
        assert await saver.get_kept_writes(t, cps[1].checkpoint_id) == [_w("a", 0, b"ref"), _w("b", 0, b"other")]
        assert await saver.get_kept_writes(t, nxt.checkpoint_id) == [_w("c", 0, b"own")]

    async def test_kept_writes_check_the_owner_and_the_thread(self, saver: Saver) -> None:
        """The fence still holds; a missing thread is named; ordinary writes still need the head."""
        t, run = new_thread_id("kept-fence"), new_id()
        cps = await commit_chain(saver, t, 2, run_id=run)
        with pytest.raises(LeaseLostError):
            await saver.put_kept_writes(t, cps[0].checkpoint_id, [_w("a", 0, b"x")], run_id="somebody-else")
        with pytest.raises(ThreadNotFoundError):
            await saver.put_kept_writes(new_thread_id("nowhere"), "cp", [_w("a", 0, b"x")], run_id=run)
        with pytest.raises(ThreadConflictError):
            await saver.put_writes(t, cps[0].checkpoint_id, [_w("a", 0, b"x")], run_id=run)
        assert await saver.get_kept_writes(t, cps[0].checkpoint_id) == []

    async def test_kept_writes_go_with_their_thread(self, saver: Saver) -> None:
        """Deleting a thread deletes its kept writes too (their key is not a checkpoint id)."""
        t, run = new_thread_id("kept-gone"), new_id()
        cps = await commit_chain(saver, t, 2, run_id=run)
        await saver.put_kept_writes(t, cps[0].checkpoint_id, [_w("a", 0, b"x")], run_id=run)
        await saver.delete_thread(t)
        assert await saver.get_kept_writes(t, cps[0].checkpoint_id) == []

    async def test_list_family_finds_the_branches_of_one_logical_thread(self, saver: Saver) -> None:
        """The family ``F`` is ``F`` and every ``F~...`` thread (forks and other roots alike), by thread id; a
        thread whose id only shares a prefix (``F-x``, ``Fx``) is not in it, nor are deleted members."""
        f, run = new_thread_id("fam"), new_id()
        [root] = await commit_chain(saver, f, 1, run_id=run)
        await commit_chain(saver, f"{f}{FAMILY_SEP}b1", 1, run_id=run, fork_from=root)
        await commit_chain(saver, f"{f}{FAMILY_SEP}{FAMILY_SEP}ns", 2, run_id=run)
        gone = f"{f}{FAMILY_SEP}gone"
        await commit_chain(saver, gone, 1, run_id=run)
        await saver.delete_thread(gone)
        for other in (f"{f}-x", f"{f}x", f"{f}}}"):  # "}" sorts just before "~"
            await commit_chain(saver, other, 1, run_id=run)
        members = [r.thread_id for r in await saver.list_family(f)]
        assert members == [f, f"{f}{FAMILY_SEP}b1", f"{f}{FAMILY_SEP}{FAMILY_SEP}ns"]
        assert [r.thread_id for r in await saver.list_family(f"{f}{FAMILY_SEP}b1")] == [f"{f}{FAMILY_SEP}b1"]
        assert await saver.list_family(new_thread_id("nobody")) == []
        # by its whole id: ``f`` itself ends in "b1" once in 256 runs (its last two random hex digits)
        fork = next(r for r in await saver.list_family(f) if r.thread_id == f"{f}{FAMILY_SEP}b1")
        assert (fork.parent_thread_id, fork.parent_checkpoint_id) == (f, root.checkpoint_id)
