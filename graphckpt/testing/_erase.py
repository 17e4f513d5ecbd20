"""Erasure: a delete removes every row holding the thread's data, and ``thread_forks`` names what depends on it."""

from __future__ import annotations

import os

from graphckpt.ids import new_id
from graphckpt.savers.base import BlobRange, Saver, StoredWrite, kept_key
from graphckpt.savers.crons import CronRow, CronTable
from graphckpt.savers.queue import RunQueue, RunRecord
from graphckpt.savers.waits import WaitTable
from graphckpt.testing._records import commit_chain, new_thread_id


async def _events(saver: Saver, thread_id: str) -> list[tuple[int, int, str]]:
    found = await saver.read_events([(thread_id, 0, 1 << 40)], after=(-1, -1), limit=1000)
    return [(e.step, e.seq, e.kind) for e in found]


class EraseCases:
    """Cases of :class:`~graphckpt.testing.SaverConformance`; needs its ``saver`` fixture."""

    async def test_delete_erases_events_writes_runs_and_the_created_row(self, saver: Saver) -> None:
        """After a delete no row names the thread: no checkpoint, blob, pending write (journaled effects
        included), event, run or created-thread row; another thread keeps all of its own."""
        run = new_id()
        t, keep = new_thread_id("erase"), new_thread_id("erase-keep")
        cps = await commit_chain(saver, t, 3, run_id=run)
        await commit_chain(saver, keep, 2, run_id=run)
        effect = [StoredWrite("task", "effect", 0, b"journaled"), StoredWrite("task", "interrupt", 0, b"ask")]
        await saver.put_writes(t, cps[-1].checkpoint_id, effect, run_id=run)
        queue = saver if isinstance(saver, RunQueue) else None
        queued = RunRecord(new_id(), t, "resume", "queued", "mod:graph", b"payload")
        if queue is not None:
            await queue.enqueue_run(queued, reject_busy=False)
            await queue.put_created_thread(t, "{}", 1.0)
        kept_events = await _events(saver, keep)
        assert await _events(saver, t)
        await saver.delete_thread(t)
        assert await saver.get_writes(t, cps[-1].checkpoint_id) == []
        assert await saver.get_blobs([BlobRange(t, "x", 0, 9)]) == []
        assert await saver.list_checkpoints(t) == []
        assert await _events(saver, t) == []
        assert await _events(saver, keep) == kept_events
        if queue is not None:
            assert await queue.get_run(queued.run_id) is None
            assert await queue.get_created_thread(t) is None

    async def test_delete_erases_waits_thread_crons_and_uncommitted_kept_writes(self, saver: Saver) -> None:
        """A delete also removes the thread's durable wait, the crons that run turns of it (a graph cron and another
        thread's cron stay) and kept writes recorded against a checkpoint it never committed; a placeholder kept for a
        fork loses them too and keeps the writes of the checkpoints its fork reads."""
        run = new_id()
        t, other = new_thread_id("erase-w"), new_thread_id("erase-w-other")
        cps = await commit_chain(saver, t, 3, run_id=run)
        fork = await commit_chain(saver, new_thread_id("erase-w-fork"), 1, run_id=run, fork_from=cps[0])
        await commit_chain(saver, other, 1, run_id=run)
        ahead = new_id()  # a checkpoint id the thread never committed (LangGraph's writes before their checkpoint)
        kept = [StoredWrite("task", "result", 0, b"kept-early")]
        await saver.put_kept_writes(t, ahead, kept, run_id=run)
        await saver.put_kept_writes(t, cps[0].checkpoint_id, kept, run_id=run)
        await saver.put_kept_writes(t, cps[2].checkpoint_id, kept, run_id=run)
        assert await saver.get_kept_writes(t, ahead) == kept
        crons = saver if isinstance(saver, CronTable) else None
        waits = saver if isinstance(saver, WaitTable) else None
        mine = [CronRow(new_id(), "* * * * *", "UTC", "mod:graph", t, None, "{}", None, "once", 9e9, 1.0)]
        kept_crons = [
            CronRow(new_id(), "* * * * *", "UTC", "mod:graph", None, None, "{}", None, "once", 9e9, 1.0),
            CronRow(new_id(), "* * * * *", "UTC", "mod:graph", other, None, "{}", None, "once", 9e9, 1.0),
        ]
        if crons is not None:
            for row in mine + kept_crons:
                await crons.put_cron(row)
        if waits is not None:
            await waits.put_wait(t, cps[2].checkpoint_id, 9e9, b"answer")
            await waits.put_wait(other, new_id(), 9e9, None)
        await saver.delete_thread(t)  # a placeholder: the fork reads its step 0
        assert fork and await saver.get_writes(t, kept_key(ahead)) == []
        assert await saver.get_kept_writes(t, cps[2].checkpoint_id) == []
        assert await saver.get_kept_writes(t, cps[0].checkpoint_id) == kept
        if crons is not None:
            ids_left = {c.cron_id for c in await crons.list_crons()}
            assert mine[0].cron_id not in ids_left and {c.cron_id for c in kept_crons} <= ids_left
        if waits is not None:
            assert [w.thread_id for w in await waits.list_waits() if w.thread_id in (t, other)] == [other]
        await saver.delete_thread(fork[0].thread_id)  # the placeholder goes with its last fork
        assert await saver.get_kept_writes(t, cps[0].checkpoint_id) == []

    async def test_thread_forks_names_forks_of_forks_through_placeholders(self, saver: Saver) -> None:
        """``thread_forks`` lists the live threads whose lineage runs through a thread, at any depth, sorted; a
        deleted fork kept as a placeholder is not listed, but the fork that keeps it is."""
        run = new_id()
        src = await commit_chain(saver, new_thread_id("src"), 3, run_id=run)
        mid = await commit_chain(saver, new_thread_id("mid"), 2, run_id=run, fork_from=src[1])
        leaf = await commit_chain(saver, new_thread_id("leaf"), 1, run_id=run, fork_from=mid[0])
        await commit_chain(saver, new_thread_id("other"), 1, run_id=run)
        s, m, f = src[0].thread_id, mid[0].thread_id, leaf[0].thread_id
        assert await saver.thread_forks(s) == sorted([m, f])
        assert await saver.thread_forks(m) == [f]
        assert await saver.thread_forks(f) == []
        await saver.delete_thread(m)  # kept as a placeholder: the leaf needs its step 2
        assert await saver.thread_forks(s) == [f]
        await saver.delete_thread(f)
        assert await saver.thread_forks(s) == []

    async def test_a_placeholder_keeps_events_only_up_to_the_fork_point(self, saver: Saver) -> None:
        """A deleted fork source keeps the events of the steps its fork reads (a stream of the fork replays them)
        and loses the rest."""
        run = new_id()
        src = await commit_chain(saver, new_thread_id("src"), 4, run_id=run)
        await commit_chain(saver, new_thread_id("fork"), 1, run_id=run, fork_from=src[1])
        s = src[0].thread_id
        before = await _events(saver, s)
        await saver.delete_thread(s)
        after = await _events(saver, s)
        assert after == [e for e in before if e[0] <= 1] and after

    async def test_storage_usage_ranks_threads_by_bytes(self, saver: Saver) -> None:
        """``storage_usage`` counts each thread's checkpoints and ranks threads by the bytes of their rows; a
        deleted thread no longer counts."""
        run = new_id()
        small, big = new_thread_id("usage-small"), new_thread_id("usage-big")
        await commit_chain(saver, small, 1, run_id=run)
        cps = await commit_chain(saver, big, 3, run_id=run)
        await saver.put_writes(
            big, cps[-1].checkpoint_id, [StoredWrite("t", "result", 0, os.urandom(5000))], run_id=run
        )
        usage = await saver.storage_usage(top=1000)
        mine = {t.thread_id: t for t in usage.threads if t.thread_id in (small, big)}
        assert [t.thread_id for t in usage.threads if t.thread_id in mine] == [big, small]
        assert (mine[big].checkpoints, mine[small].checkpoints) == (3, 1)
        assert mine[big].bytes >= 5000 > mine[small].bytes > 0
        assert usage.tables["checkpoints"] > 0 and usage.tables["blobs"] > 0 and usage.total > 0
        await saver.delete_thread(big)
        assert big not in {t.thread_id for t in (await saver.storage_usage(top=1000)).threads}
