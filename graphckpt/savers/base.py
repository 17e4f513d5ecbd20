"""The saver interface. Its docstrings are the specification every backend implements.

A saver stores three kinds of rows, all opaque to it except for the columns it must index:

``threads``
    one row per thread: its head (checkpoint id and step), status, the id of the run that owns it, its lease (see
    below), and where it was forked from. The head moves only by compare-and-set.
``checkpoints``
    one row per checkpoint: ids, parent, step, time, status, metadata (JSON, filterable) and ``body``, the engine's
    encoded record (frontier, channel table, interrupts, schema version). A checkpoint never changes once written.
``blobs``
    channel data, keyed by ``(thread_id, channel, step)``: the full value of a channel (``kind="snapshot"``), the
    writes folded into it at that step (``kind="delta"``), or the deltas of a run of consecutive steps packed into one
    row (``kind="chunk"``, keyed by the first of those steps). Unchanged channels write nothing, so storage grows with
    change, not with state. A blob's bytes never change; a chunk replaces the delta rows it packs (see ``commit``).
``events``
    the durable event log of each thread, written by the same transactions as the rows above (see
    :class:`StoredEvent`): what a stream replays after ``Last-Event-ID``. Savers derive the events from the rows they
    write (a trigger on SQL backends), so no write path can forget one.
``writes``
    pending writes: what tasks of the super-step that starts from a checkpoint have recorded so far (results, journaled
    effects, interrupts, resume answers, errors), keyed by ``(thread_id, checkpoint_id, task_id, kind, index)``.
    They exist so that a crash mid-super-step loses no finished work. When the next checkpoint of the same thread is
    committed, the writes recorded against its parent are deleted in the same transaction.

Every method is a coroutine. Bytes (``body``, ``data``) are produced and decoded by the engine; a saver never inspects
them. A saver raises :class:`~graphckpt.errors.ThreadConflictError` when a compare-and-set fails and
:class:`~graphckpt.errors.SaverError` (never a driver exception) when the backend itself fails. Its messages quote
ids through :func:`brief` and never the backend's SQL or bound values. Before writing, it refuses with
:class:`~graphckpt.errors.SerializationError` what no backend can store (see :func:`check_storable`: text with a lone
surrogate, NaN or an infinity in metadata), so every saver accepts the same values. Bytes a saver transforms itself
(compressed blobs) are untrusted when read back: a row that does not decode raises
:class:`~graphckpt.errors.CorruptCheckpointError` naming the thread and the checkpoint that wrote it, within memory
bounded by what the writer can produce.

Leases (DESIGN.md invariant 9): a process that runs a thread holds a lease on it: an :class:`Owner` (worker id,
host, pid), ``heartbeat_at``, ``lease_until`` and an ``epoch`` that grows by one with every claim. A claim of a thread
whose lease is live (``lease_until`` not past) is refused with :class:`~graphckpt.errors.ThreadBusyError` naming the
owner; an expired lease (a crashed process) is taken over. The claim also gives the thread a new ``run_id``: it is the
fence. Every write of a run (``commit``, ``put_writes``, ``heartbeat``) compares the thread's ``run_id`` with its own
in the same transaction as the head's compare-and-set, so a process whose lease was taken over (a new epoch, a new
``run_id``) gets :class:`~graphckpt.errors.LeaseLostError` naming the new owner and writes nothing. A commit or a stop
that leaves the thread in any status but ``running`` releases the lease in the same transaction; ``release`` gives
it up without a commit (a graceful stop). Reads report a ``running`` thread whose lease expired as ``crashed``
(:func:`thread_status`); a ``running`` thread that no process ever claimed (a fresh fork) or one released by a
graceful stop has no lease and stays ``running`` with ``lease=None``: nobody is on it, and nothing recovers it
automatically.

Lifecycle: a saver opens lazily on first use (``setup()`` is called by the first operation and is idempotent), is an
async context manager, and ``aclose()`` releases its connections. A saver garbage-collected while open warns with
``ResourceWarning``.
"""

