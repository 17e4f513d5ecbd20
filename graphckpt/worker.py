"""``Worker``: a process's loop that claims queued runs, runs them with heartbeats, and releases them.

Read :meth:`Worker.run` top to bottom: sweep (re-queue what died) -> claim -> run with heartbeat -> release. Many
workers share one PostgreSQL (claims use ``FOR UPDATE SKIP LOCKED``; a ``NOTIFY`` wakes them when a run is queued,
with a poll as the fallback) or a few share one SQLite file (its write lock serializes claims).

- **Heartbeat**: a running run's lease (its thread's, and the run row's) is renewed every third of the lease by
  the engine's heartbeat task, never on the super-step's path.
- **Graceful stop**: :meth:`Worker.stop` (what SIGTERM and Ctrl-C call) only sets a flag. Each running run stops after
  its current step commits, its lease is released and the run goes back to the queue; nothing new is claimed.
- **Cancel**: :meth:`Worker.cancel` (this process) or :meth:`RunQueue.request_cancel` (any process) stops a running
  run after its current step: its lease is released (the thread stays ``running`` with no owner, which recovery
  leaves alone) and the run ends ``cancelled``. A cancel in this process does not wait for a step that does not end:
  after :data:`CANCEL_GRACE` seconds the task running the run is cancelled at its next safe point, once every
  journaled call in flight (a model call being paid for) has returned and been recorded (at most
  :data:`CANCEL_PAID_WAIT` seconds): the step's other work is lost, as in a crash, but no paid call is, and a resume
  gets its journaled result. ``cancel(run_id, immediate=True)`` does not wait for the calls.
- **Store errors**: a run that fails on the store goes back to the queue after a backoff (its thread's lease
  released, so the next attempt claims it at once) and ends ``failed`` after ``store_attempts`` such attempts; a
  store error in the loop itself (sweep, claim) is logged and retried after a bounded exponential backoff: the
  worker outlives a database restart or a stalled writer.
- **Many runs at once** (``concurrency`` > 1): each claimed run is an asyncio task of this process, so async nodes
  of all runs interleave on the loop; sync nodes run on the loop's default executor, which the worker grows to a
  bounded pool of ``concurrency`` threads more than the default (:func:`hold_many`). A SQLite saver then hands its
  commits to its writer thread (``commit_inline`` off), which commits the writes of many runs in one transaction and
  one fsync (:mod:`graphckpt.savers._sqlite_group`), rather than stalling the loop on every commit's fsync. The
  runs share the loop fairly: every step of every run awaits its saver at least once. Leases and fencing are per
  run as with one: each run holds its thread's lease (heartbeat task of its own) and every write checks its epoch.
- **Recovery** (the automatic strategy): the sweeper, at start and then every second, re-queues runs whose worker
  died (lease expired) and queues a resume for every crashed thread nobody queued that has a ``graph`` tag (one
  run outside the queue has none: it stays ``crashed`` for ``graphckpt recover``). It never executes anything
  itself: a claim runs what it queued.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from graphckpt import crons, ids, lease
from graphckpt.errors import (
    GraphckptError,
    InterruptClosedError,
    LeaseLostError,
    NodeError,
    SaverError,
    ThreadBusyError,
    ThreadConflictError,
)
from graphckpt.prune import TTL_SWEEP_EVERY, sweep_expired
from graphckpt.runs import begin_queued, queue_of, unpack
from graphckpt.savers.crons import CronTable
from graphckpt.savers.queue import RunQueue, RunRecord, RunStatus
from graphckpt.savers.waits import WaitTable

if TYPE_CHECKING:
    from graphckpt.app import App
    from graphckpt.engine import Run

__all__ = ["Worker", "hold_many"]

logger = logging.getLogger("graphckpt")

SWEEP_EVERY = 1.0
"""The sweeper runs at least this often (seconds; every half lease when that is shorter): a dead worker's run is
re-queued at most this long after its lease expired (one cheap statement when nothing expired)."""

CANCEL_CHECK = 0.25
"""How often (seconds) a worker looks for cancels asked through the queue (:meth:`RunQueue.request_cancel`) of the
runs it is running: one read for all of them (:meth:`RunQueue.cancels_requested`), never one per step or per run."""

STORE_ATTEMPTS = 5
"""A run whose attempts all ended in a store error (a :class:`~graphckpt.errors.SaverError`: a dropped PostgreSQL
connection, a SQLite write lock held past ``busy_timeout``) this many times ends ``failed``, naming the error. An
attempt that committed a step before its store error does not end the run: it made progress, so the store is not
(only) failing, and it is re-queued whatever its number."""

STORE_BACKOFF = 0.5
"""After a store error the worker waits this long (seconds) before it re-queues the run or tries its own loop's next
statement again, doubling each time, up to :data:`STORE_BACKOFF_MAX`."""

STORE_BACKOFF_MAX = 10.0

CANCEL_GRACE = 0.5
"""A run this process cancels (:meth:`Worker.cancel`) that has not stopped after its step within this many seconds
(a node that blocks, waits for a model, sleeps) has the task running it cancelled: its nodes stop, the step is not
committed, the lease is released and the run ends ``cancelled``."""


CANCEL_PAID_WAIT = 600.0
"""The longest a cancel waits for the journaled calls in flight to return and be recorded (see :data:`CANCEL_GRACE`)
before it stops the run's step anyway."""


