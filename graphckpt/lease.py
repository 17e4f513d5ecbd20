"""Leases of running threads (DESIGN.md §6, invariant 9): who this process is, how long a lease lasts, and the
heartbeat that keeps a run's lease alive.

- :func:`owner`: this process as a lease owner: a random worker id made once per process start (again after a
  ``fork``), the host name (``$GRAPHCKPT_HOST`` overrides it), the pid and the process's identity (its start time:
  see :mod:`graphckpt.savers._owners`), so a claim on this host can tell a dead owner from a live one at once.
- :func:`expire_dead`: end the leases of dead processes of this host now (a worker's sweep).
- :func:`lease_seconds`: the lease length: the ``lease_seconds`` given to the app (or the CLI's ``--lease-seconds``),
  else ``$GRAPHCKPT_LEASE_SECONDS``, else :data:`DEFAULT_LEASE_SECONDS`.
- :class:`Heartbeat`: a run's lease, renewed by a background task every third of the lease, never on the super-step's
  path. Before a node or an effect starts, :meth:`Heartbeat.check` costs nothing while the lease is known to be
  fresh; when the process was paused past its lease (SIGSTOP, a long GC, a suspended laptop) it renews first, and a
  lease taken over meanwhile raises :class:`~graphckpt.errors.LeaseLostError` before anything runs. A worker's run
  (:meth:`Heartbeat.watch`) also loses its lease when its queued run is no longer ``running`` under its fence (a
  sweeper re-queued it after a late heartbeat): the heartbeat then fails instead of renewing the thread's lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from typing import TYPE_CHECKING

from graphckpt import ids
from graphckpt.errors import LeaseLostError, ThreadNotFoundError
from graphckpt.savers._owners import host, identity
from graphckpt.savers.base import Owner, Saver

if TYPE_CHECKING:
    from graphckpt.savers.queue import RunQueue

__all__ = ["DEFAULT_LEASE_SECONDS", "LEASE_ENV", "Heartbeat", "expire_dead", "lease_seconds", "owner"]

logger = logging.getLogger("graphckpt")

DEFAULT_LEASE_SECONDS = 30.0
"""How long a lease lasts without a heartbeat; the heartbeat renews it every third of that."""
LEASE_ENV = "GRAPHCKPT_LEASE_SECONDS"
"""The environment variable that sets the lease length for every process that does not pass one."""

_owner: tuple[int, Owner] | None = None


def owner() -> Owner:
    """This process as a lease owner. The worker id is random and new per process start (and per ``fork``)."""
    global _owner
    pid = os.getpid()
    if _owner is None or _owner[0] != pid:
        _owner = (pid, Owner(os.urandom(6).hex(), host(), pid, identity()))
    return _owner[1]


async def expire_dead(saver: Saver) -> int:
    """End now the leases whose owner is a dead process of this host (not yet expired: a ``kill -9``, a crash), so
    what reads only the stored expiry (a worker's sweep, which then re-queues or recovers them) sees them crashed at
    once. Each is a compare-and-set on the epoch read. Returns how many. One read of the threads reported crashed."""
    now = ids.now()
    ended = 0
    for record in await saver.list_threads(status="crashed"):
        held = record.lease
        if held is not None and held.lease_until >= now and held.owner.dead():
            ended += await saver.expire_lease(record.thread_id, epoch=held.epoch)
    return ended


def lease_seconds(given: float | None = None) -> float:
    """The lease length: ``given``, else ``$GRAPHCKPT_LEASE_SECONDS``, else :data:`DEFAULT_LEASE_SECONDS`. A value
    that is not a positive finite number is refused with :class:`ValueError` naming where it came from."""
    where = "lease_seconds"
    value: object = given
    if given is None:
        text = os.environ.get(LEASE_ENV)
        if not text:
            return DEFAULT_LEASE_SECONDS
        where = f"${LEASE_ENV}"
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{where} must be a number of seconds, not {text!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{where} must be a positive number of seconds, not {value!r}")
    return float(value)


class Heartbeat:
    """The lease of run ``run_id`` on ``thread_id``, held from :meth:`start` to :meth:`stop`."""

    def __init__(self, saver: Saver, thread_id: str, run_id: str, seconds: float, until: float) -> None:
        self.saver, self.thread_id, self.run_id, self.seconds = saver, thread_id, run_id, seconds
        self.until = until
        """The lease's expiry as last written (wall clock)."""
        self._fresh_until = time.monotonic() + seconds * 2 / 3
        """Monotonic time until which the lease certainly holds without asking (a margin for clock steps)."""
        self.lost: LeaseLostError | None = None
        self._task: asyncio.Task[None] | None = None
        self._queued: tuple[RunQueue, str] | None = None
        self.requeued = False
        """The lease was lost because a sweeper re-queued this claim's run (see :meth:`watch`)."""

    def watch(self, queue: RunQueue, queued_run: str) -> None:
        """This lease is the claim of ``queued_run`` in ``queue`` (fenced by this run id): each renewal first checks
        that the run is still ``running`` under that fence, so a run a sweeper re-queued (its lease had lapsed) does
        not keep its thread's lease alive: the heartbeat raises :class:`LeaseLostError` instead."""
        self._queued = (queue, queued_run)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._beat())

    async def stop(self, *, release: bool) -> None:
        """Stop renewing; with ``release``, give the lease up (a graceful stop: the thread is nobody's)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if release and (self.lost is None or self.requeued):  # a re-queued run's claim still holds the thread
            with contextlib.suppress(Exception):  # the lease expires by itself if the store is unreachable now
                await self.saver.release(self.thread_id, run_id=self.run_id)

    def fresh(self) -> bool:
        """The lease certainly still holds (no round trip): renewed recently, and not taken over as far as known."""
        return self.lost is None and time.monotonic() < self._fresh_until

    async def check(self) -> None:
        """Before a node or an effect runs: raise :class:`LeaseLostError` if the lease was taken over; renew it
        first when it is not known to be fresh (the process was paused past a heartbeat)."""
        if self.lost is not None:
            raise self.lost
        if not self.fresh():
            await self.renew()

    async def renew(self) -> None:
        until = ids.now() + self.seconds
        started = time.monotonic()
        if self._queued is not None:
            queue, queued_run = self._queued
            record = await queue.get_run(queued_run)
            if record is None or record.fence != self.run_id:  # (a run this claim ended keeps its fence)
                self.requeued = True
                state = "gone" if record is None else f"{record.status} (attempt {record.attempt})"
                self.lost = LeaseLostError(
                    f"run {queued_run} of thread {self.thread_id!r} is {state}, no longer this claim's: its lease "
                    "lapsed and a sweeper re-queued it",
                    thread_id=self.thread_id,
                )
                raise self.lost
        try:
            await self.saver.heartbeat(self.thread_id, run_id=self.run_id, lease_until=until)
        except (LeaseLostError, ThreadNotFoundError) as exc:
            self.lost = exc if isinstance(exc, LeaseLostError) else LeaseLostError(str(exc), thread_id=self.thread_id)
            raise self.lost from None
        self.until = until
        self._fresh_until = started + self.seconds * 2 / 3

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.seconds / 3)
            try:
                await self.renew()
            except LeaseLostError:
                logger.warning("thread %r: lease lost (%s)", self.thread_id, self.lost)
                return
            except Exception as exc:  # the store is unreachable for now: try again at the next beat
                logger.warning("thread %r: heartbeat failed: %r", self.thread_id, exc)
