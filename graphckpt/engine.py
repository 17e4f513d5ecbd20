"""The super-step loop: run the frontier -> apply writes -> route -> commit, until done, interrupted or failed.

One :class:`Run` drives one thread from its head. Each super-step:

1. **run**: every task of the frontier runs concurrently (async nodes on the loop, sync nodes in worker threads).
   Tasks whose results were recorded before a crash are not run again. When several tasks run, each result is
   recorded as a pending write as soon as it is ready (results finishing close together share one transaction).
2. **apply**: the results' updates fold into the state through the reducers *in frontier order*, never finish order.
3. **route**: edges, routers, joins and ``Command.goto`` are evaluated on the new state: the next frontier.
4. **commit**: one checkpoint (changed channels, frontier, metadata) moves the head by compare-and-set.

A node that raises after its retries, or calls ``ctx.interrupt``, stops the run: finished siblings' results and
the error or interrupt are recorded against the head, and the thread becomes ``failed`` or ``interrupted``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import math
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from graphckpt import ids
from graphckpt.checkpoint import Interrupt, NodeUsage, Task, TaskError
from graphckpt.codec import Body, Codec, Loose
from graphckpt.context import Context, NodeInterrupt
from graphckpt.control import END, Command, Send
from graphckpt.errors import (
    InvalidUpdateError,
    NodeError,
    NodeTimeoutError,
    RecursionLimitError,
    SaverError,
    SerializationError,
    ThreadConflictError,
)
from graphckpt.savers.base import Saver, Status, StoredCheckpoint, StoredWrite
from graphckpt.state import ReducerError

if TYPE_CHECKING:
    from graphckpt.graph import NodeSpec, StateGraph

__all__ = [
    "Head",
    "Recorded",
    "RouteError",
    "Run",
    "TaskResult",
    "decode_recorded",
    "frontier_status",
    "note_sync_call",
    "route",
    "step_metadata",
]

logger = logging.getLogger("graphckpt")

WRITE_LINGER = 0.002
"""Group commit: a finished task's result waits this long (seconds) for siblings that finish close behind it, then
all that finished are recorded in one transaction. When every task finishes inside the window, no pending write is
recorded at all: the super-step's commit holds the results. A long-running sibling delays a finished task's
durability by at most this much."""

SYNC_FACADE: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar(
    "graphckpt_sync_facade", default=None
)
"""Set while a run was started through the sync API: a check that says whether this is the only sync call in flight
on its app. Then a super-step whose only task is a *fast* sync node (measured under ``INLINE_MAX_MS`` on average)
without ``ctx`` and without ``timeout`` calls the node directly on the portal loop instead of hopping to a worker
thread (~0.05 ms a step), as a plain function call: the caller is blocked anyway and nothing else runs on that loop.
The node sees no running event loop (so it may call ``asyncio.run``). Everything else (slow or unmeasured nodes,
sync nodes that take ``ctx``, have a timeout or have called the app's sync API, tasks beside other tasks, and any
task while another sync call or a stream is in flight) runs in worker threads, and runs started through the async
API never block their loop."""

INLINE_MAX_MS = 0.5
"""A sync node whose calls took less than this (milliseconds, moving average) may run inline (see SYNC_FACADE)."""

_SYNC_NODE: contextvars.ContextVar[tuple[dict[str, float], str] | None] = contextvars.ContextVar(
    "graphckpt_sync_node", default=None
)
"""Set in a sync node's worker thread: the ``node_ms`` of its run and the node's name (see :func:`note_sync_call`)."""


def note_sync_call(node_ms: dict[str, float]) -> None:
    """Called by each sync call of the app whose sync nodes' durations are ``node_ms``: when a sync node of that app
    makes it (from its worker thread, where it works), the node is never run inline again. On the loop that call
    needs it could not be made (:class:`~graphckpt.errors.SyncCallError`), so a node that does so fine in a thread
    must not start failing once it has been measured fast."""
    running = _SYNC_NODE.get()
    if running is not None and running[0] is node_ms:
        node_ms[running[1]] = math.inf


@dataclass(slots=True)
class Head:
    """A loaded checkpoint: stored row, decoded body and state values."""

    cp: StoredCheckpoint
    body: Body
    values: dict[str, Any]
    loose: Loose = field(default_factory=dict)
    """The thread's delta rows not yet packed into a chunk, which the next commits pack."""


