"""Durable waits (:mod:`graphckpt.savers.waits`): a due wait of an interrupted thread fires once and queues its
resume run with its answer; not before its time; not while the thread still runs at that head; stale once the thread
moved on; the earlier time wins at one checkpoint; many wakers at once fire each wait once."""

from __future__ import annotations

import asyncio

from graphckpt import ids
from graphckpt.ids import new_id
from graphckpt.savers.base import Saver, StoredCheckpoint
from graphckpt.savers.queue import RunQueue
from graphckpt.savers.waits import WaitTable
from graphckpt.testing._records import make_checkpoint, new_thread_id

G = "mod:graph"


def _waits(saver: Saver) -> WaitTable:
    assert isinstance(saver, WaitTable), f"{type(saver).__name__} has no durable waits"
    return saver


async def _interrupted(saver: Saver, name: str, *, graph: str | None = G) -> tuple[str, StoredCheckpoint, str]:
    """A thread stopped ``interrupted`` at its first checkpoint (as a node's interrupt leaves it)."""
    thread_id, run_id = new_thread_id(name), new_id()
    cp = make_checkpoint(thread_id, 0, metadata={"source": "input", "tags": {"graph": graph} if graph else {}})
    await saver.commit(cp, expected_head=None, run_id=run_id)
    await saver.put_writes(thread_id, cp.checkpoint_id, [], run_id=run_id, status="interrupted")
    return thread_id, cp, run_id


async def _runs_of(saver: Saver, thread_id: str) -> list[tuple[str, str, bytes | None]]:
    assert isinstance(saver, RunQueue)
    return [(r.kind, r.status, r.payload) for r in await saver.list_runs(thread_id=thread_id)]


