"""Retention inside a live thread (``drop_steps``, what ``prune(keep_last=N)`` runs)."""

from __future__ import annotations

import dataclasses

from graphckpt.ids import new_id
from graphckpt.savers.base import Blob, BlobKind, BlobRange, Saver, StoredCheckpoint, StoredWrite
from graphckpt.testing._records import commit_chain, make_checkpoint, new_thread_id


def _w(task: str, data: bytes) -> StoredWrite:
    return StoredWrite(task, "result", 0, data)


class RetentionCases:
    """Cases of :class:`~graphckpt.testing.SaverConformance`; needs its ``saver`` fixture."""

    async def test_drop_steps_keeps_the_last_steps_their_bases_and_fork_points(self, saver: Saver) -> None:
        """Steps 0..7 of a thread, channel ``a`` snapshotted at 0 and 4 (deltas between), ``b`` at every step, a
        fork at step 2. Dropping under step 6 with ``a`` read from step 4 removes steps 3..5 (the fork needs 0..2),
        their kept writes and events, ``b``'s rows 3..5 and ``a``'s row 3; the head keeps its pending writes."""
        t, run = new_thread_id("drop"), new_id()
        cps: list[StoredCheckpoint] = []
        for step in range(8):
            cp = make_checkpoint(t, step, parent=cps[-1] if cps else None, channels={"b": b"b%d" % step})
            kind: BlobKind = "snapshot" if step % 4 == 0 else "delta"
            cp = dataclasses.replace(cp, blobs=[*cp.blobs, Blob(t, "a", step, kind, b"a%d" % step)])
            await saver.commit(cp, expected_head=cps[-1].checkpoint_id if cps else None, run_id=run)
            cps.append(cp)
        await saver.put_kept_writes(t, cps[5].checkpoint_id, [_w("k", b"kept5")], run_id=run)
        await saver.put_kept_writes(t, cps[6].checkpoint_id, [_w("k", b"kept6")], run_id=run)
        await saver.put_writes(t, cps[7].checkpoint_id, [_w("h", b"journal")], run_id=run)
        fork = await commit_chain(saver, new_thread_id("drop-fork"), 1, run_id=new_id(), fork_from=cps[2])
        assert await saver.drop_steps(t, 6, {"a": 4, "b": 6}) == 3
        assert [cp.step for cp in await saver.list_checkpoints(t)] == [7, 6, 2, 1, 0]
        blobs = await saver.get_blobs([BlobRange(t, "a", 0, 7), BlobRange(t, "b", 0, 7)])
        assert [(b.channel, b.step) for b in blobs] == [
            *[("a", s) for s in (0, 1, 2, 4, 5, 6, 7)],
            *[("b", s) for s in (0, 1, 2, 6, 7)],
        ]
        assert await saver.get_kept_writes(t, cps[5].checkpoint_id) == []
        assert await saver.get_kept_writes(t, cps[6].checkpoint_id) == [_w("k", b"kept6")]
        assert await saver.get_writes(t, cps[7].checkpoint_id) == [_w("h", b"journal")]
        events = await saver.read_events([(t, 0, 1 << 30)], after=(-1, -1), limit=10_000)
        assert events and not [e for e in events if 2 < e.step < 6]
        assert (await saver.get_thread(t)).head_checkpoint_id == cps[7].checkpoint_id  # type: ignore[union-attr]
        assert await saver.get_checkpoint(fork[0].thread_id) is not None
        assert await saver.drop_steps(t, 6, {"a": 4}) == 0  # nothing left to drop
        assert await saver.drop_steps(t, 9, {}) == 0  # under the cut would be the head itself: refused
        assert await saver.drop_steps(new_thread_id("nowhere"), 3, {}) == 0
        assert len(await saver.list_checkpoints(t)) == 5
