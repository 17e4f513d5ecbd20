"""The run queue as an app sees it: :func:`submit` queues a run, :func:`list_runs` and :func:`cancel` read and
cancel them; :class:`~graphckpt.worker.Worker` executes them, each begun by :func:`begin_queued`. Each function takes
the parts it uses (the queue, the compiled graph, the serializer, the run options), never the app.

The queue's rows and the invariants its statements keep are in :mod:`graphckpt.savers.queue` (one running run per
thread by a partial unique index, one worker per run, completion committed with the run's last checkpoint, nothing
stranded); each saver keeps its SQL as named constants beside a docstring saying which invariant it protects
(``savers/_sqlite_runs.py``, ``savers/_pg_runs.py``, and the ``-- runs`` parts of the commit).

``multitask`` says what a run submitted to a busy thread does (busy: a queued or running run, or a live lease):
``"reject"`` raises :class:`~graphckpt.errors.ThreadBusyError` at once; ``"enqueue"`` queues it behind (a worker
runs it when the thread's current run has ended).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from graphckpt import begin, ids
from graphckpt.errors import (
    GraphckptError,
    LeaseLostError,
    ThreadBusyError,
    ThreadConflictError,
    ThreadStateError,
)
from graphckpt.records import NO_ANSWER
from graphckpt.savers.queue import RunQueue, RunRecord, RunStatus

if TYPE_CHECKING:
    from graphckpt.compiled import CompiledGraph
    from graphckpt.engine import Run
    from graphckpt.runner import NodeRunner
    from graphckpt.savers.base import Saver
    from graphckpt.serde import Serializer

__all__ = [
    "ENVELOPE",
    "MULTITASK",
    "RUN_OPTIONS",
    "Multitask",
    "Submitted",
    "begin_queued",
    "cancel",
    "list_runs",
    "queue_of",
    "submit",
    "submitted",
    "unpack",
    "with_options",
]

Multitask = Literal["reject", "enqueue"]
MULTITASK: tuple[Multitask, ...] = ("reject", "enqueue")

ENVELOPE = "__graphckpt_run__"
"""The key that marks a run's payload as an envelope: how what a run was submitted with reaches its worker (and a
server reading it back after a restart) in the opaque payload, with no column of its own::

    {ENVELOPE: 1,
     "value": ...,                # the input or the answer (absent: a resume with no answer)
     "tags": {...},               # the run's checkpoint tags instead of the thread's (absent or None: the thread's)
     "recursion_limit": 25,       # the run's super-step limit (absent or None: the app's)
     "metadata": {...},           # the run's own metadata (absent: none)
     "multitask": "enqueue",      # the strategy it was submitted with (absent: not known)
     "start": [step, seq],        # the event cursor before it, its stream's start (absent: not known)
     "stream_mode": ["values"],   # the stream modes it was started with, a join's default (absent: none)
     "options": {                 # the run's own options (absent: none; see RunOptions.variant)
         "interrupt_before": [...], "interrupt_after": [...], "configurable": {...}, "context": ...}}

Every key but ``ENVELOPE`` may be absent (a payload written before it existed means none). A payload that is not an
envelope is the input or the answer itself (what a sweeper's resume and older versions write)."""


@dataclass(frozen=True, slots=True)
class Submitted:
    """What a run was submitted with, read back from its payload (:func:`submitted`)."""

    value: Any = NO_ANSWER
    """The input (``kind="input"``) or the answer (:data:`~graphckpt.records.NO_ANSWER`: none)."""
    tags: Mapping[str, Any] | None = None
    """The run's checkpoint tags instead of the thread's (``None``: the thread's)."""
    recursion_limit: int | None = None
    """The run's super-step limit (``None``: the app's)."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """The run's own metadata (LangGraph's ``run.metadata``), not the thread's."""
    multitask: Multitask | None = None
    """The strategy it was submitted with (``None``: not known, e.g. a resume the sweeper queued)."""
    start: tuple[int, int] | None = None
    """The event cursor ``(step, seq)`` before the run, where its stream starts (``None``: not known)."""
    stream_mode: tuple[str, ...] = ()
    """The stream modes the run was started with (a server's join without modes streams these; ``()``: none)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The run's own options: ``interrupt_before``/``interrupt_after`` (lists of node names), ``configurable``,
    ``context`` (the keyword arguments of :meth:`~graphckpt.begin.RunOptions.variant`); ``{}``: none."""

    def options_of(self, base: begin.RunOptions) -> begin.RunOptions:
        """``base`` with this run's own options (``base`` itself when it has none)."""
        return with_options(base, self.options)


