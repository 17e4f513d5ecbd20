"""Who is a dead owner (:mod:`graphckpt.savers._owners`), and claims of a dead owner's thread on every saver: the
owner is a real process of this host, killed with SIGKILL; its thread reads ``crashed`` at once; two claimers racing
for it: exactly one wins (a compare-and-set on the lease epoch); a live owner of another host still refuses a claim
until it is taken over."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from graphckpt import ids
from graphckpt.errors import ThreadBusyError, ThreadConflictError
from graphckpt.ids import new_id
from graphckpt.savers._owners import HOST_ENV, host, identity
from graphckpt.savers.base import Owner, Saver
from graphckpt.testing._records import make_checkpoint, new_thread_id, thread_row


def _dead_owner() -> Owner:
    """A process of this host that ran and was SIGKILLed, as its lease named it."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    who = Owner("dead-worker", host(), child.pid, identity(child.pid))
    child.kill()
    child.wait()
    return who


def test_this_process_is_alive_and_a_killed_one_is_dead() -> None:
    me = Owner("me", host(), os.getpid(), identity())
    assert identity() and not me.dead()
    assert _dead_owner().dead()


def test_a_reused_pid_is_not_the_owner() -> None:
    """Our own pid with another start time: the process the lease named is gone."""
    machine, _, started = identity().rpartition(":")
    assert Owner("old", host(), os.getpid(), f"{machine}:{int(started) - 1}").dead()


def test_other_hosts_boots_and_old_leases_are_never_judged_dead() -> None:
    dead = _dead_owner()
    assert not Owner("w", "elsewhere", dead.pid, dead.identity).dead()  # another host
    assert not Owner("w", host(), dead.pid, "00000000:1:" + dead.identity.rpartition(":")[2]).dead()  # other boot
    assert not Owner("w", host(), dead.pid, "").dead()  # written without an identity: its expiry decides


def test_the_host_name_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(HOST_ENV, "simulated")
    assert host() == "simulated"


def test_the_identity_is_stored_with_the_worker_id() -> None:
    who = Owner("w1", "h", 5, "ab12cd34:4026531836:99")
    assert who.stored_worker == "w1/ab12cd34:4026531836:99"
    assert Owner.from_columns(who.stored_worker, "h", 5) == who
    assert Owner.from_columns("w1", "h", 5) == Owner("w1", "h", 5)  # an older row


async def test_a_dead_owners_thread_is_crashed_at_once_and_exactly_one_claimer_wins(saver: Saver) -> None:
    t, run = new_thread_id("dead-race"), new_id()
    cp = make_checkpoint(t, 0)
    dead = _dead_owner()
    await saver.commit(cp, expected_head=None, run_id=run, owner=dead, lease_until=ids.now() + 30)
    row = await thread_row(saver, t)
    assert row.status == "crashed" and row.lease is not None and row.lease.owner == dead
    assert t in {r.thread_id for r in await saver.list_threads(status="crashed")}
    assert t not in {r.thread_id for r in await saver.list_threads(status="running")}
    me = Owner("claimer", host(), os.getpid(), identity())

    async def claim(run_id: str) -> str:
        assert row.lease is not None
        await saver.claim(
            t,
            expected_head=cp.checkpoint_id,
            expected_run_id=run,
            run_id=run_id,
            owner=me,
            lease_until=ids.now() + 30,
            take_epoch=row.lease.epoch,
        )
        return run_id

    outcomes = await asyncio.gather(claim(new_id()), claim(new_id()), return_exceptions=True)
    won = [o for o in outcomes if isinstance(o, str)]
    lost = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(won) == 1 and len(lost) == 1, outcomes
    assert isinstance(lost[0], ThreadConflictError) and "worker claimer" in str(lost[0]), lost  # names the winner
    after = await thread_row(saver, t)
    assert (after.run_id, after.epoch, after.status) == (won[0], 2, "running")


async def test_a_live_lease_refuses_without_its_epoch_and_expires_only_at_its_epoch(saver: Saver) -> None:
    t, run = new_thread_id("far-live"), new_id()
    cp = make_checkpoint(t, 0)
    far = Owner("far", "elsewhere", 1, "")
    await saver.commit(cp, expected_head=None, run_id=run, owner=far, lease_until=ids.now() + 30)
    assert (await thread_row(saver, t)).status == "running"
    with pytest.raises(ThreadBusyError, match="host elsewhere"):
        await saver.claim(t, expected_head=cp.checkpoint_id, expected_run_id=run, run_id=new_id(), take_epoch=7)
    assert not await saver.expire_lease(t, epoch=7)
    assert (await thread_row(saver, t)).status == "running"
    assert await saver.expire_lease(t, epoch=1)
    assert (await thread_row(saver, t)).status == "crashed"
    assert t in {r.thread_id for r in await saver.list_threads(status="crashed")}
