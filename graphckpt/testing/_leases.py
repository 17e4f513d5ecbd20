"""Leases (DESIGN.md invariant 9): claims take them, a live one refuses a second claim, an expired one is taken over,
the fence stops the old owner's writes, stops release them, and reads report ``crashed``."""

from __future__ import annotations

import pytest

from graphckpt import ids
from graphckpt.errors import LeaseLostError, ThreadBusyError, ThreadConflictError
from graphckpt.ids import new_id
from graphckpt.savers.base import Owner, Saver, StoredWrite
from graphckpt.testing._records import make_checkpoint, new_thread_id, thread_row

A = Owner("worker-a", "host-a", 101)
B = Owner("worker-b", "host-b", 202)


class LeaseCases:
    """Cases of :class:`~graphckpt.testing.SaverConformance`; needs its ``saver`` fixture."""

    async def test_a_new_thread_is_leased_to_its_creator(self, saver: Saver) -> None:
        t, run = new_thread_id("lease-new"), new_id()
        until = ids.now() + 30
        await saver.commit(make_checkpoint(t, 0), expected_head=None, run_id=run, owner=A, lease_until=until)
        row = await thread_row(saver, t)
        assert row.status == "running" and row.epoch == 1 and row.lease is not None
        assert (row.lease.owner, row.lease.epoch, row.lease.lease_until) == (A, 1, until)

    async def test_a_thread_nobody_claimed_has_no_lease_and_is_not_crashed(self, saver: Saver) -> None:
        """A fresh fork (created without an owner) stays ``running`` with no lease: nobody is on it."""
        t = new_thread_id("lease-none")
        await saver.commit(make_checkpoint(t, 0), expected_head=None, run_id=new_id())
        row = await thread_row(saver, t)
        assert (row.status, row.lease) == ("running", None)
        assert t not in {r.thread_id for r in await saver.list_threads(status="crashed")}
        assert t in {r.thread_id for r in await saver.list_threads(status="running")}

    async def test_a_live_lease_refuses_a_claim_naming_its_owner(self, saver: Saver) -> None:
        t, run = new_thread_id("lease-busy"), new_id()
        cp = make_checkpoint(t, 0)
        await saver.commit(cp, expected_head=None, run_id=run, owner=A, lease_until=ids.now() + 30)
        with pytest.raises(ThreadBusyError, match=r"worker-a \(host host-a, pid 101\).*heartbeat") as info:
            await saver.claim(
                t,
                expected_head=cp.checkpoint_id,
                expected_run_id=run,
                run_id=new_id(),
                owner=B,
                lease_until=ids.now() + 30,
            )
        assert info.value.lease is not None and info.value.lease.owner == A  # type: ignore[attr-defined]
        assert (await thread_row(saver, t)).run_id == run  # nothing changed

    async def test_an_expired_lease_is_crashed_and_taken_over_with_a_new_epoch(self, saver: Saver) -> None:
        t, run = new_thread_id("lease-crash"), new_id()
        cp = make_checkpoint(t, 0)
        await saver.commit(cp, expected_head=None, run_id=run, owner=A, lease_until=ids.now() - 1)
        row = await thread_row(saver, t)
        assert row.status == "crashed" and row.lease is not None and row.lease.owner == A
        assert t in {r.thread_id for r in await saver.list_threads(status="crashed")}
        assert t not in {r.thread_id for r in await saver.list_threads(status="running")}
        new = new_id()
        epoch = await saver.claim(
            t, expected_head=cp.checkpoint_id, expected_run_id=run, run_id=new, owner=B, lease_until=ids.now() + 30
        )
        row = await thread_row(saver, t)
        assert epoch == 2 and row.status == "running" and row.run_id == new
        assert row.lease is not None and (row.lease.owner, row.lease.epoch) == (B, 2)

    async def test_the_old_owner_cannot_write_after_a_takeover(self, saver: Saver) -> None:
        """The fence: commit, put_writes and heartbeat of the taken-over run raise LeaseLostError naming the new
        owner, and write nothing."""
        t, run = new_thread_id("lease-fence"), new_id()
        cp = make_checkpoint(t, 0)
        await saver.commit(cp, expected_head=None, run_id=run, owner=A, lease_until=ids.now() - 1)
        await saver.claim(
            t,
            expected_head=cp.checkpoint_id,
            expected_run_id=run,
            run_id=new_id(),
            owner=B,
            lease_until=ids.now() + 30,
        )
        late = make_checkpoint(t, 1, parent=cp)
        with pytest.raises(LeaseLostError, match="worker-b"):
            await saver.commit(late, expected_head=cp.checkpoint_id, run_id=run)
        with pytest.raises(LeaseLostError, match="worker-b"):
            await saver.put_writes(t, cp.checkpoint_id, [StoredWrite("task", "effect", 0, b"x")], run_id=run)
        with pytest.raises(LeaseLostError, match="worker-b"):
            await saver.heartbeat(t, run_id=run, lease_until=ids.now() + 30)
        assert await saver.get_writes(t, cp.checkpoint_id) == []
        assert await saver.get_checkpoint(t, late.checkpoint_id) is None
        await saver.release(t, run_id=run)  # not the owner: nothing happens
        assert (await thread_row(saver, t)).lease is not None

    async def test_a_race_loser_is_told_the_winner(self, saver: Saver) -> None:
        """Two claims from one read of a crashed thread: the second names the first's owner, not its own ids."""
        t, run = new_thread_id("lease-race"), new_id()
        cp = make_checkpoint(t, 0)
        await saver.commit(cp, expected_head=None, run_id=run, owner=A, lease_until=ids.now() - 1)
        until = ids.now() + 30
        await saver.claim(
            t, expected_head=cp.checkpoint_id, expected_run_id=run, run_id=new_id(), owner=B, lease_until=until
        )
        with pytest.raises(ThreadConflictError, match="worker-b") as info:
            await saver.claim(
                t, expected_head=cp.checkpoint_id, expected_run_id=run, run_id=new_id(), owner=A, lease_until=until
            )
        assert cp.checkpoint_id not in str(info.value)

    async def test_heartbeat_renews_and_release_gives_up(self, saver: Saver) -> None:
        t, run = new_thread_id("lease-beat"), new_id()
        await saver.commit(make_checkpoint(t, 0), expected_head=None, run_id=run, owner=A, lease_until=ids.now() + 1)
        later = ids.now() + 60
        await saver.heartbeat(t, run_id=run, lease_until=later)
        row = await thread_row(saver, t)
        assert row.lease is not None and row.lease.lease_until == later
        await saver.release(t, run_id=run)
        row = await thread_row(saver, t)
        assert (row.status, row.lease, row.epoch) == ("running", None, 1)
        await saver.heartbeat(t, run_id=run, lease_until=later)  # released by its own run: nothing to renew
        assert (await thread_row(saver, t)).lease is None

    async def test_a_stop_or_commit_that_is_not_running_releases_the_lease(self, saver: Saver) -> None:
        t, run = new_thread_id("lease-stop"), new_id()
        a = make_checkpoint(t, 0)
        await saver.commit(a, expected_head=None, run_id=run, owner=A, lease_until=ids.now() + 30)
        await saver.put_writes(t, a.checkpoint_id, [], run_id=run, status="interrupted")
        assert (await thread_row(saver, t)).lease is None
        new = new_id()
        await saver.claim(
            t, expected_head=a.checkpoint_id, expected_run_id=run, run_id=new, owner=A, lease_until=ids.now() + 30
        )
        b = make_checkpoint(t, 1, parent=a, status="done")
        await saver.commit(b, expected_head=a.checkpoint_id, run_id=new)
        row = await thread_row(saver, t)
        assert (row.status, row.lease, row.epoch) == ("done", None, 2)
