"""How a run begins: :func:`start` (a new thread, or a new turn of a ``done`` one, from an input) and
:func:`resume` (a thread's head, after a crash, a failure or with an answer to an open interrupt). Each checks the
thread, takes it over and returns the :class:`~graphckpt.engine.Run` that continues it. ``run_id``, when given, is
the claim's fence (a worker passes its queued run's fence, so the commit that stops the thread ends that run).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from graphckpt import ids
from graphckpt.audit import answered_by, lost_marks
from graphckpt.checkpoint import Task
from graphckpt.codec import Body
from graphckpt.compiled import CompiledGraph, RouteError
from graphckpt.control import START, Command
from graphckpt.engine import NodeRunner, Run, Step
from graphckpt.errors import InterruptClosedError, InvalidUpdateError, NodeError, ThreadStateError
from graphckpt.records import NO_ANSWER, Head, Recorded, StepRecord, TaskResult
from graphckpt.savers.base import StoredCheckpoint, StoredWrite, check_id
from graphckpt.store import ThreadStore, partial_thread_error

__all__ = ["RunOptions", "check_limit", "resume", "resumed_thread", "start", "streamed"]


class RunOptions:
    """What every run of one app shares: its compiled graph, store, node runner and default step limit; a
    :meth:`variant` adds what one run was given (LangGraph's per-run options)."""

    __slots__ = ("configurable", "context", "graph", "recursion_limit", "store")  # the lease length is the store's

    def __init__(self, graph: CompiledGraph, store: ThreadStore, recursion_limit: int) -> None:
        self.graph, self.store, self.recursion_limit = graph, store, recursion_limit
        self.configurable: Mapping[str, Any] = MappingProxyType({})
        """What nodes read as ``ctx.config["configurable"]`` (LangGraph's ``config={"configurable": ...}``)."""
        self.context: Any = None
        """What nodes read as ``ctx.context`` (LangGraph's run ``context``)."""

    def variant(
        self,
        *,
        interrupt_before: frozenset[str] | None = None,
        interrupt_after: frozenset[str] | None = None,
        configurable: Mapping[str, Any] | None = None,
        context: Any = None,
    ) -> RunOptions:
        """These options for one run: its own interrupt points (instead of the compiled ones; node names already
        checked), ``configurable`` values and ``context`` for its nodes."""
        graph = self.graph
        if interrupt_before is not None or interrupt_after is not None:
            graph = dataclasses.replace(
                graph,
                interrupt_before=graph.interrupt_before if interrupt_before is None else interrupt_before,
                interrupt_after=graph.interrupt_after if interrupt_after is None else interrupt_after,
            )
        found = RunOptions(graph, self.store, self.recursion_limit)
        found.configurable = MappingProxyType(dict(configurable or self.configurable))
        found.context = self.context if context is None else context
        return found

    def run(
        self,
        head: Head,
        recorded: Recorded,
        run_id: str,
        recursion_limit: int | None,
        tags: Mapping[str, Any] | None,
        runner: NodeRunner | None,
        *,
        initial: Step | None = None,
        streamed: bool = False,
        extra: Mapping[str, Any] | None = None,
        lease_until: float | None = None,
    ) -> Run:
        lease = None if lease_until is None else self.store.heartbeat(head.cp.thread_id, run_id, lease_until)
        return Run(
            self.graph,
            self.store,
            head=head,
            recorded=recorded,
            run_id=run_id,
            recursion_limit=self.recursion_limit if recursion_limit is None else recursion_limit,
            tags=dict(tags) if tags else None,
            runner=runner,
            initial=initial,
            streamed=streamed,
            extra=extra,
            lease=lease,
            configurable=self.configurable,
            context=self.context,
        )


async def start(
    options: RunOptions,
    input: Any,
    thread_id: str | None,
    recursion_limit: int | None,
    tags: Mapping[str, Any] | None,
    runner: NodeRunner | None,
    *,
    streamed: bool = False,
    extra: Mapping[str, Any] | None = None,
    run_id: str | None = None,
) -> Run:
    """Apply ``input`` through the reducers as step 0 of a new thread (or the next step of a ``done`` one), route
    from START, and commit: the run then continues from that checkpoint. Nothing is written if the input or the
    routing is refused. ``extra`` is merged into the metadata of every checkpoint of the run."""
    check_limit(recursion_limit)
    graph, store = options.graph, options.store
    state = store.codec.state
    if thread_id is None:
        thread_id = ids.new_id()
    elif not isinstance(thread_id, str) or not thread_id:
        raise ValueError(f"thread_id must be a non-empty string (or None for a new thread), not {thread_id!r}")
    else:
        check_id("thread_id", thread_id)
    update = graph.validate_input(input)
    record = await store.get_thread(thread_id)
    if record is None:
        nothing = StoredCheckpoint(thread_id, "", None, None, -1, 0.0, "running", {}, b"")  # before step 0
        base = Head(nothing, Body([], {}, [(thread_id, 0)], schema_version=graph.version), {})
        values, writes = state.apply(state.defaults(), [update])
    elif record.status == "done":
        base, _ = await store.load_head(record)
        values, writes = state.apply(base.values, [update])
    elif record.status == "partial":
        raise partial_thread_error(record, "take a new input")
    else:
        raise ThreadStateError(
            f"thread {thread_id!r} is {record.status}; call resume({thread_id!r}"
            f"{', answer' if record.status == 'interrupted' else ''}) to continue it, or fork({thread_id!r}, "
            "checkpoint_id, update=...) to start something new from one of its checkpoints (a new input is refused: "
            "it would leave the thread's open tasks behind)"
        )
    state.check_required(values, node="input")
    checkpoint_id = ids.new_id()
    begin = TaskResult(Task("input", START), update)
    try:
        tasks, barriers = graph.next_tasks(base.values, values, [begin], base.body.barriers, checkpoint_id)
    except RouteError as exc:  # nothing was written: the thread is as it was
        if isinstance(exc.cause, InvalidUpdateError):
            raise exc.cause from None
        raise NodeError(
            f"thread {thread_id!r}: the router after START raised {type(exc.cause).__name__}: {exc.cause}",
            thread_id=thread_id,
            node=START,
            step=base.cp.step + 1,
        ) from exc.cause
    status, interrupts = graph.frontier_status(tasks)
    step = StepRecord(
        "input",
        values,
        writes,
        tasks,
        barriers,
        status,
        interrupts,
        tags=tags,
        wrote={"input": list(update)},
        extra=extra or {},
    )
    run_id = run_id or ids.new_id()
    until = store.lease_until()
    head = await store.write_checkpoint(
        base,
        step,
        run_id=run_id,
        checkpoint_id=checkpoint_id,
        expected_head=None if record is None else record.head_checkpoint_id,
        claim=record,  # a new turn on a done thread: taken over only now that the checkpoint is ready
        lease_until=until,
    )
    return options.run(
        head,
        Recorded(),
        run_id,
        recursion_limit,
        tags,
        runner,
        initial=Step(head, [begin]),
        streamed=streamed,
        extra=extra,
        lease_until=until,
    )


async def resume(
    options: RunOptions,
    thread_id: str,
    answer: Any,
    recursion_limit: int | None,
    tags: Mapping[str, Any] | None,
    runner: NodeRunner | None,
    *,
    streamed: bool = False,
    extra: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    take_over: bool = False,
) -> Run:
    """Take the thread over from its head: only the tasks without recorded results run again; ``answer`` answers
    the first open ``ctx.interrupt``. A ``done`` thread gives a run that ends at once. A live owner refuses the
    claim unless ``take_over`` (then it loses its next write); a dead owner on this host never does."""
    check_limit(recursion_limit)
    store = options.store
    record = await store.thread(thread_id)
    if record.status == "partial":
        raise partial_thread_error(record, "be resumed")
    head, recorded = await store.load_head(record)
    if tags is None:
        tags = head.cp.metadata.get("tags")  # a resumed run keeps the tags of the run it continues
    open_interrupts = recorded.open_interrupts(head.body.tasks)
    check_open(thread_id, answer, open_interrupts if record.status != "done" else [])
    if record.status == "done" or not head.body.tasks:
        if answer is not NO_ANSWER:
            raise ThreadStateError(f"thread {thread_id!r} is done; nothing is waiting for an answer")
        run_id = run_id or ids.new_id()
        if record.status != "done":  # e.g. a crash after a new turn claimed the thread, before its first commit
            await store.claim(record, run_id=run_id)
            await store.record_writes(head.cp, [], run_id=run_id, status="done")
        run = options.run(head, recorded, run_id, recursion_limit, tags, runner, streamed=streamed, extra=extra)
        run.status = "done"
        return run
    if open_interrupts and answer is NO_ANSWER:
        task, _, question = open_interrupts[0]
        raise ThreadStateError(
            f"thread {thread_id!r} is waiting for an answer to {question!r} (node {task.node!r}); "
            f"call resume({thread_id!r}, answer)"
        )
    if not open_interrupts and answer is not NO_ANSWER:
        raise ThreadStateError(f"thread {thread_id!r} is not waiting for an answer (no ctx.interrupt is open)")
    answers = _answers(answer, open_interrupts)
    # an answer that cannot be stored is refused before the claim, which would mark the thread running
    writes = [StoredWrite(task.id, "resume", index, store.codec.serde.dumps(value)) for task, index, value in answers]
    who = tags.get("user") if isinstance(tags, Mapping) and isinstance(tags.get("user"), str) else answered_by()
    answered = {"at": ids.now(), "by": who}
    writes += [StoredWrite(task.id, "answered", index, store.codec.serde.dumps(answered)) for task, index, _ in answers]
    run_id = run_id or ids.new_id()
    until = store.lease_until()
    await store.claim(record, run_id=run_id, lease_until=until, take_over=take_over)  # refused while one is live
    # The previous owner, if still alive, may have recorded writes (a journaled effect, a finished task) between
    # our read and the claim; from the claim on nobody else can write against this head: read them again.
    recorded = await store.recorded(head.cp, head.body.tasks)
    # calls the previous owner started and never finished are lost: say why, from its lease as the claim found it
    lost = lost_marks(recorded, record, ids.now())
    for task_id, seq, end in lost:
        writes.append(StoredWrite(task_id, "finished", seq, store.codec.serde.dumps(end)))
        recorded.finishes[(task_id, seq)] = end
    if writes:
        await store.record_writes(head.cp, writes, run_id=run_id)
        for task, index, value in answers:
            recorded.answers[(task.id, index)] = value
            recorded.answered[(task.id, index)] = answered
    recorded.errors.clear()
    return options.run(
        head, recorded, run_id, recursion_limit, tags, runner, streamed=streamed, extra=extra, lease_until=until
    )


async def streamed(
    options: RunOptions,
    input: Any,
    thread_id: str | None,
    recursion_limit: int | None,
    tags: Mapping[str, Any] | None,
    runner: NodeRunner | None,
    *,
    resuming: bool,
    answer: Any,
    take_over: bool = False,
) -> Run:
    """A streamed run as ``App.astream`` begins it: :func:`start` with ``input``, or :func:`resume` with ``answer``
    when ``resuming`` or when ``input`` is ``Command(resume=answer)``."""
    if isinstance(input, Command):  # LangGraph's stream(Command(resume=answer), config)
        resuming, answer, thread_id = True, input, resumed_thread(input, thread_id)
    if not resuming:
        return await start(options, input, thread_id, recursion_limit, tags, runner, streamed=True)
    if thread_id is None:
        raise ValueError("astream(resume=True) needs thread_id")
    return await resume(options, thread_id, answer, recursion_limit, tags, runner, streamed=True, take_over=take_over)


def resumed_thread(command: Command, thread_id: str | None) -> str:
    """The thread a ``Command`` given as input resumes; only ``Command(resume=...)`` is an input."""
    if command.resume is None or command.update is not None or command.goto:
        raise ValueError(
            "as the input of invoke/stream, only Command(resume=answer) is accepted (it answers the thread's open "
            "interrupt); use update_state(...) or fork(..., goto=...) to change a thread's state or route"
        )
    if thread_id is None:
        raise ValueError("invoke(Command(resume=...)) needs the thread_id of the interrupted thread")
    return thread_id


def _answers(answer: Any, open_interrupts: list[tuple[Task, int, Any]]) -> list[tuple[Task, int, Any]]:
    """Which open interrupts ``answer`` answers: a mapping whose keys are all ids of open interrupts
    (:attr:`Interrupt.id`, ``task_id:index``) answers each of them; any other value answers the first. A
    :class:`Command` stands for its ``resume``. The interrupts left unanswered keep waiting (their nodes do not run)."""
    if answer is NO_ANSWER or not open_interrupts:
        return []
    if isinstance(answer, Command):
        answer = answer.resume
    by_id = {f"{task.id}:{index}": (task, index) for task, index, _ in open_interrupts}
    if isinstance(answer, Mapping) and answer and all(isinstance(k, str) and k in by_id for k in answer):
        return [(*by_id[key], value) for key, value in answer.items()]

    task, index, _ = open_interrupts[0]
    return [(task, index, answer)]


INTERRUPT_ID = re.compile(r"[^:]+\.[0-9]+:[0-9]+")
"""The shape of an inside interrupt's id (:attr:`Interrupt.id`: ``<checkpoint id>.<n>:<index>``)."""


def check_open(thread_id: str, answer: Any, open_interrupts: list[tuple[Task, int, Any]]) -> None:
    """Refuse an answer by interrupt ids (a mapping whose keys all have an interrupt id's shape) naming one that is
    not open: :class:`InterruptClosedError`. Such an answer never falls through to answer another interrupt (the
    thread's next question), so of a person's answer and a deadline's racing for one interrupt only one counts."""
    if isinstance(answer, Command):
        answer = answer.resume
    if not (isinstance(answer, Mapping) and answer):
        return
    if not all(isinstance(k, str) and INTERRUPT_ID.fullmatch(k) for k in answer):
        return
    open_ids = {f"{task.id}:{index}" for task, index, _ in open_interrupts}
    closed = sorted(k for k in answer if k not in open_ids)
    if closed:
        raise InterruptClosedError(
            f"thread {thread_id!r}: interrupt {', '.join(closed)} is not open (answered already, or its deadline "
            f"passed); open: {', '.join(sorted(open_ids)) or 'none'}"
        )


def check_limit(recursion_limit: int | None) -> None:
    if recursion_limit is not None and (type(recursion_limit) is not int or recursion_limit < 1):
        raise ValueError(f"recursion_limit must be a positive number of super-steps, not {recursion_limit!r}")