def with_options(base: begin.RunOptions, found: Mapping[str, Any]) -> begin.RunOptions:
    """``base`` with the run options ``found`` (see :attr:`Submitted.options`; ``base`` itself when empty)."""
    if not found:
        return base
    before, after = found.get("interrupt_before"), found.get("interrupt_after")
    configurable = found.get("configurable")
    return base.variant(
        interrupt_before=frozenset(before) if isinstance(before, list) else None,
        interrupt_after=frozenset(after) if isinstance(after, list) else None,
        configurable=configurable if isinstance(configurable, dict) else None,
        context=found.get("context"),
    )


def queue_of(saver: Saver) -> RunQueue:
    """``saver`` as a run queue (every shipped saver is one)."""
    if not isinstance(saver, RunQueue):
        raise GraphckptError(f"{type(saver).__name__} has no run queue: submit and workers need one")
    return saver


async def submit(
    queue: RunQueue,
    compiled: CompiledGraph,
    serde: Serializer,
    input: Any = None,
    *,
    thread_id: str | None = None,
    multitask: Multitask = "reject",
    resume: bool = False,
    answer: Any = NO_ANSWER,
    graph: str | None = None,
    tags: Mapping[str, Any] | None = None,
    recursion_limit: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    start: tuple[int, int] | None = None,
    stream_mode: Sequence[str] = (),
    options: Mapping[str, Any] | None = None,
) -> RunRecord:
    """Queue on ``queue`` a run of ``graph`` (``module:attr``, what workers load: a graph compiled as ``compiled``,
    whose input is checked and stored with ``serde``) on ``thread_id``
    (a new id when ``None``): ``input`` starts it (or a new turn of a ``done`` thread), ``resume=True`` continues
    it (with ``answer`` for an open interrupt). ``tags`` (when not ``None``) are the run's checkpoints' tags instead of
    the thread's; ``recursion_limit`` caps its super-steps (``None``: the app's; a run past it fails with
    :class:`~graphckpt.errors.RecursionLimitError`); ``metadata`` is the run's own (not its checkpoints');
    ``start`` is the event cursor its stream starts at and ``stream_mode`` the modes it was streamed with (what a
    server records); ``options`` the run's own options (see :attr:`Submitted.options`: its interrupt points,
    ``configurable``, ``context``). All travel in the payload (see
    :data:`ENVELOPE`). Values are checked now, not when a worker runs them."""
    if multitask not in MULTITASK:
        raise ValueError(f"multitask must be one of {', '.join(MULTITASK)}, not {multitask!r}")
    if not graph:
        raise ValueError("submit needs graph='module:attr' (what a worker loads to run it), or app.graph_ref set")
    if thread_id is None:
        if resume:
            raise ValueError("submit(resume=True) needs thread_id")
        thread_id = ids.new_id()
    elif not isinstance(thread_id, str) or not thread_id:
        raise ValueError(f"thread_id must be a non-empty string (or None for a new thread), not {thread_id!r}")
    envelope: dict[str, Any] = {ENVELOPE: 1, "multitask": multitask, **_options(recursion_limit, metadata, start)}
    if stream_mode:
        if isinstance(stream_mode, str) or not all(isinstance(m, str) for m in stream_mode):
            raise ValueError(f"stream_mode must be a list of stream mode names, not {stream_mode!r:.80}")
        envelope["stream_mode"] = list(stream_mode)
    if tags is not None:
        if not isinstance(tags, Mapping):
            raise ValueError(f"tags must be a mapping (or None for the thread's), not {type(tags).__name__}")
        envelope["tags"] = dict(tags)
    if options:
        unknown = set(options) - set(RUN_OPTIONS)
        if unknown:
            raise ValueError(f"options: unknown run option(s) {sorted(unknown)} (known: {', '.join(RUN_OPTIONS)})")
        envelope["options"] = {k: sorted(v) if k.startswith("interrupt_") else v for k, v in options.items()}
    value: Any = answer if resume else dict(compiled.validate_input(input))
    if value is not NO_ANSWER:
        envelope["value"] = value
    payload = serde.dumps(envelope)
    run = RunRecord(ids.new_uuid(), thread_id, "resume" if resume else "input", "queued", graph, payload)
    await queue.enqueue_run(run, reject_busy=multitask == "reject")
    return run


