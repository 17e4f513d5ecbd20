"""The super-step loop: :class:`Run` drives one thread from its head, as an async iterator of committed steps.

Each super-step (``Run.steps``, read it top to bottom):

1. **run**: every task of the frontier runs concurrently (async nodes on the loop, sync nodes through the node
   runner, in worker threads by default). Tasks whose results were recorded before a crash are not run again. When
   several tasks run, each result is recorded as a pending write as soon as it is ready (results finishing close
   together share one transaction).
2. **apply**: the results' updates fold into the state through the reducers *in frontier order*, never finish order.
3. **route**: the compiled graph's edges, routers, joins and ``Command.goto`` give the next frontier.
4. **commit**: the thread store writes one checkpoint (changed channels, frontier, metadata) and moves the head by
   compare-and-set; the step is yielded.

A node that raises after its retries stops the run on the *fail* path (finished siblings' results and the error are
recorded against the head, the thread is ``failed``, a :class:`NodeError` is raised); ``ctx.interrupt`` stops it on
the *pause* path (the thread is ``interrupted``, the iteration ends).

What a node's context writes during the step (journaled effects, call records, retried attempts) and the group commit
of finished results go through the run's :class:`~graphckpt.journal.Journal`. With telemetry on, the run, each step
and each task run inside a span (one context manager each).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from graphckpt import _hook, ids
from graphckpt.audit import failed_attempt, step_audit, with_task_spans
from graphckpt.checkpoint import NodeUsage, Task, TaskError
from graphckpt.compiled import RouteError
from graphckpt.context import Context, NodeInterrupt
from graphckpt.control import Command, ParentCommand, Send
from graphckpt.errors import (
    InvalidNodeUpdateError,
    InvalidUpdateError,
    NodeError,
    NodeSerializationError,
    NodeTimeoutError,
    RecursionLimitError,
    SaverError,
    SerializationError,
    ThreadConflictError,
)
from graphckpt.journal import Journal
from graphckpt.records import Head, Recorded, StepRecord, TaskResult
from graphckpt.runner import NodeRunner, ThreadRunner
from graphckpt.runspans import RunSpans
from graphckpt.savers.base import Status, StoredWrite
from graphckpt.state import ReducerError, StateSchema
from graphckpt.store import NO_RESULT, ThreadStore
from graphckpt.waiting import Routed

if TYPE_CHECKING:
    from graphckpt.compiled import CompiledGraph, NodeSpec
    from graphckpt.lease import Heartbeat

__all__ = ["NodeRunner", "RunsInParent", "Run", "Step", "ThreadRunner", "debug_event", "node_failure"]

logger = logging.getLogger("graphckpt")


@dataclass(frozen=True, slots=True)
class Step:
    """A committed super-step: the new head and the results it folded (the input, for a run's first commit)."""

    head: Head
    results: list[TaskResult]


class RunsInParent(Protocol):
    """A node function that runs inside its parent's run (a subgraph node, see :mod:`graphckpt.subgraph`): the
    engine calls :meth:`run_in` with the parent run and the task instead of calling the function with the state."""

    def __call__(self, state: Any, ctx: Context) -> Awaitable[Any]: ...
    def run_in(self, parent: Run, task: Task, state: Any, ctx: Context) -> Awaitable[Any]: ...


@dataclass(slots=True)
class _Failed:
    task: Task
    exc: BaseException
    attempt: int = 1


@dataclass(slots=True)
class _Interrupted:
    task: Task
    asked: list[tuple[int, Any, bytes]]
    """``(index, payload, payload encoded)`` of each open interrupt of the task (one, but for a subgraph's task):
    the payload checked storable when the node raised, stored as is with the stop."""


Outcome = TaskResult | _Failed | _Interrupted


class Run(RunSpans):
    """Drives one thread from ``head`` until it is done, interrupted, failed, or out of steps.

    ``initial`` is a step the run's start already committed (an input): it is yielded first, and an ``interrupted``
    head then pauses at once (``interrupt_before`` the first node). ``streamed`` says a consumer reads the steps as
    they come (the sync node runner does not inline then)."""

    def __init__(
        self,
        graph: CompiledGraph,
        store: ThreadStore,
        *,
        head: Head,
        recorded: Recorded,
        run_id: str,
        recursion_limit: int,
        tags: dict[str, Any] | None = None,
        runner: NodeRunner | None = None,
        initial: Step | None = None,
        streamed: bool = False,
        extra: Mapping[str, Any] | None = None,
        lease: Heartbeat | None = None,
        configurable: Mapping[str, Any] | None = None,
        context: Any = None,
    ) -> None:
        self.graph, self.store, self.codec = graph, store, store.codec
        self.configurable: Mapping[str, Any] = configurable or {}
        """The run's ``configurable`` values and ``context`` (see :meth:`graphckpt.begin.RunOptions.variant`), what
        its nodes read as ``ctx.config`` and ``ctx.context``."""
        self.context = context
        self.lease = lease
        """The run's lease on the thread, renewed in the background while the run iterates (see
        :mod:`graphckpt.lease`); ``None`` for a run that holds none (one that ends at once)."""
        self.head, self.recorded, self.run_id = head, recorded, run_id
        self.recursion_limit = recursion_limit
        self.tags = tags
        self.runner: NodeRunner = runner or ThreadRunner()
        self.initial = initial
        self.streamed = streamed
        self.extra: Mapping[str, Any] = extra or {}
        """Metadata merged into every checkpoint this run commits (a subgraph's link to its parent task)."""
        self.namespace: tuple[str, ...] = ()
        """``()`` for a thread's own run; ``("node:task_id", ...)`` for a subgraph run (see :mod:`graphckpt.subgraph`),
        where ``Command(graph=Command.PARENT)`` is allowed."""
        self.listener: Callable[[str, Any], None] | None = None
        """Receives the run's ephemeral events ``(mode, payload)`` on the loop (set by a stream that wants them)."""
        self.wanted: frozenset[str] = frozenset()
        """The ephemeral modes the listener takes (see :meth:`wants`)."""
        self.status: Status = head.cp.status
        """Where the run stands: ``running`` while it iterates, then ``done`` or ``interrupted``."""
        self.thread_id = head.cp.thread_id
        self.loop = asyncio.get_running_loop()
        self.journal = Journal(self, store, run_id, lease)
        """What the run's tasks' contexts write to, and the group commit of their results."""
        self._tracing: _hook.Tracing | None = None  # with telemetry on: the tracer, the run's and the step's span
        self._span: Any = None
        self._step_span: Any = None

    def emit(self, mode: str, payload: Any) -> None:
        """Hand an ephemeral event (``custom`` writes, ``tasks`` starts) to the stream reading this run, from the
        loop or from a sync node's worker thread; dropped when nobody streams."""
        listener = self.listener
        if listener is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            listener(mode, payload)
        else:
            self.loop.call_soon_threadsafe(listener, mode, payload)

    def wants(self, mode: str) -> bool:
        """Whether a stream reads this run's ephemeral events of ``mode`` (so that producing them is worth it)."""
        return self.listener is not None and mode in self.wanted

    @property
    def step(self) -> int:
        """The super-step being run (the head's step + 1)."""
        return self.head.cp.step + 1

    async def steps(self) -> AsyncGenerator[Step, None]:
        """The loop. Yields each committed step; ends when the thread is done or paused; raises
        :class:`NodeError` (and :class:`RecursionLimitError`) on the fail path. It never runs ahead of its
        consumer: the next step starts when the next item is asked for. With telemetry on, inside the run's span.
        The run holds its lease meanwhile (heartbeats on a timer); a stop that leaves the thread running releases it,
        but a :class:`SaverError`: the thread is not known safe then, so its lease expires and it shows ``crashed``
        (recovery continues it; a worker re-queues its run and releases the lease itself)."""
        with self._run_span():
            if self.lease is not None:
                self.lease.start()
            release = True
            try:
                async for step in self._steps():
                    yield step
            except SaverError:
                release = False
                raise
            finally:
                if self.lease is not None:  # a stop that leaves the thread running (signal, limit, error) releases it
                    await self.lease.stop(release=release and self.status not in ("done", "interrupted", "failed"))

    async def _steps(self) -> AsyncGenerator[Step, None]:
        if self.initial is not None:
            yield self.initial
        for n in range(self.recursion_limit + 1):
            if not self.head.body.tasks:
                self.status = "done"
                return
            if (n or self.initial is not None) and self.head.cp.status == "interrupted":
                self.status = "interrupted"
                return
            if n == self.recursion_limit:
                raise RecursionLimitError(
                    f"thread {self.thread_id!r} reached recursion_limit={self.recursion_limit} at step "
                    f"{self.head.cp.step}; its last checkpoint is kept: resume() continues with a fresh limit"
                )
            self.status = "running"
            if self.lease is not None:
                await self.lease.check()  # taken over while this process was paused: stop before any node runs
            with self._step_span_of():
                results = await self.run_frontier()  # 1. run (a pause ends the loop here)
                if results is not None:
                    await self.commit_step(results)  # 2-4. apply, route, commit
            if results is None:
                self.status = "interrupted"
                return
            yield Step(self.head, results)

    async def drain(self) -> None:
        """Run to the end without a consumer."""
        async for _ in self.steps():
            pass

    # -- 1. run --------------------------------------------------------------------------------------------------

    async def run_frontier(self) -> list[TaskResult] | None:
        """Run the tasks without recorded results; ``None`` when a task interrupted (the pause is recorded)."""
        tasks = self.head.body.tasks
        waiting = {t for t, i in self.recorded.interrupts if (t, i) not in self.recorded.answers}
        todo = [t for t in tasks if t.id not in self.recorded.results and t.id not in waiting]
        outcomes: list[Outcome]
        if not todo:
            outcomes = []
        elif len(todo) == 1:
            outcomes = [await self.run_task(todo[0], record=False)]
        else:
            running = [asyncio.ensure_future(self.run_task(t, record=True)) for t in todo]
            try:
                outcomes = list(await asyncio.gather(*running))
            except BaseException:  # the saver failed or the run was cancelled: stop the siblings too
                for future in running:
                    future.cancel()
                raise
        await self.journal.settle()  # what was not written is in the step's commit (or the stop's writes) below
        failed = [o for o in outcomes if isinstance(o, _Failed)]
        if failed:
            await self.fail(failed[0], outcomes)
        paused = [o for o in outcomes if isinstance(o, _Interrupted)]
        if paused or waiting:  # a task still waiting for its answer is not run again until it has one
            await self.pause(paused, outcomes)
            return None
        for o in outcomes:
            assert isinstance(o, TaskResult)
            self.recorded.results[o.task.id] = o
        return [self.recorded.results[t.id] for t in tasks]

    async def run_task(self, task: Task, *, record: bool) -> Outcome:
        """One task, with its retry policy. Never raises for node errors: returns what happened."""
        spec = self.graph.nodes.get(task.node)
        if spec is None:
            return _Failed(task, InvalidUpdateError(f"task {task.id} names unknown node {task.node!r}"))
        attempt = 0
        while True:
            attempt += 1
            state = task.payload if task.has_payload else self.codec.state.make(self.head.values)
            usage = NodeUsage()
            ctx = Context(self.journal, task, attempt, usage, self.configurable, self.context)
            self.journal.replayed_ms(task.id)  # a new attempt: its own replays count
            if self.listener is not None:
                self.emit("tasks", {"id": task.id, "name": task.node, "input": state, "attempt": attempt})
                if self.wants("debug"):
                    self.emit("debug", debug_event("task", self.step, id=task.id, name=task.node, input=state))
            started, started_at = time.perf_counter(), time.time()
            span: list[float] = []  # a sync node's own [start, end] in its worker thread: no queueing counted
            try:
                with self._task_span_of(ctx):
                    try:
                        out = await self._call(spec, state, ctx, alone=not record, span=span)
                    except Routed as routed:  # an interrupt's deadline passed with OnTimeout.goto(node)
                        out = Command(goto=routed.node)
                update, goto = _normalized(self.codec.state, spec.name, out, in_subgraph=bool(self.namespace))
            except NodeInterrupt as intr:
                if intr.wait is not None:  # a durable wait: its time and row are recorded before the stop
                    index, wake_at, answer = intr.wait  # the waker answers these interrupts, by id, or nothing
                    asked_ids = [intr.index, *(i for i, _ in intr.others)]
                    await self.journal.hold(task, index, wake_at, {f"{task.id}:{i}": answer for i in asked_ids})
                asked = []
                for index, payload in [(intr.index, intr.payload), *intr.others]:
                    try:
                        data = self.codec.serde.dumps(payload)  # recorded with the stop: refuse it here, naming it
                    except SerializationError as exc:
                        why = f"node {spec.name!r}: the payload of ctx.interrupt #{index} cannot be stored: {exc}"
                        return _Failed(task, SerializationError(why))
                    asked.append((index, payload, data))
                return _Interrupted(task, asked)
            except (InvalidUpdateError, SerializationError) as exc:
                return _Failed(task, exc, attempt)
            except (ThreadConflictError, SaverError):
                raise  # the thread moved to another owner, or storage failed: nothing to retry or record here
            except Exception as exc:
                policy = spec.retry
                if policy is None or not policy.should_retry(exc, attempt):
                    return _Failed(task, exc, attempt)
                logger.warning(
                    "thread %r node %r attempt %d failed: %r; retrying", self.thread_id, spec.name, attempt, exc
                )
                await self.journal.record_attempt(failed_attempt(task, self.step, attempt, exc, retried=True))
                await asyncio.sleep(policy.wait(attempt))
                continue
            took = ((span[1] - span[0]) if len(span) == 2 else (time.perf_counter() - started)) * 1000
            replayed = self.journal.replayed_ms(task.id)
            result = TaskResult(task, update, goto, took + replayed, usage, replayed, started_at)
            if record:
                self.journal.enqueue(result)
            return result

    async def _call(self, spec: NodeSpec, state: Any, ctx: Context, *, alone: bool, span: list[float]) -> Any:
        args = (state, ctx) if spec.takes_ctx else (state,)
        run_in = getattr(spec.fn, "run_in", None)  # a subgraph (RunsInParent): it runs inside this run
        if run_in is not None:
            pending = run_in(self, ctx.task, state, ctx)
        elif spec.is_async:
            pending = spec.fn(*args)
        else:
            pending = self.runner.run_sync(spec, args, alone=alone, streamed=self.streamed, span=span)
        started = time.monotonic()
        try:
            if spec.timeout is None:
                return await pending
            return await asyncio.wait_for(pending, spec.timeout)
        except TimeoutError:
            if spec.timeout is None or time.monotonic() - started < spec.timeout:
                raise  # the node's own TimeoutError, not ours
            ctx.abandon()
            raise NodeTimeoutError(f"node {spec.name!r} ran longer than its timeout of {spec.timeout} s") from None
        except asyncio.CancelledError:
            ctx.abandon()
            raise

    # -- stopping: the fail path and the pause path --------------------------------------------------------------

    async def fail(self, failed: _Failed, outcomes: Sequence[Outcome]) -> NoReturn:
        """Record the finished siblings and the failure (the thread becomes ``failed``), then raise it as a
        :class:`NodeError` naming thread, node and step."""
        task, exc = failed.task, failed.exc
        attempt = failed_attempt(task, self.step, failed.attempt, exc, retried=False)
        error = TaskError(task.node, task.id, type(exc).__name__, str(exc), attempt["traceback"])
        writes = self._finished_writes(outcomes, {task.id})
        seq = self.recorded.next_seq(self.recorded.attempts, task.id)
        self.recorded.attempts[(task.id, seq)] = attempt
        writes.append(StoredWrite(task.id, "attempt", seq, self.codec.serde.dumps(attempt)))
        writes.append(StoredWrite(task.id, "error", 0, self.codec.serde.dumps([error.node, error.type, error.message])))
        # no result: one written early (its siblings were still running) is withdrawn, so that the task runs again
        # on resume (a reducer refused that result when the step was folded)
        writes.append(StoredWrite(task.id, "result", 0, NO_RESULT))
        await self.journal.record(writes, status="failed", error=str(error))
        self.status = "failed"
        self._keep_finished(outcomes, {task.id})
        logger.info("thread %r step %d failed", self.thread_id, self.step)
        raise node_failure(exc, thread_id=self.thread_id, node=task.node, step=self.step) from exc

    async def pause(self, paused: Sequence[_Interrupted], outcomes: Sequence[Outcome]) -> None:
        """Record the finished siblings and the open interrupts; the thread becomes ``interrupted``."""
        stopped = {p.task.id for p in paused}
        writes = self._finished_writes(outcomes, stopped)
        for p in paused:
            for index, payload, data in p.asked:
                writes.append(StoredWrite(p.task.id, "interrupt", index, data))
                self.recorded.interrupts[(p.task.id, index)] = payload
        await self.journal.record(writes, status="interrupted")
        self._keep_finished(outcomes, stopped)
        logger.info("thread %r step %d interrupted", self.thread_id, self.step)

    def _finished_writes(self, outcomes: Sequence[Outcome], stopped: set[str]) -> list[StoredWrite]:
        writes: list[StoredWrite] = []
        for o in outcomes:
            if isinstance(o, TaskResult) and o.task.id not in stopped:
                # not storable: this task runs again on resume (and fails the same way, visibly)
                with contextlib.suppress(SerializationError):
                    writes.append(StoredWrite(o.task.id, "result", 0, self.journal.encode_result(o)))
        return writes

    def _keep_finished(self, outcomes: Sequence[Outcome], stopped: set[str]) -> None:
        for o in outcomes:
            if isinstance(o, TaskResult) and o.task.id not in stopped:
                self.recorded.results[o.task.id] = o

    # -- 2-4. apply, route, commit -----------------------------------------------------------------------------

    async def commit_step(self, results: list[TaskResult]) -> None:
        """Fold the results into the state, route, and commit the next checkpoint."""
        try:
            values, writes = self.codec.state.apply(
                self.head.values, [r.update for r in results], sources=[r.task.node for r in results]
            )
        except ReducerError as exc:  # the node whose update the reducer refused failed; its siblings' results stay
            await self.fail(_Failed(results[exc.update].task, exc), results)
        checkpoint_id = ids.new_id()
        try:
            tasks, barriers = self.graph.next_tasks(
                self.head.values, values, results, self.head.body.barriers, checkpoint_id
            )
        except RouteError as exc:
            await self.fail(_Failed(exc.task, exc.cause), results)
        status, interrupts = self.graph.frontier_status(tasks, results)
        audit = with_task_spans(step_audit(self.recorded, self.head.body.tasks), results)
        extra: dict[str, Any] = {"audit": audit} if audit else {}
        if self._tracing is not None:  # a run resuming from this checkpoint links to this run's trace
            extra["trace"] = self._tracing.trace_context(self._span)
        record = StepRecord(
            "loop",
            values,
            writes,
            tasks,
            barriers,
            status,
            interrupts,
            results,
            self.tags,
            extra={**self.extra, **extra},
        )
        try:
            self.head = await self.store.write_checkpoint(
                self.head,
                record,
                run_id=self.run_id,
                checkpoint_id=checkpoint_id,
                expected_head=self.head.cp.checkpoint_id,
            )
        except SerializationError as exc:  # a value validated but cannot be stored: the node that wrote it failed
            field = exc.field
            culprit = next((r.task for r in results if field in r.update), results[0].task)
            what = f"its update of {field!r}" if field else "a Send payload it routed"
            failure = SerializationError(f"node {culprit.node!r}: {what} cannot be stored: {exc}", field=field)
            await self.fail(_Failed(culprit, failure), results)
        self.recorded = Recorded()
        if logger.isEnabledFor(logging.INFO):
            logger.info(
                "thread %r step %d ran %s -> checkpoint %s, next %s",
                self.thread_id,
                self.head.cp.step,
                [r.task.node for r in results],
                checkpoint_id,
                [t.node for t in tasks] or "END",
            )


def _normalized(
    state: StateSchema, node: str, out: Any, *, in_subgraph: bool
) -> tuple[dict[str, Any], list[str | Send]]:
    """A node's return value as its validated update and extra targets; a ``Command(graph=Command.PARENT)`` inside a
    subgraph stops it (:class:`ParentCommand`: its parent node applies the command)."""
    if isinstance(out, Command):
        if out.graph is not None:
            if out.graph != Command.PARENT or not in_subgraph:
                where = "a subgraph" if out.graph == Command.PARENT else "Command.PARENT or None"
                raise InvalidUpdateError(f"node {node!r} returned Command(graph={out.graph!r}) outside {where}")
            raise ParentCommand(out, node)
        return state.validate_update(out.update, node=node), out.targets()
    return state.validate_update(out, node=node), []


def debug_event(kind: str, step: int, **payload: Any) -> dict[str, Any]:
    """A ``debug`` stream event as LangGraph shapes it: ``{"type", "step", "timestamp", "payload"}``."""
    when = dt.datetime.fromtimestamp(ids.now(), dt.UTC).isoformat()
    return {"type": kind, "step": step, "timestamp": when, "payload": payload}


def node_failure(exc: BaseException, *, thread_id: str, node: str, step: int) -> NodeError:
    """The :class:`NodeError` a run raises for ``exc``: the engine's own verdicts on a node's output keep their
    class too (:class:`InvalidNodeUpdateError`, :class:`NodeSerializationError`) and their message, which already
    names node and field."""
    if isinstance(exc, InvalidUpdateError):
        return InvalidNodeUpdateError(str(exc), thread_id=thread_id, node=node, step=step)
    if isinstance(exc, SerializationError):
        failure = NodeSerializationError(str(exc), thread_id=thread_id, node=node, step=step)
        failure.field = exc.field
        return failure
    return NodeError(
        f"thread {thread_id!r} step {step}: node {node!r} failed: {type(exc).__name__}: {exc}",
        thread_id=thread_id,
        node=node,
        step=step,
    )