class WaitCases:
    """Cases of :class:`~graphckpt.testing.SaverConformance`; needs its ``saver`` fixture."""

    async def test_a_due_wait_fires_once_and_queues_its_resume(self, saver: Saver) -> None:
        w = _waits(saver)
        thread_id, cp, _ = await _interrupted(saver, "w-due")
        now = ids.now()
        await w.put_wait(thread_id, cp.checkpoint_id, now + 60, b"\x01answer")
        assert thread_id not in await w.wake_due(now)  # not yet
        assert await _runs_of(saver, thread_id) == []
        assert thread_id in await w.wake_due(now + 61)
        assert await _runs_of(saver, thread_id) == [("resume", "queued", b"\x01answer")]
        assert thread_id not in await w.wake_due(now + 62)  # once
        assert len(await _runs_of(saver, thread_id)) == 1
        [row] = [x for x in await w.list_waits() if x.thread_id == thread_id]
        assert row.status == "fired" and row.fired_at == now + 61 and row.run_id is not None
        assert thread_id in [x.thread_id for x in await w.list_waits(status="fired")]
        assert thread_id not in [x.thread_id for x in await w.list_waits(status="pending")]

    async def test_a_wait_of_a_thread_still_running_at_its_head_waits_for_the_stop(self, saver: Saver) -> None:
        w = _waits(saver)
        thread_id, run_id = new_thread_id("w-running"), new_id()
        cp = make_checkpoint(thread_id, 0, metadata={"source": "input", "tags": {"graph": G}})
        await saver.commit(cp, expected_head=None, run_id=run_id)
        now = ids.now()
        await w.put_wait(thread_id, cp.checkpoint_id, now - 1, None)
        assert thread_id not in await w.wake_due(now)
        assert [x.status for x in await w.list_waits() if x.thread_id == thread_id] == ["pending"]
        await saver.put_writes(thread_id, cp.checkpoint_id, [], run_id=run_id, status="interrupted")
        assert thread_id in await w.wake_due(now)
        assert await _runs_of(saver, thread_id) == [("resume", "queued", None)]

    async def test_a_wait_whose_thread_moved_on_goes_stale(self, saver: Saver) -> None:
        w = _waits(saver)
        thread_id, cp, run_id = await _interrupted(saver, "w-stale")
        now = ids.now()
        await w.put_wait(thread_id, cp.checkpoint_id, now + 5, None)
        nxt = make_checkpoint(thread_id, 1, parent=cp, status="done")
        await saver.commit(nxt, expected_head=cp.checkpoint_id, run_id=run_id)  # answered by a person, finished
        assert thread_id not in await w.wake_due(now + 10)
        assert [x.status for x in await w.list_waits() if x.thread_id == thread_id] == ["stale"]
        assert await _runs_of(saver, thread_id) == []
        ungraphed, cp2, _ = await _interrupted(saver, "w-nograph", graph=None)
        await w.put_wait(ungraphed, cp2.checkpoint_id, now, None)  # no worker could run it
        assert ungraphed not in await w.wake_due(now + 1)
        assert [x.status for x in await w.list_waits() if x.thread_id == ungraphed] == ["stale"]

    async def test_the_earlier_time_wins_at_one_checkpoint(self, saver: Saver) -> None:
        w = _waits(saver)
        thread_id, cp, _ = await _interrupted(saver, "w-min")
        now = ids.now()
        await w.put_wait(thread_id, cp.checkpoint_id, now + 30, None)
        await w.put_wait(thread_id, cp.checkpoint_id, now + 90, None)
        [row] = [x for x in await w.list_waits() if x.thread_id == thread_id]
        assert row.wake_at == now + 30 and row.status == "pending"
        assert thread_id in await w.wake_due(now + 31)
        await w.put_wait(thread_id, cp.checkpoint_id, now + 90, b"again")  # after a firing: a new wait
        [row] = [x for x in await w.list_waits() if x.thread_id == thread_id]
        assert (row.wake_at, row.status, row.answer) == (now + 90, "pending", b"again")

    async def test_many_wakers_fire_each_wait_once(self, saver: Saver) -> None:
        w = _waits(saver)
        threads = [await _interrupted(saver, f"w-many{i}") for i in range(8)]
        now = ids.now()
        for thread_id, cp, _ in threads:
            await w.put_wait(thread_id, cp.checkpoint_id, now, None)
        results = await asyncio.gather(*(w.wake_due(now + 1) for _ in range(4)))
        mine = {t for t, _, _ in threads}
        fired = [t for r in results for t in r if t in mine]
        assert sorted(fired) == sorted(mine)  # each once, none twice
        for thread_id in mine:
            assert len(await _runs_of(saver, thread_id)) == 1

    async def test_a_child_threads_wait_never_fires_and_waits_list_by_thread(self, saver: Saver) -> None:
        w = _waits(saver)
        child, run_id = new_thread_id("w-child"), new_id()
        link = {"thread_id": "parent", "checkpoint_id": new_id(), "task_id": "t", "node": "sub", "ns": ["sub:t"]}
        cp = make_checkpoint(child, 0, metadata={"source": "input", "tags": {"graph": G}, "subgraph": link})
        await saver.commit(cp, expected_head=None, run_id=run_id)
        await saver.put_writes(child, cp.checkpoint_id, [], run_id=run_id, status="interrupted")
        other, cp2, _ = await _interrupted(saver, "w-other")
        now = ids.now()
        await w.put_wait(child, cp.checkpoint_id, now, b"\x01woke")
        await w.put_wait(other, cp2.checkpoint_id, now + 60, None)
        [row] = await w.list_waits(thread_id=child)
        assert (row.thread_id, row.checkpoint_id, row.answer) == (child, cp.checkpoint_id, b"\x01woke")
        assert [x.thread_id for x in await w.list_waits(thread_id=other, status="pending")] == [other]
        assert await w.list_waits(thread_id=other, status="fired") == []
        assert child not in await w.wake_due(now + 1)  # its parent's wait stands for it: no run of a child alone
        assert await _runs_of(saver, child) == []
        assert [x.status for x in await w.list_waits(thread_id=child)] == ["stale"]