RUN_OPTIONS = ("interrupt_before", "interrupt_after", "configurable", "context")
"""The run options ``submit`` takes (see :attr:`Submitted.options`)."""


def _options(
    recursion_limit: int | None, metadata: Mapping[str, Any] | None, start: tuple[int, int] | None
) -> dict[str, Any]:
    """The envelope keys of submit's run options, each checked (a ``ValueError`` names the argument)."""
    found: dict[str, Any] = {}
    if recursion_limit is not None:
        if type(recursion_limit) is not int or recursion_limit < 1:
            raise ValueError(f"recursion_limit must be a positive number of super-steps, not {recursion_limit!r}")
        found["recursion_limit"] = recursion_limit
    if metadata is not None:
        if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
            raise ValueError(f"metadata must be a mapping with string keys (or None), not {metadata!r:.80}")
        if metadata:
            found["metadata"] = dict(metadata)
    if start is not None:
        if not (isinstance(start, tuple | list) and len(start) == 2 and all(type(n) is int for n in start)):
            raise ValueError(f"start must be an event cursor (step, seq) of two integers, not {start!r:.80}")
        found["start"] = [start[0], start[1]]
    return found


def submitted(serde: Serializer, run: RunRecord) -> Submitted:
    """What ``run`` was submitted with (see :data:`ENVELOPE`); a payload without an envelope is its value alone.
    A key of the wrong type (a payload written by something else) reads as absent."""
    if run.payload is None:
        return Submitted()
    value = serde.loads(run.payload)
    if not (isinstance(value, dict) and value.get(ENVELOPE) == 1):
        return Submitted(value)
    tags, limit, metadata = value.get("tags"), value.get("recursion_limit"), value.get("metadata")
    multitask, start, modes = value.get("multitask"), value.get("start"), value.get("stream_mode")
    options = value.get("options")
    return Submitted(
        value.get("value", NO_ANSWER),
        tags if isinstance(tags, dict) else None,
        limit if type(limit) is int and limit >= 1 else None,
        metadata if isinstance(metadata, dict) else {},
        multitask if multitask in MULTITASK else None,
        (start[0], start[1])
        if isinstance(start, list | tuple) and len(start) == 2 and all(type(n) is int for n in start)
        else None,
        tuple(modes) if isinstance(modes, list) and all(isinstance(m, str) for m in modes) else (),
        options if isinstance(options, dict) else {},
    )


def unpack(serde: Serializer, run: RunRecord) -> tuple[Any, Mapping[str, Any] | None]:
    """The run's input or answer (:data:`~graphckpt.records.NO_ANSWER`: none) and the tags it was submitted with
    (``None``: none, it keeps the thread's)."""
    found = submitted(serde, run)
    return found.value, found.tags


async def list_runs(
    queue: RunQueue, *, thread_id: str | None = None, status: RunStatus | None = None
) -> list[RunRecord]:
    """Queued, running and ended runs, oldest first."""
    return await queue.list_runs(thread_id=thread_id, status=status)


async def cancel(queue: RunQueue, run_id: str) -> bool:
    """Cancel a queued run; ``False`` when it is not queued any more."""
    return await queue.cancel_run(run_id)