from __future__ import annotations

import abc
import json
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self

from graphckpt.errors import LeaseLostError, SaverError, SerializationError, ThreadBusyError, ThreadConflictError

__all__ = [
    "TERMINAL_EVENTS",
    "Blob",
    "BlobKind",
    "BlobRange",
    "EventKind",
    "FinishedTask",
    "Lease",
    "Owner",
    "Saver",
    "Status",
    "StoredCheckpoint",
    "StoredEvent",
    "StoredWrite",
    "ThreadRecord",
    "WriteKind",
    "brief",
    "check_storable",
    "claim_lost",
    "filter_can_match",
    "json_equal",
    "lease_from_columns",
    "lease_lost",
    "metadata_matches",
    "thread_busy",
    "thread_status",
    "utf8_safe",
]

Status = Literal["running", "interrupted", "failed", "done", "crashed", "partial"]
"""Thread status. ``running``: work remains and nobody stopped it: a live run (its :attr:`ThreadRecord.lease` names
the owner), or a thread nobody holds (a fresh fork, a run stopped gracefully: ``lease`` is ``None``); ``resume``
continues it. ``crashed``: ``running`` with an expired lease: its process died (derived when read, never stored:
checkpoints carry ``running``, ``interrupted``, ``failed`` and ``done``). ``interrupted``: waiting for ``resume`` with
an answer (``interrupt_before``/``after`` or ``ctx.interrupt``). ``failed``: a node raised after its retries; the
error is in the head's pending writes. ``done``: the frontier is empty. ``partial`` (threads only, never a
checkpoint): an ancestor that an import brought only up to the fork point its descendant needs; its own run (later
checkpoints, status, pending writes) stayed in the source, so nothing resumes it (fork it, or import it itself)."""

BlobKind = Literal["snapshot", "delta", "chunk"]
"""What a blob's ``data`` holds: a channel's full value, one step's writes, or several steps' writes (see
:class:`Blob`)."""

WriteKind = Literal["result", "effect", "interrupt", "resume", "error", "started", "finished", "attempt", "answered"]
"""``result``: a finished task's output. ``effect``: one journaled external call (``index`` = call number in the task).
``interrupt``: the payload of ``ctx.interrupt`` (``index`` = interrupt number). ``resume``: the answer given to
``resume`` for that interrupt. ``error``: the failure of a task, after its retries. The audit record
(:mod:`graphckpt.audit`): ``started``: a call about to be made (``index`` = the task's start number, unique across
processes); ``finished``: how that started call ended; ``attempt``: a failed attempt of the task (``index`` = its
number); ``answered``: who answered interrupt ``index`` and when. A reader ignores kinds it does not know."""


@dataclass(frozen=True, slots=True)
class Blob:
    """One channel's data written at one step of one thread."""

    thread_id: str
    """The thread whose checkpoint wrote it (for a fork's inherited channels: an ancestor thread)."""
    channel: str
    """The state field."""
    step: int
    """The step of the checkpoint that wrote it. Unique per ``(thread_id, channel)``."""
    kind: BlobKind
    """``snapshot``: the full value. ``delta``: the writes to fold (through the reducer) into the value below.
    ``chunk``: the deltas of steps ``step .. s`` (for some ``s`` the engine records inside ``data``), in one row."""
    data: bytes
    """Engine-encoded payload."""


@dataclass(frozen=True, slots=True)
class BlobRange:
    """A request for the blobs of one channel of one thread with ``min_step <= step <= max_step``."""

    thread_id: str
    channel: str
    min_step: int
    max_step: int


