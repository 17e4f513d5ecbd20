"""The run queue (:mod:`graphckpt.savers.queue`): enqueue and reject, one claim per run, one running run per
thread, the commit that stops a thread ends its run, fences, cancel, and the sweeper."""

from __future__ import annotations

import dataclasses

import pytest

from graphckpt import ids
from graphckpt.errors import ThreadBusyError
from graphckpt.ids import new_id
from graphckpt.savers.base import Owner, Saver
from graphckpt.savers.queue import RunQueue, RunRecord
from graphckpt.testing._records import make_checkpoint, new_thread_id

W = Owner("worker-q", "host-q", 7)
G = "mod:graph"


def _queue(saver: Saver) -> RunQueue:
    assert isinstance(saver, RunQueue), f"{type(saver).__name__} has no run queue"
    return saver


def _run(thread_id: str, kind: str = "input", graph: str = G) -> RunRecord:
    return RunRecord(new_id(), thread_id, kind, "queued", graph, b"\x00payload")  # type: ignore[arg-type]


class QueueCases:
    """Cases of :class:`~graphckpt.testing.SaverConformance`; needs its ``saver`` fixture."""

    async def _claim(self, saver: Saver, graphs: tuple[str, ...] = (G,)) -> tuple[RunRecord | None, str]:
        fence = new_id()
        return await _queue(saver).claim_run(W, graphs=graphs, fence=fence, lease_until=ids.now() + 30), fence

    async def _drain(self, saver: Saver) -> None:
        """Claim and end every run another case left queued (the saver may be shared)."""
        while True:
            run, fence = await self._claim(saver)
            if run is None:
                return
            await _queue(saver).finish_run(run.run_id, fence=fence, status="cancelled")

    async def test_a_run_is_claimed_once_and_stored_whole(self, saver: Saver) -> None:
        await self._drain(saver)
        q, t = _queue(saver), new_thread_id("q-claim")
        queued = _run(t)
        await q.enqueue_run(queued, reject_busy=True)
        assert (await q.get_run(queued.run_id)).status == "queued"  # type: ignore[union-attr]
        run, fence = await self._claim(saver)
        assert run is not None and run.run_id == queued.run_id and run.payload == b"\x00payload"
        assert (run.status, run.attempt, run.worker, run.fence) == ("running", 1, "worker-q", fence)
        assert (await self._claim(saver))[0] is None  # nobody else gets it
        assert [r.run_id for r in await q.list_runs(thread_id=t, status="running")] == [queued.run_id]
        await q.finish_run(run.run_id, fence=fence, status="done")
        assert (await q.get_run(run.run_id)).status == "done"  # type: ignore[union-attr]

    async def test_only_the_workers_graphs_are_claimed(self, saver: Saver) -> None:
        await self._drain(saver)
        q, t = _queue(saver), new_thread_id("q-graph")
        await q.enqueue_run(_run(t, graph="other:graph"), reject_busy=True)
        assert (await self._claim(saver))[0] is None
        run, fence = await self._claim(saver, ("other:graph",))
        assert run is not None and run.thread_id == t
        await q.finish_run(run.run_id, fence=fence, status="done")

    async def test_reject_refuses_a_busy_thread_and_enqueue_waits_behind(self, saver: Saver) -> None:
        await self._drain(saver)
        q, t = _queue(saver), new_thread_id("q-busy")
        first, second = _run(t), _run(t, "resume")
        await q.enqueue_run(first, reject_busy=True)
        with pytest.raises(ThreadBusyError, match=f"already has run {first.run_id} queued"):
            await q.enqueue_run(_run(t), reject_busy=True)
        await q.enqueue_run(second, reject_busy=False)
        run, fence = await self._claim(saver)
        assert run is not None and run.run_id == first.run_id
        assert (await self._claim(saver))[0] is None  # one running run per thread: the second waits
        await q.finish_run(run.run_id, fence=fence, status="done")
        run, fence = await self._claim(saver)
        assert run is not None and run.run_id == second.run_id
        await q.finish_run(run.run_id, fence=fence, status="done")

    async def test_a_thread_held_by_a_live_lease_is_busy_and_not_claimed(self, saver: Saver) -> None:
        await self._drain(saver)
        q, t = _queue(saver), new_thread_id("q-leased")
        await saver.commit(
            make_checkpoint(t, 0), expected_head=None, run_id=new_id(), owner=W, lease_until=ids.now() + 30
        )
        with pytest.raises(ThreadBusyError, match="worker-q"):
            await q.enqueue_run(_run(t), reject_busy=True)
        await q.enqueue_run(_run(t, "resume"), reject_busy=False)
        assert (await self._claim(saver))[0] is None

    async def test_the_commit_that_stops_the_thread_ends_its_run(self, saver: Saver) -> None:
        await self._drain(saver)
        q, t = _queue(saver), new_thread_id("q-commit")
        await q.enqueue_run(_run(t), reject_busy=True)
        run, fence = await self._claim(saver)
        assert run is not None
        a = make_checkpoint(t, 0)
        await saver.commit(a, expected_head=None, run_id=fence, owner=W, lease_until=ids.now() + 30)
        assert (await q.get_run(run.run_id)).status == "running"  # type: ignore[union-attr]
        b = make_checkpoint(t, 1, parent=a, status="done")
        await saver.commit(b, expected_head=a.checkpoint_id, run_id=fence)
        assert (await q.get_run(run.run_id)).status == "done"  # type: ignore[union-attr]

    async def test_a_stop_ends_its_run_and_a_stale_fence_changes_nothing(self, saver: Saver) -> None:
        await self._drain(saver)
        q, t = _queue(saver), new_thread_id("q-stop")
        await q.enqueue_run(_run(t), reject_busy=True)
        run, fence = await self._claim(saver)
        assert run is not None
        a = make_checkpoint(t, 0)
        await saver.commit(a, expected_head=None, run_id=fence, owner=W, lease_until=ids.now() + 30)
        await q.finish_run(run.run_id, fence="stale", status="cancelled")  # a zombie's fence: nothing happens
        assert (await q.get_run(run.run_id)).status == "running"  # type: ignore[union-attr]
        await saver.put_writes(t, a.checkpoint_id, [], run_id=fence, status="interrupted")
        assert (await q.get_run(run.run_id)).status == "interrupted"  # type: ignore[union-attr]

    async def test_a_graceful_stop_requeues_and_cancel_takes_only_queued_runs(self, saver: Saver) -> None:
        await self._drain(saver)
        q, t = _queue(saver), new_thread_id("q-requeue")
        queued = _run(t)
        await q.enqueue_run(queued, reject_busy=True)
        run, fence = await self._claim(saver)
        assert run is not None
        assert not await q.cancel_run(run.run_id)  # running: not cancelled
        await q.finish_run(run.run_id, fence=fence, status="queued")
        again, fence2 = await self._claim(saver)
        assert again is not None and again.run_id == queued.run_id and again.attempt == 2
        await q.finish_run(again.run_id, fence=fence2, status="queued")
        assert await q.cancel_run(queued.run_id)
        assert (await q.get_run(queued.run_id)).status == "cancelled"  # type: ignore[union-attr]
        assert (await self._claim(saver))[0] is None

    async def test_delete_takes_only_ended_runs(self, saver: Saver) -> None:
        await self._drain(saver)
        q, t = _queue(saver), new_thread_id("q-delete")
        queued = _run(t)
        await q.enqueue_run(queued, reject_busy=True)
        assert not await q.delete_run(queued.run_id)  # queued: cancel it first
        assert not await q.delete_run("no-such-run")
        run, fence = await self._claim(saver)
        assert run is not None and not await q.delete_run(run.run_id)  # running: nothing deleted
        await q.finish_run(run.run_id, fence=fence, status="cancelled")
        assert await q.delete_run(run.run_id)
        assert await q.get_run(run.run_id) is None and await q.list_runs(thread_id=t) == []
        assert not await q.delete_run(run.run_id)  # gone: nothing more to delete

    async def test_the_sweeper_requeues_dead_runs_and_queues_crashed_threads(self, saver: Saver) -> None:
        await self._drain(saver)
        q, t, crashed = _queue(saver), new_thread_id("q-dead"), new_thread_id("q-crashed")
        await q.enqueue_run(_run(t), reject_busy=True)
        run, _ = await _queue(saver).claim_run(W, graphs=(G,), fence=new_id(), lease_until=ids.now() - 1), None
        assert run is not None
        cp = make_checkpoint(crashed, 0, metadata={"source": "input", "tags": {"graph": G}})
        await saver.commit(cp, expected_head=None, run_id=new_id(), owner=W, lease_until=ids.now() - 1)
        assert await q.requeue_expired(ids.now()) >= 2
        assert (await q.get_run(run.run_id)).status == "queued"  # type: ignore[union-attr]
        [recovery] = await q.list_runs(thread_id=crashed)
        assert (recovery.kind, recovery.status, recovery.graph) == ("resume", "queued", G)
        assert await q.requeue_expired(ids.now()) == 0  # queued once, not again
        await self._drain(saver)

    async def test_the_sweeper_queues_nothing_for_a_crashed_thread_without_a_graph(self, saver: Saver) -> None:
        """A thread run outside the queue (no ``graph`` tag) stays ``crashed``: a run without a graph could never be
        claimed. A queued run without a graph (an older sweeper's) is cancelled, saying why."""
        await self._drain(saver)
        q = _queue(saver)
        plain, odd, tagged = new_thread_id("q-plain"), new_thread_id("q-odd"), new_thread_id("q-tagged")
        for thread_id, tags in ((plain, {"via": "invoke"}), (odd, {"graph": 7}), (tagged, {"graph": G})):
            cp = make_checkpoint(thread_id, 0, metadata={"source": "input", "tags": tags})
            await saver.commit(cp, expected_head=None, run_id=new_id(), owner=W, lease_until=ids.now() - 1)
        stale = RunRecord(new_id(), new_thread_id("q-stale"), "resume", "queued", None, None)
        await q.enqueue_run(stale, reject_busy=True)
        await q.requeue_expired(ids.now())
        assert await q.list_runs(thread_id=plain) == [] and await q.list_runs(thread_id=odd) == []
        [queued] = await q.list_runs(thread_id=tagged)
        assert (queued.kind, queued.status, queued.graph) == ("resume", "queued", G)
        cancelled = await q.get_run(stale.run_id)
        assert cancelled is not None and cancelled.status == "cancelled" and cancelled.ended_at is not None
        assert cancelled.error is not None and "no graph" in cancelled.error
        crashed = {t.thread_id for t in await saver.list_threads(status="crashed")}
        assert {plain, odd} <= crashed  # left for graphckpt recover or a person
        await q.requeue_expired(ids.now())
        assert await q.list_runs(thread_id=plain) == []  # not on a later sweep either
        await self._drain(saver)

    async def _enqueue_in(self, saver: Saver, namespace: str, count: int, start: float) -> list[RunRecord]:
        """``count`` runs of new threads of ``namespace`` (stored as the server does: ``NAMESPACE/ID``), created one
        second apart from ``start`` (so the queue's order does not depend on the clock)."""
        runs = [
            dataclasses.replace(_run(f"{namespace}/{new_thread_id('q-fair')}"), created_at=start + i)
            for i in range(count)
        ]
        for run in runs:
            await _queue(saver).enqueue_run(run, reject_busy=True)
        return runs

    async def test_a_flooding_namespace_does_not_delay_another_past_one_claim(self, saver: Saver) -> None:
        """Issue 24 M8: 150 queued runs of namespace A, then one of B: B's run is among the first two claims."""
        await self._drain(saver)
        a, b, start = f"nsa{new_id()[:8]}", f"nsb{new_id()[:8]}", ids.now() - 1000
        flood = await self._enqueue_in(saver, a, 150, start)
        [late] = await self._enqueue_in(saver, b, 1, start + 500)
        first, f1 = await self._claim(saver)
        second, f2 = await self._claim(saver)
        assert first is not None and second is not None
        assert first.run_id == flood[0].run_id  # nobody runs anything yet: the oldest
        assert second.run_id == late.run_id  # A has a running run, B none: B's, not A's second
        third, f3 = await self._claim(saver)
        assert third is not None and third.run_id == flood[1].run_id  # one running run each: the oldest again
        for run, fence in ((first, f1), (second, f2), (third, f3)):
            await _queue(saver).finish_run(run.run_id, fence=fence, status="done")
        await self._drain(saver)

    async def test_claims_go_to_the_namespace_with_the_fewest_running_runs(self, saver: Saver) -> None:
        """Three namespaces queue 3, 2 and 1 runs in that order; claims held open: the least busy namespace first,
        the oldest run on a tie (threads without ``/`` share the namespace ``""``)."""
        await self._drain(saver)
        a, b, start = f"nsa{new_id()[:8]}", f"nsb{new_id()[:8]}", ids.now() - 1000
        ra = await self._enqueue_in(saver, a, 3, start)
        rb = await self._enqueue_in(saver, b, 2, start + 10)
        rc = dataclasses.replace(_run(new_thread_id("q-fair-plain")), created_at=start + 20)
        await _queue(saver).enqueue_run(rc, reject_busy=True)
        order = []
        for _ in range(6):
            run, _fence = await self._claim(saver)
            assert run is not None
            order.append(run.run_id)
        assert order == [ra[0].run_id, rb[0].run_id, rc.run_id, ra[1].run_id, rb[1].run_id, ra[2].run_id]
        assert (await self._claim(saver))[0] is None
        for run_id in order:
            run = await _queue(saver).get_run(run_id)
            assert run is not None and run.fence is not None
            await _queue(saver).finish_run(run_id, fence=run.fence, status="done")