async def _input_committed(options: begin.RunOptions, run: RunRecord) -> bool:
    """Whether the thread's head is tagged with ``run``: a step of this run is committed."""
    record = await options.store.get_thread(run.thread_id)
    old = record.metadata.get("tags") if record is not None else None
    return isinstance(old, Mapping) and old.get("run") == run.run_id


async def begin_queued(
    options: begin.RunOptions, runner: NodeRunner | None, run: RunRecord, fence: str, tags: Mapping[str, Any]
) -> Run | None:
    """A queued run's engine run (for :class:`~graphckpt.worker.Worker`), claimed with ``fence``, with the
    recursion limit it was submitted with: its input starts the thread, unless an earlier attempt of this run
    already committed it (then it resumes); its answer answers the open interrupt, unless an earlier attempt of this
    run already recorded it (then it resumes without one).

    ``None``: nothing to run, the run ends as the thread did. A retry (its earlier attempt's lease lapsed, say on a
    loaded machine, and a sweeper re-queued the run while that attempt still ran) that finds the thread stopped
    (``interrupted``, ``done`` or ``failed``) by a step of this very run: that attempt got that far (an interrupt
    waits for an answer, a new run's); running it with this run's input or answer again would be wrong. A retry
    whose input that earlier attempt commits while this one starts resumes the thread instead of failing.

    A retry's claim can also lose to that earlier attempt committing a step between this attempt's read of the
    thread and its claim (the claim compares the head it read). When the claim lost that way and nobody holds a
    live lease now, this attempt reads the thread again and begins from its new head: at most
    :data:`CLAIM_RACES` times, then the conflict is raised. A live lease (``ThreadBusyError``) is raised at once."""
    for _ in range(CLAIM_RACES - 1 if run.attempt > 1 else 0):
        try:
            return await _begin_queued(options, runner, run, fence, tags)
        except (ThreadBusyError, LeaseLostError):
            raise
        except ThreadConflictError:
            record = await options.store.get_thread(run.thread_id)
            if record is None or record.status == "running":  # gone, or claimed by someone live: not ours to take
                raise
    return await _begin_queued(options, runner, run, fence, tags)


CLAIM_RACES = 3
"""How many times a retried queued run begins again after its claim lost a race with its own earlier attempt."""


async def _begin_queued(
    options: begin.RunOptions, runner: NodeRunner | None, run: RunRecord, fence: str, tags: Mapping[str, Any]
) -> Run | None:
    found = submitted(options.store.codec.serde, run)
    payload, limit = found.value, found.recursion_limit
    options = found.options_of(options)
    if run.attempt > 1:
        record = await options.store.get_thread(run.thread_id)
        old = record.metadata.get("tags") if record is not None else None
        ours = isinstance(old, Mapping) and old.get("run") == run.run_id  # a step of this run is committed
        if ours and record is not None and record.status in ("interrupted", "done", "failed"):
            return None  # an earlier attempt got the thread this far: the run ends as the thread did
        if run.kind == "input" and ours:  # its input step is committed
            return await begin.resume(
                options, run.thread_id, NO_ANSWER, limit, tags, runner, streamed=True, run_id=fence
            )
    if run.kind == "input":
        try:
            return await begin.start(options, payload, run.thread_id, limit, tags, runner, streamed=True, run_id=fence)
        except (ThreadStateError, ThreadConflictError):
            if run.attempt == 1 or not await _input_committed(options, run):
                raise
            # the earlier attempt (its lease lapsed, so this run was re-queued) committed the input after this
            # attempt looked: resume it, as if it had been seen (a live earlier attempt's lease makes that a conflict)
            return await begin.resume(
                options, run.thread_id, NO_ANSWER, limit, tags, runner, streamed=True, run_id=fence
            )
    if run.attempt > 1 and payload is not NO_ANSWER:  # an earlier attempt may have recorded the answer, then died
        record = await options.store.thread(run.thread_id)
        if record.status != "partial":
            head, recorded = await options.store.load_head(record)
            if head.body.tasks and not recorded.open_interrupts(head.body.tasks):
                payload = NO_ANSWER  # answered: continue without answering again
    return await begin.resume(options, run.thread_id, payload, limit, tags, runner, streamed=True, run_id=fence)