@dataclass(frozen=True, slots=True)
class FinishedTask:
    """One task of a committed step, as its ``task.finished`` event tells it."""

    task_id: str
    node: str
    update: Mapping[str, Any]
    """What the task wrote (state key -> value, before reducers), as the node returned it."""
    duration_ms: float
    usage: Mapping[str, Any] | None = None
    """The model usage the task reported (``model``, ``prompt_tokens``, ``completion_tokens``, ``calls``)."""
    update_in_checkpoint: bool = False
    """The checkpoint holds ``update`` as it is (the step's only task; see :func:`graphckpt.codec.referable_update`):
    the event points there (``update: null, update_in: <checkpoint id>``) instead of storing it again."""


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    """A checkpoint as stored: indexed columns plus the engine's encoded body."""

    thread_id: str
    """The thread (branch) this checkpoint belongs to."""
    checkpoint_id: str
    """Unique, sortable by creation time (see :func:`graphckpt.ids.new_id`)."""
    parent_thread_id: str | None
    """The thread of the parent checkpoint; differs from ``thread_id`` only for a fork's first checkpoint."""
    parent_checkpoint_id: str | None
    """The previous checkpoint in this branch's lineage; ``None`` for a thread's very first checkpoint."""
    step: int
    """Super-step number. Strictly increasing along a lineage; unique within a thread."""
    created_at: float
    """Seconds since the epoch."""
    status: Status
    """The thread status this checkpoint leaves the thread in when it is the head."""
    metadata: Mapping[str, Any]
    """JSON-compatible audit record (source, step, writes per node, durations, usage, tags). Filterable."""
    body: bytes
    """Engine-encoded: frontier, channel table, interrupts, schema version, lineage. Opaque to the saver."""
    blobs: Sequence[Blob] = ()
    """Channel data written by this checkpoint. Only filled on :meth:`Saver.commit`; reads return ``()``."""
    tasks: Sequence[FinishedTask] = ()
    """The tasks of the step this checkpoint commits, one ``task.finished`` event each (see
    :func:`graphckpt.savers.events.checkpoint_events`). Only filled on :meth:`Saver.commit`; reads return ``()``."""


@dataclass(frozen=True, slots=True)
class StoredWrite:
    """One pending write recorded against a checkpoint."""

    task_id: str
    kind: WriteKind
    index: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Owner:
    """Who holds a lease: one process."""

    worker_id: str
    """Random, new at each process start (see :func:`graphckpt.lease.owner`)."""
    host: str
    pid: int

    def __str__(self) -> str:
        return f"worker {self.worker_id} (host {self.host}, pid {self.pid})"


@dataclass(frozen=True, slots=True)
class Lease:
    """A thread's lease as stored."""

    owner: Owner
    epoch: int
    """Grows by one with every claim of the thread."""
    heartbeat_at: float
    """When the owner last renewed it (seconds since the epoch)."""
    lease_until: float
    """When it expires unless renewed; after that the thread is ``crashed``."""

    def live(self, now: float) -> bool:
        return now <= self.lease_until

    def describe(self, now: float) -> str:
        """One line naming the owner and how fresh its heartbeat is."""
        return f"{self.owner}, epoch {self.epoch}, last heartbeat {max(0.0, now - self.heartbeat_at):.1f} s ago"


@dataclass(frozen=True, slots=True)
class ThreadRecord:
    """A thread's row."""

    thread_id: str
    head_checkpoint_id: str
    head_step: int
    status: Status
    run_id: str
    """The run that last claimed the thread; every write checks it (see :meth:`Saver.claim`)."""
    created_at: float
    updated_at: float
    parent_thread_id: str | None = None
    """For a fork: the thread it was forked from."""
    parent_checkpoint_id: str | None = None
    """For a fork: the checkpoint it was forked from."""
    error: str | None = None
    """For a failed thread: a one-line description of the error."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """The head checkpoint's metadata."""
    lease: Lease | None = None
    """The process holding the thread (live or expired), or ``None`` when nobody claimed it since its last stop."""
    epoch: int = 0
    """How many claims the thread has had (the lease's epoch; kept when the lease is released)."""


def thread_status(stored: str, lease_until: float | None, now: float) -> Status:
    """A thread's status as reads report it: ``crashed`` for a stored ``running`` whose lease expired."""
    if stored == "running" and lease_until is not None and lease_until < now:
        return "crashed"
    return stored  # type: ignore[return-value]