class Worker:
    """Runs the queued runs of ``apps`` (``{"module:attr": app}``: the graphs this worker can run; all on one
    database), ``concurrency`` at a time. ``poll`` is the fallback wait (seconds) between claims when nothing wakes
    it; the sweeper runs every :data:`SWEEP_EVERY` seconds. A run is tried ``store_attempts`` times when the store
    fails it, each time after a backoff starting at ``store_backoff`` seconds (see :data:`STORE_ATTEMPTS`). Every
    ``ttl_sweep_every`` seconds it removes the threads whose TTL ran out (:func:`graphckpt.prune.sweep_expired`)."""

    def __init__(
        self,
        apps: Mapping[str, App],
        *,
        concurrency: int = 1,
        poll: float = 1.0,
        store_attempts: int = STORE_ATTEMPTS,
        store_backoff: float = STORE_BACKOFF,
        ttl_sweep_every: float | None = TTL_SWEEP_EVERY,
    ) -> None:
        if not apps:
            raise ValueError("a Worker needs at least one graph")
        if type(concurrency) is not int or concurrency < 1:
            raise ValueError(f"concurrency must be a positive number of runs, not {concurrency!r}")
        if type(store_attempts) is not int or store_attempts < 1:
            raise ValueError(f"store_attempts must be a positive number of attempts, not {store_attempts!r}")
        if isinstance(store_backoff, bool) or not isinstance(store_backoff, int | float) or not store_backoff >= 0:
            raise ValueError(f"store_backoff must be a number of seconds >= 0, not {store_backoff!r}")
        self.store_attempts, self.store_backoff = store_attempts, float(store_backoff)
        self.ttl_sweep_every = ttl_sweep_every
        """Seconds between this worker's sweeps of expired threads (``None``: it does not sweep)."""
        self.apps = dict(apps)
        for ref, app in self.apps.items():
            app.graph_ref = app.graph_ref or ref
        first = next(iter(self.apps.values()))
        self.queue: RunQueue = queue_of(first.saver)
        self.concurrency, self.poll = concurrency, poll
        self.lease_seconds = first.lease_seconds
        self.stopping = False
        self.ran = 0
        """How many runs this worker finished (any end but a re-queue)."""
        self._wake = asyncio.Event()
        self._running: set[asyncio.Task[None]] = set()
        self.on_end: list[Callable[[str], None]] = []
        """Called with the run id each time a run of this worker ends (or goes back to the queue)."""
        self.on_begin: list[Callable[[RunRecord, Run], None]] = []
        """Called with each claimed run and its engine run before the first step: where a listener of the run's
        ephemeral events (``custom``, ``tasks``, ``messages``, ``debug``) attaches itself (the server's hub)."""
        self._executing: dict[str, asyncio.Task[Any]] = {}
        self._engines: dict[str, Run] = {}
        """The engine run of each run this worker executes (what a cancel reads the calls in flight from)."""
        self._killers: set[asyncio.Task[None]] = set()
        """Run id -> the task executing it."""
        self._cancelled: set[str] = set()
        self._stop_as: dict[str, RunStatus] = {}
        """How each cancelled run ends (``cancelled`` unless its cancel said otherwise)."""
        self._killed: set[str] = set()
        """The runs whose task this worker cancelled (a cancel past :data:`CANCEL_GRACE`)."""

    def wake(self) -> None:
        """Claim now rather than at the next poll (a run was just queued by this process)."""
        self._wake.set()

    def executing(self, run_id: str) -> bool:
        """Whether this worker is running ``run_id`` now."""
        return run_id in self._executing

    def cancel(self, run_id: str, *, immediate: bool = False, status: RunStatus = "cancelled") -> bool:
        """Stop the running run ``run_id`` of this worker after its current step, or after :data:`CANCEL_GRACE`
        seconds once its journaled calls in flight are recorded (its lease is released and the run ends ``status``:
        ``cancelled``, or ``interrupted`` when another run interrupted it); ``immediate``: after the grace whatever
        is in flight. ``False`` when this worker is not running it."""
        if run_id not in self._executing:
            return False
        self._cancelled.add(run_id)
        self._stop_as[run_id] = status
        loop = asyncio.get_running_loop()
        if immediate:
            loop.call_later(CANCEL_GRACE, self._kill, run_id)
        else:
            loop.call_later(CANCEL_GRACE, self._kill_later, run_id)
        return True

    def _kill_later(self, run_id: str) -> None:
        killer = asyncio.get_running_loop().create_task(self._kill_when_paid(run_id))
        self._killers.add(killer)
        killer.add_done_callback(self._killers.discard)

    async def _kill_when_paid(self, run_id: str) -> None:
        """:meth:`_kill` once the run's journaled calls in flight are recorded (a model call is never thrown away)."""
        engine = self._engines.get(run_id)
        if engine is not None and engine.journal.calls_in_flight:
            calls = engine.journal.calls_in_flight
            logger.info("worker: run %s stops once its %d call(s) in flight are recorded", run_id, calls)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(engine.journal.settled(), CANCEL_PAID_WAIT)
        self._kill(run_id)

    def _kill(self, run_id: str) -> None:
        task = self._executing.get(run_id)
        if task is not None and run_id in self._cancelled and run_id not in self._killed:
            self._killed.add(run_id)
            task.cancel()

    def stop(self) -> None:
        """Ask the worker to stop gracefully (safe from a signal handler on the loop: it only sets flags)."""
        self.stopping = True
        self._wake.set()

    async def run(self) -> None:
        """The loop, until :meth:`stop`: then the running runs finish their step, release and re-queue."""
        release = hold_many(self.apps.values(), self.concurrency)
        listener = asyncio.ensure_future(self._listen())
        watcher = asyncio.ensure_future(self._watch_cancels())
        next_sweep = next_ttl = 0.0
        failures = 0  # store errors in a row in this loop (sweep, claim): each backs off longer
        try:
            while not self.stopping:
                try:
                    if ids.now() >= next_sweep:  # 1. sweep: re-queue what died (a claim runs it)
                        await lease.expire_dead(self.apps[next(iter(self.apps))].saver)  # dead on this host: at once
                        await self.queue.requeue_expired(ids.now())
                        if isinstance(self.queue, WaitTable) and await self.queue.wake_due(ids.now()):
                            self.wake()  # durable waits due: their resume runs are queued, claim them now
                        if isinstance(self.queue, CronTable) and await crons.fire_due(self.queue, ids.now()):
                            self.wake()  # cron ticks due: their runs are queued (once per tick), claim them now
                        next_sweep = ids.now() + min(self.lease_seconds / 2, SWEEP_EVERY)
                    if self.ttl_sweep_every and ids.now() >= next_ttl:  # expired threads go (one sweeper at a time)
                        next_ttl = ids.now() + self.ttl_sweep_every
                        await sweep_expired(self.apps[next(iter(self.apps))].saver)
                    if len(self._running) >= self.concurrency:
                        await asyncio.wait(self._running, return_when=asyncio.FIRST_COMPLETED)
                        continue
                    fence = ids.new_id()  # 2. claim
                    run = await self.queue.claim_run(
                        lease.owner(),
                        graphs=list(self.apps),
                        fence=fence,
                        lease_until=ids.now() + self.lease_seconds,
                    )
                except SaverError as exc:  # the database restarts, a writer holds the lock: wait and try again
                    failures += 1
                    pause = self._backoff(failures)
                    logger.warning("worker: store error (%s); trying again in %.1f s", exc, pause)
                    await self._idle(pause)
                    continue
                failures = 0
                if run is None:
                    await self._idle()
                    continue
                task = asyncio.ensure_future(self.execute(run, fence))  # 3. run with heartbeat
                self._running.add(task)
                task.add_done_callback(self._running.discard)
        finally:
            self.stopping = True
            for helper in (listener, watcher):
                helper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await helper
            if self._running:  # 4. release: each running run stops after its step and goes back to the queue
                await asyncio.wait(set(self._running))
            release()

    async def execute(self, run: RunRecord, fence: str) -> None:
        """One claimed run: drive it step by step; stop after a step when asked; record how it ended."""
        app = self.apps[run.graph or ""]
        end: RunStatus = "done"
        error: str | None = None
        task = asyncio.current_task()
        assert task is not None
        self._executing[run.run_id] = task
        first_step: int | None = None  # the step this attempt began at: did it commit any before a store error?
        engine: Run | None = None
        try:
            tags = await self._tags(app, run)
            engine = await begin_queued(app.run_options, app.runner, run, fence, tags)
            if engine is None:  # an earlier attempt of this run got the thread to a stop: the run ends as it did
                record = await app.saver.get_thread(run.thread_id)
                raise _Stopped(_ended(record.status) if record is not None else "interrupted")
            if engine.lease is not None:  # a sweeper that re-queues this run ends this attempt's lease
                engine.lease.watch(self.queue, run.run_id)
            first_step = engine.step
            self._engines[run.run_id] = engine
            for hook in self.on_begin:
                hook(run, engine)
            async with contextlib.aclosing(engine.steps()) as steps:  # closing releases the lease
                async for _ in steps:  # a cancel asked through the queue: the cancel watcher reads it
                    if self.stopping or run.run_id in self._cancelled:
                        break
            end = _ended(engine.status)
            if engine.status == "running":
                if run.run_id in self._cancelled:
                    end = self._stop_as.get(run.run_id, "cancelled")
                elif self.stopping:
                    end = "queued"
        except _Stopped as stopped:
            end = stopped.status
        except asyncio.CancelledError:
            if run.run_id not in self._killed:  # not our cancel (the loop shuts down): the lease expires, re-queued
                raise
            task.uncancel()
            end = self._stop_as.get(run.run_id, "cancelled")
        except ThreadBusyError as exc:  # a process outside the queue holds the thread: try again later
            end, error = "queued", str(exc)
        except InterruptClosedError as exc:  # its answer lost the race for the interrupt (e.g. to a person's): no-op
            end, error = "cancelled", str(exc)
        except LeaseLostError as exc:  # another process took the thread over (recover, resume): it goes on there
            end, error = "failed", str(exc)
        except (
            ThreadConflictError
        ) as exc:  # another attempt (say, of this run, re-queued while it ran) moved the thread
            end, error = await self._raced(app, run, exc, started=engine is not None)
        except NodeError as exc:  # the thread is failed; the commit of that stop already ended the run
            end, error = "failed", str(exc)
        except SaverError as exc:  # the store failed the run: the thread is left to this claim; retry it later
            progressed = engine is not None and first_step is not None and engine.step > first_step
            end, error = await self._store_failed(app, run, fence, exc, progressed=progressed)
        except GraphckptError as exc:
            end, error = "failed", f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # the store failed: back to the queue (or its lease expires and the sweeper does it)
            logger.warning("run %s of thread %r: %r; re-queued", run.run_id, run.thread_id, exc)
            end, error = "queued", f"{type(exc).__name__}: {exc}"
        finally:
            self._executing.pop(run.run_id, None)
            self._engines.pop(run.run_id, None)
            self._cancelled.discard(run.run_id)
            self._stop_as.pop(run.run_id, None)
            self._killed.discard(run.run_id)
        with contextlib.suppress(Exception):
            await self.queue.finish_run(run.run_id, fence=fence, status=end, error=error)
        if end != "queued":
            self.ran += 1
        for callback in self.on_end:
            callback(run.run_id)
        logger.info("worker: run %s of thread %r ended %s", run.run_id, run.thread_id, end)

    async def _raced(
        self, app: App, run: RunRecord, exc: ThreadConflictError, *, started: bool = False
    ) -> tuple[RunStatus, str | None]:
        """A claim that found the thread claimed first by another attempt. When a late heartbeat let this run's
        lease expire, the sweeper re-queued the run while its attempt still ran: if that attempt ended the thread
        (its head is tagged with this run), the run ended as the thread did; if the thread is still running, this
        claim is tried again later (a dead attempt's lease expires); else the run fails, naming the conflict."""
        try:
            record = await app.saver.get_thread(run.thread_id)
        except GraphckptError:  # the store is down: try the claim again later
            return "queued", str(exc)
        tags: Any = record.metadata.get("tags") if record is not None else None
        ours = isinstance(tags, Mapping) and tags.get("run") == run.run_id
        if record is not None and ours and record.status in ("done", "interrupted", "failed"):
            return _ended(record.status), None
        if record is not None and record.status == "running" and (ours or not started):
            return "queued", str(exc)  # this run's other attempt drives it (or a dead one's lease expires): later
        return "failed", f"{type(exc).__name__}: {exc}"

    async def _tags(self, app: App, run: RunRecord) -> dict[str, Any]:
        """The run's checkpoint tags: the thread's (its metadata: a new turn or a resume keeps them; a thread that
        has no checkpoint yet, the ones it was created with), or the run's own instead (``submit(tags=...)``), with
        ``graph`` and ``run`` set (merged, not replaced)."""
        record = await app.saver.get_thread(run.thread_id)
        old: Any = record.metadata.get("tags") if record is not None else None
        if record is None:  # a thread created before its first checkpoint (a server's POST /threads)?
            created = await self.queue.get_created_thread(run.thread_id)
            old = json.loads(created[0]) if created is not None else None
        _, own = unpack(app.codec.serde, run)
        if own is not None:
            old = own
        return {**(old if isinstance(old, Mapping) else {}), "graph": run.graph, "run": run.run_id}

    async def _store_failed(
        self, app: App, run: RunRecord, fence: str, exc: SaverError, *, progressed: bool
    ) -> tuple[RunStatus, str]:
        """A run that failed on the store (the engine kept the thread's lease: it is not known safe). Before the
        last attempt: release the lease (so the next attempt claims the thread at once; if the store is still down
        it expires instead, and the thread shows ``crashed`` meanwhile), wait a backoff, and go back to the queue.
        At the last: end the thread and the run ``failed``, naming the error (if the store takes that write; else
        the lease expires and recovery queues a resume later)."""
        if run.attempt >= self.store_attempts and not progressed:
            error = f"store error on {run.attempt} attempt{'s' if run.attempt != 1 else ''}: {exc}"
            logger.warning("run %s of thread %r: %s; failed", run.run_id, run.thread_id, error)
            for _ in range(2):  # twice: the first may get a connection the store's failure broke (then dropped)
                with contextlib.suppress(GraphckptError):  # the stop's commit ends the thread and the run together
                    record = await app.saver.get_thread(run.thread_id)
                    if record is not None and record.run_id == fence and record.status == "running":
                        await app.saver.put_writes(
                            run.thread_id, record.head_checkpoint_id, [], run_id=fence, status="failed", error=error
                        )
                    break
            return "failed", error
        pause = self._backoff(run.attempt)
        logger.warning(
            "run %s of thread %r: store error on attempt %d (%s); re-queued in %.1f s",
            run.run_id,
            run.thread_id,
            run.attempt,
            exc,
            pause,
        )
        with contextlib.suppress(Exception):  # unreachable store: the lease expires by itself
            await app.saver.release(run.thread_id, run_id=fence)
        if not self.stopping:
            await asyncio.sleep(pause)
        return "queued", f"store error on attempt {run.attempt}: {exc}"

    def _backoff(self, failures: int) -> float:
        """The wait after the ``failures``-th store error in a row: exponential, at most :data:`STORE_BACKOFF_MAX`."""
        return float(min(self.store_backoff * 2 ** min(failures - 1, 30), STORE_BACKOFF_MAX))

    async def _idle(self, wait: float | None = None) -> None:
        """Nothing to claim: wait for a wake-up (a NOTIFY, a finished run, stop) or the poll interval."""
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), self.poll if wait is None else wait)

    async def _watch_cancels(self) -> None:
        """Every :data:`CANCEL_CHECK` seconds, one read of which running runs of this worker were asked to cancel
        through the queue (by another process): each stops after its current step."""
        while True:
            await asyncio.sleep(CANCEL_CHECK)
            running = [r for r in self._executing if r not in self._cancelled]
            if running:
                with contextlib.suppress(SaverError):  # the store is down: the next commit says so
                    asked = await self.queue.cancels_requested(running)
                    self._cancelled.update(asked & self._executing.keys())  # not one that ended meanwhile

    async def _listen(self) -> None:
        """PostgreSQL: ``LISTEN`` on the queue's channel and wake the loop on each ``NOTIFY`` (else nothing)."""
        channel = getattr(self.queue, "channel", None)
        dsn: Any = getattr(self.queue, "_dsn", None)
        if channel is None or dsn is None:
            return
        import psycopg

        while not self.stopping:
            try:
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await conn.execute(f'LISTEN "{channel}"')
                    async for _ in conn.notifies():
                        self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the poll keeps the worker going meanwhile
                logger.warning("worker: LISTEN failed (%r); polling every %s s", exc, self.poll)
                await asyncio.sleep(self.poll)