@dataclass(slots=True)
class TaskResult:
    """A finished task: its validated update, extra targets, time and usage."""

    task: Task
    update: dict[str, Any]
    goto: list[str | Send] = field(default_factory=list)
    duration_ms: float = 0.0
    usage: NodeUsage = field(default_factory=lambda: NodeUsage())


@dataclass(slots=True)
class _Failed:
    task: Task
    exc: BaseException


@dataclass(slots=True)
class _Interrupted:
    task: Task
    payload: Any
    index: int
    data: bytes
    """``payload`` encoded: checked storable when the node raised, stored as is with the stop."""


@dataclass(slots=True)
class Recorded:
    """The pending writes recorded against a head, decoded."""

    results: dict[str, TaskResult] = field(default_factory=dict)
    effects: dict[tuple[str, int], Any] = field(default_factory=dict)
    interrupts: dict[tuple[str, int], Any] = field(default_factory=dict)
    answers: dict[tuple[str, int], Any] = field(default_factory=dict)
    errors: dict[str, TaskError] = field(default_factory=dict)

    def open_interrupts(self, tasks: Sequence[Task]) -> list[tuple[Task, int, Any]]:
        """``ctx.interrupt`` calls still waiting for an answer, in frontier order then call order: the order
        ``resume(answer)`` answers them in (stored writes come back in task-id string order, where task 10 sorts
        before task 2)."""
        position = {t.id: i for i, t in enumerate(tasks)}
        waiting = sorted(
            (
                (position[t], i, p)
                for (t, i), p in self.interrupts.items()
                if t in position and (t, i) not in self.answers
            ),
            key=lambda w: (w[0], w[1]),
        )
        return [(tasks[at], i, p) for at, i, p in waiting]


OnCommit = Callable[[Head, list[TaskResult]], None]