def thread_busy(thread_id: str, lease: Lease, now: float) -> Exception:
    """The error refusing a claim of a thread whose lease is live."""
    return ThreadBusyError(
        f"thread {brief(thread_id)!r} is being run by {lease.describe(now)}; its lease runs "
        f"{max(0.0, lease.lease_until - now):.1f} s more (wait for it to finish, or for the lease to expire if that "
        "process is gone)",
        thread_id=thread_id,
        lease=lease,
    )


def lease_from_columns(
    worker: str | None, host: str | None, pid: int | None, epoch: int, heartbeat_at: float | None, until: float | None
) -> Lease | None:
    """A thread row's lease columns as a :class:`Lease` (``None`` when the thread holds none)."""
    if worker is None or until is None:
        return None
    return Lease(Owner(worker, host or "", int(pid or 0)), int(epoch), float(heartbeat_at or 0.0), float(until))


def claim_lost(thread_id: str, record: ThreadRecord, now: float) -> Exception:
    """A claim lost the race (the head or the owner moved since it was read): the error names the winner, never
    our own expectation twice."""
    if record.lease is not None and record.status == "running":
        return (
            thread_busy(thread_id, record.lease, now)
            if record.lease.live(now)
            else ThreadConflictError(f"thread {brief(thread_id)!r} was claimed first by {record.lease.describe(now)}")
        )
    return ThreadConflictError(
        f"thread {brief(thread_id)!r} was claimed first by run {brief(record.run_id)} (it is {record.status} at "
        f"step {record.head_step} now)"
    )


def lease_lost(thread_id: str, lease: Lease | None, run_id: str, now: float) -> Exception:
    """The error for a write of run ``run_id`` on a thread that another claim took over since."""
    by = lease.describe(now) if lease is not None else "another run (which has finished or released it since)"
    return LeaseLostError(
        f"thread {brief(thread_id)!r} was taken over by {by}: this process (run {brief(run_id)}) lost its lease "
        "and stops without writing anything more",
        thread_id=thread_id,
        lease=lease,
    )


EventKind = Literal[
    "run.started",
    "task.finished",
    "task.failed",
    "effect.recorded",
    "interrupt.raised",
    "checkpoint",
    "run.done",
    "run.failed",
    "run.interrupted",
]
"""What an event records, and the write that makes it (in that write's transaction):

- ``run.started``: a thread created by an input (at its first step), or claimed by a run (at ``head_step + 1``);
  payload ``{run_id}``: the engine's claim of the thread (``ThreadRecord.run_id``), not a server's run id.
- ``task.finished``: one per task of a committed ``loop`` step (before that step's ``checkpoint`` event); payload
  ``{task_id, node, writes (the keys), update (the values, JSON-rendered), duration_ms, usage}``. Where the
  checkpoint holds the update as it is (the step's only task, the usual case) the event does not copy it: ``update``
  is null and ``update_in`` is that checkpoint's id; a reader takes it from there (``ThreadStore.task_update``; the
  server's streams always send it filled in). An update whose event would pass 64 KiB and that the checkpoint does
  not hold is left out (``update: null``, ``update_omitted``: the size). A checkpoint committed without its tasks
  (an import) has one per node that wrote instead, with ``task_id`` and ``update`` null.
- ``task.failed``, ``effect.recorded``, ``interrupt.raised``: a pending write of kind ``error``, ``effect`` or
  ``interrupt`` against the head at step ``s`` (event step ``s + 1``); payload ``{task_id, index, checkpoint_id}``.
- ``checkpoint``: a committed checkpoint; payload ``{checkpoint_id, parent_thread_id, parent_checkpoint_id, step,
  source, status, writes}``.
- ``run.done`` / ``run.interrupted``: a checkpoint of source ``input``, ``loop`` or ``update`` that leaves the thread
  ``done`` / ``interrupted``, right after its ``checkpoint`` event; ``run.failed`` / ``run.interrupted``: a stop
  recorded with pending writes (the head does not move; step ``head_step + 1``), after those writes' events. Payload
  ``{status, error}``. These end a stream."""