_HELD: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[int]] = weakref.WeakKeyDictionary()
"""Per event loop: [runs its workers hold at once, threads of the pool this module gave it]."""


def hold_many(apps: Any, runs: int) -> Callable[[], None]:
    """Prepare this loop for ``runs`` more runs at once (a worker's ``concurrency``; the in-process workers of a
    server add theirs up): sync nodes get a bounded pool of threads (the default executor's size plus every run
    held: one thread per run that may be in a sync node, so a run never waits for another's ``time.sleep``), and a
    SQLite saver commits on its writer thread, in groups, rather than on the loop. Returns what gives them back
    (the pool keeps its size; it only grows)."""
    loop = asyncio.get_running_loop()
    held = _HELD.setdefault(loop, [0, 0])
    held[0] += runs
    if runs > 1:
        for app in apps:
            if getattr(app.saver, "commit_inline", False):
                app.saver.commit_inline = False
    wanted = min(32, (os.cpu_count() or 1) + 4) + held[0]
    if held[0] > 1 and wanted > held[1]:
        held[1] = wanted
        loop.set_default_executor(ThreadPoolExecutor(max_workers=wanted, thread_name_prefix="graphckpt-node"))

    def release() -> None:
        held[0] -= runs

    return release


class _Stopped(Exception):
    """A claimed run with nothing to run: it ends ``status`` (see :func:`~graphckpt.runs.begin_queued`)."""

    def __init__(self, status: RunStatus) -> None:
        super().__init__(status)
        self.status: RunStatus = status


def _ended(status: str) -> RunStatus:
    return "interrupted" if status == "interrupted" else "failed" if status == "failed" else "done"