class Run:
    """Drives one thread from ``head`` until it is done, interrupted, failed, or out of steps."""

    def __init__(
        self,
        graph: StateGraph,
        codec: Codec,
        saver: Saver,
        *,
        head: Head,
        recorded: Recorded,
        run_id: str,
        interrupt_before: frozenset[str],
        interrupt_after: frozenset[str],
        recursion_limit: int,
        tags: dict[str, Any] | None = None,
        on_commit: OnCommit | None = None,
        node_ms: dict[str, float] | None = None,
    ) -> None:
        self.graph, self.codec, self.saver = graph, codec, saver
        self.head, self.recorded, self.run_id = head, recorded, run_id
        self.interrupt_before, self.interrupt_after = interrupt_before, interrupt_after
        self.recursion_limit = recursion_limit
        self.tags = tags
        self.on_commit = on_commit
        self.node_ms = {} if node_ms is None else node_ms  # sync nodes' moving-average duration (see SYNC_FACADE)
        self.thread_id = head.cp.thread_id
        self.loop = asyncio.get_running_loop()
        self._queue: list[TaskResult] = []
        self._flusher: asyncio.Task[None] | None = None
        self._flush_timer: asyncio.TimerHandle | None = None

    def _may_inline(self, spec: NodeSpec) -> bool:
        average = self.node_ms.get(spec.name)
        if average is None or average >= INLINE_MAX_MS or self.on_commit is not None:
            return False
        only_caller = SYNC_FACADE.get()
        return only_caller is not None and only_caller()

    @property
    def step(self) -> int:
        """The super-step being run (the head's step + 1)."""
        return self.head.cp.step + 1

    async def execute(self) -> Status:
        """The loop. Returns the final status; raises :class:`NodeError` when a node failed."""
        for n in range(self.recursion_limit + 1):
            if not self.head.body.tasks:
                return "done"
            if n and self.head.cp.status == "interrupted":
                return "interrupted"
            if n == self.recursion_limit:
                raise RecursionLimitError(
                    f"thread {self.thread_id!r} reached recursion_limit={self.recursion_limit} at step "
                    f"{self.head.cp.step}; its last checkpoint is kept: resume() continues with a fresh limit"
                )
            results = await self.run_frontier()
            if results is None:
                return "interrupted"
            await self.commit_step(results)
        raise AssertionError("unreachable")

    # -- 1. run --------------------------------------------------------------------------------------------------

    async def run_frontier(self) -> list[TaskResult] | None:
        """Run the tasks without recorded results; ``None`` when a task interrupted (recorded)."""
        tasks = self.head.body.tasks
        todo = [t for t in tasks if t.id not in self.recorded.results]
        outcomes: list[TaskResult | _Failed | _Interrupted]
        if len(todo) == 1:
            outcomes = [await self.run_task(todo[0], record=False)]
        else:
            running = [asyncio.ensure_future(self.run_task(t, record=True)) for t in todo]
            try:
                outcomes = list(await asyncio.gather(*running))
            except BaseException:  # the saver failed or the run was cancelled: stop the siblings too
                for future in running:
                    future.cancel()
                raise
        if self._flush_timer is not None:
            self._flush_timer.cancel()  # every task finished inside the linger: the commit records them all
            self._flush_timer = None
        if self._flusher is not None:
            await self._flusher
            self._flusher = None
        self._queue.clear()  # what was not written is in the step's commit (or the stop's writes) below
        stops = [o for o in outcomes if not isinstance(o, TaskResult)]
        if stops:
            await self.record_stop(stops, outcomes)
            return None
        for o in outcomes:
            assert isinstance(o, TaskResult)
            self.recorded.results[o.task.id] = o
        return [self.recorded.results[t.id] for t in tasks]

    async def run_task(self, task: Task, *, record: bool) -> TaskResult | _Failed | _Interrupted:
        """One task, with its retry policy. Never raises for node errors: returns what happened."""
        spec = self.graph.nodes.get(task.node)
        if spec is None:
            return _Failed(task, InvalidUpdateError(f"task {task.id} names unknown node {task.node!r}"))
        attempt = 0
        while True:
            attempt += 1
            state = task.payload if task.has_payload else self.codec.state.make(self.head.values)
            usage = NodeUsage()
            ctx = Context(self, task, attempt, usage)
            started = time.perf_counter()
            span: list[float] = []  # a sync node's own [start, end] in its worker thread: no queueing counted
            try:
                out = await self._call(spec, state, ctx, alone=not record, span=span)
                update, goto = self._normalize(spec.name, out)
            except NodeInterrupt as intr:
                try:
                    data = self.codec.serde.dumps(intr.payload)  # recorded with the stop: refuse it here, naming it
                except SerializationError as exc:
                    return _Failed(
                        task,
                        SerializationError(
                            f"node {spec.name!r}: the payload of ctx.interrupt #{intr.index} cannot be stored: {exc}"
                        ),
                    )
                return _Interrupted(task, intr.payload, intr.index, data)
            except (InvalidUpdateError, SerializationError) as exc:
                return _Failed(task, exc)
            except (ThreadConflictError, SaverError):
                raise  # the thread moved to another owner, or storage failed: nothing to retry or record here
            except Exception as exc:
                policy = spec.retry
                if policy is None or not policy.should_retry(exc, attempt):
                    return _Failed(task, exc)
                logger.warning(
                    "thread %r node %r attempt %d failed: %r; retrying", self.thread_id, spec.name, attempt, exc
                )
                await asyncio.sleep(policy.wait(attempt))
                continue
            took = ((span[1] - span[0]) if len(span) == 2 else (time.perf_counter() - started)) * 1000
            if not spec.is_async:
                average = self.node_ms.get(spec.name)
                self.node_ms[spec.name] = took if average is None else 0.8 * average + 0.2 * took
            result = TaskResult(task, update, goto, took, usage)
            if record:
                self._enqueue(result)
            return result

    async def _call(
        self, spec: NodeSpec, state: Any, ctx: Context, *, alone: bool = False, span: list[float] | None = None
    ) -> Any:
        args = (state, ctx) if spec.takes_ctx else (state,)
        if alone and not spec.is_async and not spec.takes_ctx and spec.timeout is None and self._may_inline(spec):
            return _call_as_plain_function(spec.fn, *args)
        if spec.is_async:
            coro = spec.fn(*args)
        else:
            context = contextvars.copy_context()
            context.run(_SYNC_NODE.set, (self.node_ms, spec.name))  # see note_sync_call
            run = functools.partial(context.run, spec.fn, *args)
            coro = self.loop.run_in_executor(None, _timed, run, [] if span is None else span)
        started = time.monotonic()
        try:
            if spec.timeout is None:
                return await coro
            return await asyncio.wait_for(coro, spec.timeout)
        except TimeoutError:
            if spec.timeout is None or time.monotonic() - started < spec.timeout:
                raise  # the node's own TimeoutError, not ours
            ctx.abandon()
            raise NodeTimeoutError(f"node {spec.name!r} ran longer than its timeout of {spec.timeout} s") from None
        except asyncio.CancelledError:
            ctx.abandon()
            raise

    def _normalize(self, node: str, out: Any) -> tuple[dict[str, Any], list[str | Send]]:
        if isinstance(out, Command):
            return self.codec.state.validate_update(out.update, node=node), out.targets()
        return self.codec.state.validate_update(out, node=node), []

    # -- the journal a Context writes to ----------------------------------------------------------------------

    def recorded_effect(self, task: Task, index: int) -> tuple[bool, Any]:
        key = (task.id, index)
        return (True, self.recorded.effects[key]) if key in self.recorded.effects else (False, None)

    async def record_effect(self, task: Task, index: int, value: Any) -> None:
        try:
            data = self.codec.serde.dumps(value)
        except SerializationError as exc:
            raise SerializationError(
                f"node {task.node!r}: the result of effect #{index} cannot be journaled: {exc}"
            ) from None
        await self.saver.put_writes(
            self.thread_id,
            self.head.cp.checkpoint_id,
            [StoredWrite(task.id, "effect", index, data)],
            run_id=self.run_id,
        )
        self.recorded.effects[(task.id, index)] = value

    def answer(self, task: Task, index: int) -> tuple[bool, Any]:
        key = (task.id, index)
        return (True, self.recorded.answers[key]) if key in self.recorded.answers else (False, None)

    # -- group commit of pending results ----------------------------------------------------------------------

    def _enqueue(self, result: TaskResult) -> None:
        """Queue a finished task's result; it is written within ``WRITE_LINGER`` seconds if siblings still run."""
        self._queue.append(result)  # encoded only if it is written before the step commits
        if self._flush_timer is None and (self._flusher is None or self._flusher.done()):
            self._flush_timer = self.loop.call_later(WRITE_LINGER, self._start_flush)

    def _start_flush(self) -> None:
        self._flush_timer = None
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        while self._queue:
            try:
                batch = [StoredWrite(r.task.id, "result", 0, self._encode_result(r)) for r in self._queue]
            except SerializationError:
                return  # not storable: the step's commit finds the same value and fails the node that wrote it
            self._queue = []
            if self._flush_timer is not None:
                self._flush_timer.cancel()
                self._flush_timer = None
            await self.saver.put_writes(self.thread_id, self.head.cp.checkpoint_id, batch, run_id=self.run_id)

    def _encode_result(self, r: TaskResult) -> bytes:
        goto = [[g.node, True, g.payload] if isinstance(g, Send) else [g, False, None] for g in r.goto]
        try:
            return self.codec.serde.dumps({"u": r.update, "g": goto, "ms": r.duration_ms, "use": dict(r.usage)})
        except SerializationError as exc:
            raise SerializationError(f"node {r.task.node!r}: {exc}") from None

    # -- stopping on failure or interrupt --------------------------------------------------------------------

    async def record_stop(
        self, stops: Sequence[_Failed | _Interrupted], outcomes: Sequence[TaskResult | _Failed | _Interrupted]
    ) -> None:
        """Record the finished siblings, the errors and the interrupts in one transaction; raise on failure."""
        self._queue.clear()  # superseded: every finished result is written below, with the stop
        stopped = {s.task.id for s in stops}
        writes: list[StoredWrite] = []
        for o in outcomes:
            if isinstance(o, TaskResult) and o.task.id not in stopped:
                # not storable: this task runs again on resume (and fails the same way, visibly)
                with contextlib.suppress(SerializationError):
                    writes.append(StoredWrite(o.task.id, "result", 0, self._encode_result(o)))
        failures = [s for s in stops if isinstance(s, _Failed)]
        for s in stops:
            if isinstance(s, _Failed):
                err = TaskError(s.task.node, s.task.id, type(s.exc).__name__, str(s.exc))
                data = self.codec.serde.dumps([err.node, err.type, err.message])
                writes.append(StoredWrite(s.task.id, "error", 0, data))
                # no result: one written early (its siblings were still running) is replaced, so that the task runs
                # again on resume (a reducer refused that result when the step was folded)
                writes.append(StoredWrite(s.task.id, "result", 0, _NO_RESULT))
            else:
                writes.append(StoredWrite(s.task.id, "interrupt", s.index, s.data))
                self.recorded.interrupts[(s.task.id, s.index)] = s.payload
        status: Status = "failed" if failures else "interrupted"
        error = None
        if failures:
            first = failures[0]
            error = str(TaskError(first.task.node, first.task.id, type(first.exc).__name__, str(first.exc)))
        await self.saver.put_writes(
            self.thread_id, self.head.cp.checkpoint_id, writes, run_id=self.run_id, status=status, error=error
        )
        for o in outcomes:
            if isinstance(o, TaskResult) and o.task.id not in stopped:
                self.recorded.results[o.task.id] = o
        logger.info("thread %r step %d %s", self.thread_id, self.step, status)
        if failures:
            first = failures[0]
            if isinstance(first.exc, (InvalidUpdateError, SerializationError)):
                raise first.exc  # the engine's own verdict on the node's output: already names node and field
            raise NodeError(
                f"thread {self.thread_id!r} step {self.step}: node {first.task.node!r} failed: "
                f"{type(first.exc).__name__}: {first.exc}",
                thread_id=self.thread_id,
                node=first.task.node,
                step=self.step,
            ) from first.exc

    # -- 2-4. apply, route, commit -----------------------------------------------------------------------------

    async def commit_step(self, results: list[TaskResult]) -> None:
        """Fold the results into the state, route, and commit the next checkpoint."""
        try:
            values, writes = self.codec.state.apply(
                self.head.values, [r.update for r in results], sources=[r.task.node for r in results]
            )
        except ReducerError as exc:  # the node whose update the reducer refused failed; its siblings' results stay
            await self.record_stop([_Failed(results[exc.update].task, exc)], results)
            raise AssertionError("unreachable") from None
        checkpoint_id = ids.new_id()
        try:
            tasks, barriers = route(self.graph, values, results, self.head.body.barriers, checkpoint_id, self.codec)
        except RouteError as exc:
            await self.record_stop([_Failed(exc.task, exc.cause)], results)
            raise AssertionError("unreachable") from None
        status, interrupts = frontier_status(tasks, results, self.interrupt_before, self.interrupt_after)
        step = self.head.cp.step + 1
        channels, inline, full = self.codec.carry_over(self.head.body, self.head.values)
        body = Body(tasks, channels, self.head.body.lineage, interrupts, barriers, self.codec.version, inline)
        loose = {name: list(rows) for name, rows in self.head.loose.items()}
        try:
            blobs = self.codec.channel_blobs(
                self.thread_id, step, values, writes, channels, inline, full=full, loose=loose
            )
            encoded = self.codec.encode_body(body, checkpoint_id)
        except SerializationError as exc:  # a value validated but cannot be stored: the node that wrote it failed
            field = exc.field
            culprit = next((r.task for r in results if field in r.update), results[0].task)
            what = f"its update of {field!r}" if field else "a Send payload it routed"
            failure = SerializationError(f"node {culprit.node!r}: {what} cannot be stored: {exc}", field=field)
            await self.record_stop([_Failed(culprit, failure)], results)
            raise AssertionError("unreachable") from None
        cp = StoredCheckpoint(
            thread_id=self.thread_id,
            checkpoint_id=checkpoint_id,
            parent_thread_id=self.thread_id,
            parent_checkpoint_id=self.head.cp.checkpoint_id,
            step=step,
            created_at=ids.now(),
            status=status,
            metadata=step_metadata("loop", step, results, self.tags),
            body=encoded,
            blobs=blobs,
        )
        await self.saver.commit(cp, expected_head=self.head.cp.checkpoint_id, run_id=self.run_id)
        self.head = Head(cp, body, values, loose)
        self.recorded = Recorded()
        if logger.isEnabledFor(logging.INFO):
            logger.info(
                "thread %r step %d ran %s -> checkpoint %s, next %s",
                self.thread_id,
                step,
                [r.task.node for r in results],
                checkpoint_id,
                [t.node for t in tasks] or "END",
            )
        if self.on_commit is not None:
            self.on_commit(self.head, results)
            await asyncio.sleep(0)  # let the stream's consumer see this step now (inline commits never yield)