TERMINAL_EVENTS: frozenset[str] = frozenset({"run.done", "run.failed", "run.interrupted"})
"""The kinds that end a run's stream."""


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One durable event. ``(thread_id, step, seq)`` is unique and, per thread, strictly increasing in the order the
    events were written: ``step`` is the super-step the event belongs to, ``seq`` counts from 0 within it."""

    thread_id: str
    step: int
    seq: int
    kind: EventKind
    payload: Mapping[str, Any]
    """JSON object; its fields depend on ``kind`` (see :data:`EventKind`)."""
    created_at: float
    """Seconds since the epoch."""

    @property
    def id(self) -> str:
        """The SSE id, ``{thread_id}:{step}:{seq}``."""
        return f"{self.thread_id}:{self.step}:{self.seq}"


BRIEF_MAX = 80
"""How many characters of an id or name an error message quotes (see :func:`brief`)."""


def brief(text: str) -> str:
    """``text`` as error messages quote it: its first :data:`BRIEF_MAX` characters, then ``…`` when it is longer.
    An id may be a megabyte long; a message stays one readable line."""
    return text if len(text) <= BRIEF_MAX else text[:BRIEF_MAX] + "…"


def check_storable(checkpoint: StoredCheckpoint | None = None, /, **texts: str | None) -> None:
    """Refuse, before anything is written, what no backend can store: text with a lone surrogate (``"\\ud800"``,
    which has no UTF-8 form), and NaN or an infinity in metadata (JSON has neither). Checks ``checkpoint``'s ids,
    metadata and blobs' names, and each of ``texts`` (named by its keyword in the message); raises
    :class:`~graphckpt.errors.SerializationError`. Every saver calls it in its writes, so all refuse the same
    values (a driver would fail with its own traceback, or store what it cannot read back)."""
    for what, text in texts.items():
        _check_text(what, text)
    if checkpoint is None:
        return
    cp = checkpoint
    _check_text("thread_id", cp.thread_id)
    _check_text("checkpoint_id", cp.checkpoint_id)
    _check_text("parent_thread_id", cp.parent_thread_id)
    _check_text("parent_checkpoint_id", cp.parent_checkpoint_id)
    for b in cp.blobs:
        if not (b.channel.isascii() and b.thread_id.isascii()):
            _check_text(f"channel of a blob at step {b.step}", b.channel)
            _check_text("thread_id of a blob", b.thread_id)
    problem = _metadata_problem(cp.metadata)
    if problem is not None:
        where = f"metadata of checkpoint {brief(cp.checkpoint_id)!r} in thread {brief(cp.thread_id)!r}"
        raise SerializationError(f"{where} holds {problem}")


def _check_text(what: str, text: str | None) -> None:
    if text is None or text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise SerializationError(
            f"{what} {brief(text)!r} holds a lone surrogate (text with no UTF-8 form); it cannot be stored"
        ) from None


def _metadata_problem(value: Any, depth: int = 0) -> str | None:
    """What in metadata ``value`` no backend can store, or ``None``: a walk over its dicts and lists, cheap enough
    for every commit (ASCII text, the usual case, needs no encoding)."""
    if isinstance(value, str):
        if value.isascii():
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "a lone surrogate (text with no UTF-8 form); it cannot be stored"
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else "NaN or an infinity, which JSON cannot store"
    if depth > 200:
        return None  # deeper than any metadata the engine writes: the saver's own encoder judges it
    if isinstance(value, Mapping):
        for key, item in value.items():
            problem = _metadata_problem(key, depth + 1) or _metadata_problem(item, depth + 1)
            if problem is not None:
                return problem
    elif isinstance(value, list | tuple):
        for item in value:
            problem = _metadata_problem(item, depth + 1)
            if problem is not None:
                return problem
    return None


def utf8_safe(text: str | None) -> str | None:
    """``text`` with each lone surrogate written as its escape (``\\ud800``): for a failed thread's ``error``, a
    description that must be stored whatever the exception said."""
    if text is None:
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def filter_can_match(filter: Mapping[str, Any]) -> bool:
    """False when ``filter`` holds NaN or an infinity: stored metadata never does (see :func:`check_storable`), and
    NaN equals nothing, so such a filter matches no checkpoint (a backend need not send it to SQL)."""
    try:
        json.dumps(dict(filter), allow_nan=False, default=str)
    except ValueError as exc:
        return "Out of range float" not in str(exc)
    except TypeError:
        pass
    return True


def metadata_matches(metadata: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    """The metadata filter rule every saver implements: each key of ``filter`` is a top-level key of ``metadata``
    whose value equals the filter's value by JSON equality, at any depth: numbers by value (``1`` equals ``1.0``),
    booleans only booleans (``true`` is not ``1``), objects regardless of key order, arrays element by element.
    Numbers compare exactly, as Python compares an int with a float (``-2**63`` does not equal ``-2**63 - 1``, which
    a double cannot tell apart), a number never equals a string (``1`` is not ``"1"``), and a NaN or infinite
    filter value matches nothing (stored metadata holds neither). Keys and values are data, never code or SQL."""
    return all(key in metadata and json_equal(metadata[key], value) for key, value in filter.items())


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values as :func:`metadata_matches` defines it."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def nul_free(value: Any) -> Any:
    """``value`` with every string and key mapped one to one so that it holds no NUL: U+FFFF becomes U+FFFF ``1``,
    then NUL becomes U+FFFF ``0``. For savers whose JSON functions cannot hold NUL (PostgreSQL's ``jsonb``) or stop at
    it (SQLite's ``json_each``): they map stored metadata that escapes either character the same way in SQL, so
    filters compare as :func:`metadata_matches` says."""
    if isinstance(value, str):
        if "\x00" not in value and "\uffff" not in value:
            return value
        return value.replace("\uffff", "\uffff1").replace("\x00", "\uffff0")
    if isinstance(value, Mapping):
        return {nul_free(k): nul_free(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [nul_free(v) for v in value]
    return value


class Saver(abc.ABC):
    """The persistence interface. Subclass it and pass :class:`graphckpt.testing.SaverConformance`."""

    _open: bool = False

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    async def setup(self, *, create: bool = True) -> None:
        """Open connections and create (or migrate) the storage. Idempotent; called by every operation first.

        With ``create=False`` nothing is created: when graphckpt's tables are absent (a missing or empty SQLite
        file, a PostgreSQL schema never set up), :class:`~graphckpt.errors.StoreNotSetUpError` is raised and the
        store is left exactly as it was (no file, schema, table or setting is written). A store that exists opens as
        with ``create=True`` (missing migrations are applied). A store that exists as soon as its saver does (the
        memory saver) never raises it. Either way a store that holds another application's data (a SQLite file
        with tables of its own and not graphckpt's) is refused with ``StoreNotSetUpError`` before anything in it
        is touched, and a store written by a newer graphckpt (a migration this version does not know) with
        :class:`~graphckpt.errors.SaverError`."""
        self._open = True

    async def aclose(self) -> None:
        """Release connections. Idempotent. The saver may be used again afterwards (it reopens lazily)."""
        self._open = False

    async def __aenter__(self) -> Self:
        await self.setup()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __del__(self) -> None:
        if self._open:
            warnings.warn(f"{type(self).__name__} was not closed; call aclose()", ResourceWarning, stacklevel=2)

    # -- writes ------------------------------------------------------------------------------------------------------

    @abc.abstractmethod
    async def commit(
        self,
        checkpoint: StoredCheckpoint,
        *,
        expected_head: str | None,
        run_id: str,
        owner: Owner | None = None,
        lease_until: float | None = None,
    ) -> None:
        """Store ``checkpoint`` and its blobs and make it the thread's head, in one transaction.

        Compare-and-set: when ``expected_head`` is ``None`` the thread must not exist yet (it is created, owned by
        ``run_id``, with epoch 1 and, when ``owner`` is given and the checkpoint's status is ``running``, leased to
        ``owner`` until ``lease_until``); otherwise the thread's current head must be ``expected_head`` *and* its
        ``run_id`` must equal ``run_id`` (the lease fence). If not, nothing is written and
        :class:`ThreadConflictError` is raised: :class:`LeaseLostError` naming the new owner when another claim took
        the thread (its ``run_id`` differs), :class:`ThreadNotFoundError` when ``expected_head`` is given and the
        thread does not exist. On success the thread row takes the checkpoint's id, step, status and metadata,
        ``error`` is cleared, the lease is released when the status is not ``running`` (``owner`` is ignored then),
        and the pending writes recorded against ``checkpoint.parent_checkpoint_id`` in this same thread are deleted,
        and the events of :func:`graphckpt.savers.events.checkpoint_events` are appended to the thread's log.
        Readers never see half of it.

        A blob of kind ``chunk`` at step ``a`` packs the deltas its channel wrote at steps ``a`` to
        ``checkpoint.step``: in the same transaction the saver deletes that thread's and channel's other blobs with
        ``a < step < checkpoint.step``, and the chunk replaces the blob stored at ``a``. (Those rows are the deltas it
        packs; checkpoints that still refer to them read them from the chunk.)
        """

    @abc.abstractmethod
    async def claim(
        self,
        thread_id: str,
        *,
        expected_head: str,
        expected_run_id: str,
        run_id: str,
        owner: Owner | None = None,
        lease_until: float | None = None,
    ) -> int:
        """Take ownership of a thread for a new run: set its ``run_id`` to ``run_id``, its status to ``running``,
        its epoch one higher, and its lease to ``owner`` until ``lease_until`` (no lease when ``owner`` is
        ``None``: a claim that commits at once, like an import). Returns the new epoch.

        Compare-and-set on the head, the previous owner and the lease, in one statement: raises
        :class:`ThreadBusyError` (naming the owner and its heartbeat's age) when the thread's lease is live,
        :class:`ThreadConflictError` naming the winner when the head is not ``expected_head`` or the owner is not
        ``expected_run_id`` (somebody else claimed it since we read it), and :class:`ThreadNotFoundError` if the
        thread does not exist.
        """

    @abc.abstractmethod
    async def heartbeat(self, thread_id: str, *, run_id: str, lease_until: float) -> None:
        """Renew the lease of run ``run_id``: ``heartbeat_at`` becomes now and ``lease_until`` the given time, in one
        statement. Raises :class:`LeaseLostError` naming the new owner when the thread's ``run_id`` is no longer
        ``run_id`` (it was taken over), :class:`ThreadNotFoundError` when the thread is gone. A lease that expired
        without being taken over is renewed (nobody else wrote)."""

    @abc.abstractmethod
    async def release(self, thread_id: str, *, run_id: str) -> None:
        """Give up the lease of run ``run_id`` (the thread keeps its status and epoch, with no lease). Does nothing
        when ``run_id`` no longer owns the thread or the thread is gone."""

    @abc.abstractmethod
    async def put_writes(
        self,
        thread_id: str,
        checkpoint_id: str,
        writes: Sequence[StoredWrite],
        *,
        run_id: str,
        status: Status | None = None,
        error: str | None = None,
    ) -> None:
        """Record pending writes against the checkpoint ``checkpoint_id`` (the thread's head), durably, in one
        transaction; when ``status`` is given the thread's status (and ``error``) change in the same transaction.

        A write with the same ``(task_id, kind, index)`` as a stored one replaces it. A ``status`` other than
        ``running`` releases the lease in the same transaction. Raises :class:`LeaseLostError` naming the new owner
        if the thread's owner is not ``run_id`` and :class:`ThreadConflictError` if the head is no longer
        ``checkpoint_id``; nothing is written then.
        """

    @abc.abstractmethod
    async def delete_thread(self, thread_id: str) -> None:
        """Delete a thread. Checkpoints and blobs that a fork of it needs (its lineage up to each fork point) are
        kept, but the thread no longer appears in :meth:`list_threads` and its id may be reused only after every fork
        that depends on it is deleted too. Raises :class:`ThreadNotFoundError` if it does not exist."""

    # -- reads -------------------------------------------------------------------------------------------------------

    @abc.abstractmethod
    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        """The thread's row, or ``None``. Deleted threads return ``None``."""

    @abc.abstractmethod
    async def list_threads(self, *, status: Status | None = None) -> list[ThreadRecord]:
        """Every (not deleted) thread, optionally only those with ``status``, most recently updated first. Statuses
        are as :func:`thread_status` reports them: ``crashed`` selects the ``running`` threads whose lease expired,
        ``running`` the others."""

    @abc.abstractmethod
    async def get_checkpoint(
        self, thread_id: str, checkpoint_id: str | None = None, *, step: int | None = None
    ) -> StoredCheckpoint | None:
        """One checkpoint of ``thread_id`` by id, or by step, or the head when both are ``None``; one indexed read.
        Only checkpoints stored under ``thread_id`` are found (not the ancestors of a fork). ``blobs`` is empty."""

    async def get_thread_and_checkpoint(
        self, thread_id: str, checkpoint_id: str | None = None, *, step: int | None = None
    ) -> tuple[ThreadRecord | None, StoredCheckpoint | None]:
        """``get_thread(thread_id)`` and ``get_checkpoint(thread_id, checkpoint_id, step=step)`` together (the
        checkpoint is ``None`` when the thread is). This default makes the two calls; a backend with network round
        trips answers both in one."""
        record = await self.get_thread(thread_id)
        if record is None:
            return None, None
        return record, await self.get_checkpoint(thread_id, checkpoint_id, step=step)

    @abc.abstractmethod
    async def list_checkpoints(
        self,
        thread_id: str,
        *,
        limit: int | None = None,
        before_step: int | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[StoredCheckpoint]:
        """Checkpoints stored under ``thread_id``, newest (highest step) first, in one query: only those with
        ``step < before_step`` when given, only those whose metadata matches ``filter`` (see
        :func:`metadata_matches`; evaluated by the backend, with keys and values as bound parameters), at most
        ``limit``. ``blobs`` is empty."""

    @abc.abstractmethod
    async def get_blobs(self, ranges: Sequence[BlobRange]) -> list[Blob]:
        """Every blob inside any of ``ranges``, in one query, ordered by ``(channel, step)``. A chunk is inside a
        range when its own ``step`` is (the engine ignores the packed steps past the range's end)."""

    @abc.abstractmethod
    async def get_writes(self, thread_id: str, checkpoint_id: str) -> list[StoredWrite]:
        """The pending writes recorded against a checkpoint, ordered by ``(task_id, kind, index)``."""

    # -- events ------------------------------------------------------------------------------------------------------

    async def read_events(
        self, segments: Sequence[tuple[str, int, int]], *, after: tuple[int, int], limit: int
    ) -> list[StoredEvent]:
        """At most ``limit`` events with ``(step, seq) > after``, ordered by ``(step, seq)``, from the lineage
        ``segments`` (``(thread_id, first, upper)`` as :func:`graphckpt.store.lineage_segments` yields them: that
        thread's events with ``first <= step < upper``), in one query. Backends without an event log raise
        :class:`~graphckpt.errors.SaverError`."""
        raise SaverError(f"{type(self).__name__} keeps no event log")

    async def event_kind(self, thread_id: str, step: int, seq: int) -> str | None:
        """The kind of the stored event ``thread_id:step:seq``, or ``None`` when there is none (one indexed read)."""
        raise SaverError(f"{type(self).__name__} keeps no event log")

    async def events_version(self) -> int:
        """A number that grows whenever any event is written to this store, by any process: what a stream polls to
        know that it should read again (cheap: one index look-up)."""
        raise SaverError(f"{type(self).__name__} keeps no event log")
