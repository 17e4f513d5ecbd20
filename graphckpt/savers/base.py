"""The saver interface. Its docstrings are the specification every backend implements.

A saver stores five kinds of rows, all opaque to it except for the columns it must index:

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

The rows are defined in :mod:`graphckpt.savers._rows` and the checks and lease errors every saver shares in
:mod:`graphckpt.savers._checks`; this module re-exports both, and is the place to import them from.
"""

from __future__ import annotations

import abc
import warnings
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from graphckpt.errors import SaverError
from graphckpt.savers._checks import (
    BRIEF_MAX,
    MAX_ID_BYTES,
    brief,
    check_filter,
    check_id,
    check_storable,
    claim_lost,
    json_equal,
    lease_from_columns,
    lease_lost,
    metadata_matches,
    nul_free,
    thread_busy,
    thread_status,
    utf8_safe,
)
from graphckpt.savers._rows import (
    TERMINAL_EVENTS,
    Blob,
    BlobKind,
    BlobRange,
    EventKind,
    FinishedTask,
    Lease,
    Owner,
    Status,
    StoredCheckpoint,
    StoredEvent,
    StoredWrite,
    ThreadRecord,
    WriteKind,
)

__all__ = [
    "BRIEF_MAX",
    "MAX_ID_BYTES",
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
    "check_filter",
    "check_id",
    "check_storable",
    "claim_lost",
    "json_equal",
    "lease_from_columns",
    "lease_lost",
    "metadata_matches",
    "nul_free",
    "thread_busy",
    "thread_status",
    "utf8_safe",
]


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
        take_epoch: int | None = None,
    ) -> int:
        """Take ownership of a thread for a new run: set its ``run_id`` to ``run_id``, its status to ``running``,
        its epoch one higher, and its lease to ``owner`` until ``lease_until`` (no lease when ``owner`` is
        ``None``: a claim that commits at once, like an import). Returns the new epoch.

        Compare-and-set on the head, the previous owner and the lease, in one statement: raises
        :class:`ThreadBusyError` (naming the owner and its heartbeat's age) when the thread's lease is live and its
        epoch is not ``take_epoch`` (a caller passes the epoch it read to take a lease whose owner it knows is dead
        on this host, or a take-over a person confirmed; two such claims of one epoch: exactly one wins),
        :class:`ThreadConflictError` naming the winner when the head is not ``expected_head`` or the owner is not
        ``expected_run_id`` (somebody else claimed it since we read it), and :class:`ThreadNotFoundError` if the
        thread does not exist.
        """

    @abc.abstractmethod
    async def expire_lease(self, thread_id: str, *, epoch: int) -> bool:
        """End the lease of ``epoch`` now, in one statement (a compare-and-set on the epoch): its owner is known
        dead (a process of this host that is gone). The thread, still ``running``, reads as ``crashed`` from then on
        everywhere (SQL filters included), and its running run (a worker's) has its lease ended too, so the next
        sweep re-queues it. Returns ``False`` (nothing written) when the thread's epoch moved on, it holds no lease,
        it is not ``running`` or it is gone."""

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
        ``limit``. ``blobs`` is empty. A filter that is not JSON (:func:`check_filter`) raises
        :class:`~graphckpt.errors.InvalidArgumentError` naming its key, before any query."""

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