def _timed(run: Callable[[], Any], span: list[float]) -> Any:
    """``run()`` in a worker thread, noting in ``span`` when it started and ended there (the time a task waited for a
    free worker is not the node's)."""
    span.append(time.perf_counter())
    try:
        return run()
    finally:
        span.append(time.perf_counter())


def _call_as_plain_function(fn: Callable[..., Any], *args: Any) -> Any:
    """Call a sync node on the loop's thread as if no event loop were running there (see ``SYNC_FACADE``)."""
    loop = asyncio.get_running_loop()
    asyncio._set_running_loop(None)
    try:
        return contextvars.copy_context().run(fn, *args)
    finally:
        asyncio._set_running_loop(loop)


class RouteError(Exception):
    """Routing after ``task`` failed with ``cause`` (a router raised, or named an unknown node)."""

    def __init__(self, task: Task, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.task, self.cause = task, cause


def route(
    graph: StateGraph,
    values: dict[str, Any],
    results: Sequence[TaskResult],
    barriers_before: dict[str, list[str]],
    checkpoint_id: str,
    codec: Codec,
) -> tuple[list[Task], dict[str, list[str]]]:
    """The next frontier: for each result in order, its ``goto`` targets, static edges, router picks and completed
    joins. Plain targets are deduplicated (first occurrence wins); every ``Send`` is its own task."""
    targets: list[tuple[str, bool, Any]] = []
    plain: set[str] = set()
    barriers = {k: list(v) for k, v in barriers_before.items()}
    state: Any = None

    def add(target: Any, source: Task) -> None:
        if isinstance(target, Send):
            if target.node not in graph.nodes:
                raise RouteError(source, InvalidUpdateError(f"{source.node}: Send to unknown node {target.node!r}"))
            targets.append((target.node, True, target.payload))
        elif target == END or target is None:
            return
        elif not isinstance(target, str) or target not in graph.nodes:
            raise RouteError(source, InvalidUpdateError(f"{source.node}: routes to unknown node {target!r}"))
        elif target not in plain:
            plain.add(target)
            targets.append((target, False, None))

    for r in results:
        node = r.task.node
        for g in r.goto:
            add(g, r.task)
        for a, b in graph.edges:
            if a == node:
                add(b, r.task)
        for br in graph.branches:
            if br.source != node:
                continue
            if state is None:
                state = codec.state.make(values)
            try:
                picked = br.router(state)
            except Exception as exc:
                raise RouteError(r.task, exc) from exc
            for item in picked if isinstance(picked, (list, tuple)) else [picked]:
                if br.path_map is not None and not isinstance(item, Send):
                    if not _is_key_of(item, br.path_map):
                        raise RouteError(
                            r.task, InvalidUpdateError(f"{node}: router returned {item!r}, not in path_map")
                        )
                    item = br.path_map[item]
                add(item, r.task)
    finished: dict[str, Task] = {}  # each node that finished in this step, with its first task
    for r in results:
        finished.setdefault(r.task.node, r.task)
    for join in graph.joins:  # once per step, so several tasks of one source count once
        arrived = [s for s in join.sources if s in finished]
        if not arrived:
            continue
        seen = barriers.setdefault(join.key, [])
        seen += [s for s in arrived if s not in seen]
        if set(seen) >= set(join.sources):
            del barriers[join.key]
            add(join.target, finished[arrived[-1]])
    tasks = [Task(f"{checkpoint_id}.{i}", n, p, h) for i, (n, h, p) in enumerate(targets)]
    return tasks, barriers


def _is_key_of(item: Any, path_map: Mapping[Hashable, str]) -> bool:
    try:
        return item in path_map
    except TypeError:  # unhashable (a list inside the router's list, a dict): no key of a path_map
        return False


def frontier_status(
    tasks: Sequence[Task],
    results: Sequence[TaskResult],
    interrupt_before: frozenset[str],
    interrupt_after: frozenset[str],
) -> tuple[Status, list[Interrupt]]:
    """``done`` for an empty frontier; ``interrupted`` after an ``interrupt_after`` node or before an
    ``interrupt_before`` one; otherwise ``running``."""
    if not tasks:
        return "done", []
    after = [Interrupt(r.task.node, "after", task_id=r.task.id) for r in results if r.task.node in interrupt_after]
    if after:
        return "interrupted", after
    before = [Interrupt(t.node, "before", task_id=t.id) for t in tasks if t.node in interrupt_before]
    if before:
        return "interrupted", before
    return "running", []


def step_metadata(source: str, step: int, results: Sequence[TaskResult], tags: dict[str, Any] | None) -> dict[str, Any]:
    """The audit record: which node wrote which keys, how long each node took, what models it used."""
    writes: dict[str, list[str]] = {}
    durations: dict[str, float] = {}
    usage: dict[str, dict[str, Any]] = {}
    for r in results:
        node = r.task.node
        keys = writes.setdefault(node, [])
        keys += [k for k in r.update if k not in keys]
        durations[node] = round(durations.get(node, 0.0) + r.duration_ms, 3)
        if r.usage:
            reported: dict[str, Any] = dict(r.usage)
            u = usage.setdefault(node, {"model": reported.get("model", "")})
            for k in ("prompt_tokens", "completion_tokens", "calls"):
                u[k] = u.get(k, 0) + int(reported.get(k, 0))
    meta: dict[str, Any] = {"source": source, "step": step, "writes": writes, "durations_ms": durations}
    if usage:
        meta["usage"] = usage
    if tags:
        meta["tags"] = tags
    return meta


_NO_RESULT = b""
"""The data of a ``result`` pending write that withdraws an earlier one (a task that failed after its result was
written early); encoded results are never empty."""


def decode_recorded(
    codec: Codec, cp: StoredCheckpoint, writes: Sequence[StoredWrite], tasks: Sequence[Task]
) -> Recorded:
    """Pending writes of ``cp`` back into results, effects, interrupts, answers and errors."""
    by_id = {t.id: t for t in tasks}
    rec = Recorded()
    for w in writes:
        task = by_id.get(w.task_id)
        if task is None:
            continue  # a write for a task this checkpoint does not plan: ignore it
        if w.kind == "result" and w.data == _NO_RESULT:
            continue  # the task failed after its result was written: it runs again
        value = codec.decode_value(cp, w.data)
        try:
            if w.kind == "result":
                goto: list[str | Send] = [Send(n, p) if h else n for n, h, p in value["g"]]
                rec.results[task.id] = TaskResult(
                    task, dict(value["u"]), goto, float(value["ms"]), cast(NodeUsage, dict(value["use"]))
                )
            elif w.kind == "effect":
                rec.effects[(task.id, w.index)] = value
            elif w.kind == "interrupt":
                rec.interrupts[(task.id, w.index)] = value
            elif w.kind == "resume":
                rec.answers[(task.id, w.index)] = value
            elif w.kind == "error":
                node, type_, message = value
                rec.errors[task.id] = TaskError(str(node), task.id, str(type_), str(message))
        except (KeyError, TypeError, ValueError) as exc:
            raise codec._corrupt(
                cp, f"pending write {w.kind} of task {w.task_id} has the wrong shape ({exc})"
            ) from None
    return rec
