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
import contextlib
import warnings
from collections.abc import AsyncIterator, Mapping, Sequence
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
from graphckpt.savers._thread_pages import ThreadPage, page_of
from graphckpt.savers.usage import StorageUsage

__all__ = [
    "BRIEF_MAX",
    "MAX_ID_BYTES",
    "TERMINAL_EVENTS",
    "Blob",
    "BlobKind",
    "BlobRange",
    "EventKind",
    "FAMILY_SEP",
    "FinishedTask",
    "Lease",
    "Owner",
    "Saver",
    "Status",
    "StoredCheckpoint",
    "StoredEvent",
    "StoredWrite",
    "ThreadPage",
    "ThreadRecord",
    "WriteKind",
    "brief",
    "check_filter",
    "check_id",
    "check_storable",
    "claim_lost",
    "json_equal",
    "kept_key",
    "lease_from_columns",
    "lease_lost",
    "metadata_matches",
    "nul_free",
    "thread_busy",
    "thread_status",
    "utf8_safe",
]


FAMILY_SEP = "~"
"""Separates a family's id from the rest of a member thread's id: the threads ``F`` and ``F~...`` form the family
``F`` (:meth:`Saver.list_family`). A family is the set of graphckpt threads that one logical thread of another engine
maps to (LangGraph: one thread id, all its checkpoint namespaces and all its branches): each member is an ordinary
thread, and a branch is a fork of the member it branched from. ``~`` sorts after every other printable ASCII
character but ``DEL``, so the members are one key range: ``F~`` up to ``F\x7f``."""


def kept_key(checkpoint_id: str) -> str:
    """The key kept writes of ``checkpoint_id`` are stored under (see :meth:`Saver.put_kept_writes`): no checkpoint
    has it, so no commit clears them."""
    return checkpoint_id + "#kept"


class Saver(abc.ABC):
    """The persistence interface. Subclass it and pass :class:`graphckpt.testing.SaverConformance`."""

    _open: bool = False

    keeps_dead_rows: bool = False
    """An UPDATE leaves the old version of the row in the table until VACUUM (PostgreSQL's MVCC): a caller that could
    store a row whole and rewrite it smaller later (the compat saver's kept writes) stores it once instead."""

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
        kept_writes: Mapping[str, Sequence[StoredWrite]] | None = None,
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

        ``kept_writes`` (never used by the engine): ``{checkpoint id: writes}`` of this thread recorded as
        :meth:`put_kept_writes` records them, in the same transaction, and only if the commit succeeds (LangGraph's
        checkpointer rewrites its parent's writes and stores early ones with the checkpoint, without a transaction
        of their own).
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
        anywhere: bool = False,
    ) -> None:
        """Record pending writes against the checkpoint ``checkpoint_id`` (the thread's head), durably, in one
        transaction; when ``status`` is given the thread's status (and ``error``) change in the same transaction.

        A write with the same ``(task_id, kind, index)`` as a stored one replaces it. A ``status`` other than
        ``running`` releases the lease in the same transaction. Raises :class:`LeaseLostError` naming the new owner
        if the thread's owner is not ``run_id`` and :class:`ThreadConflictError` if the head is no longer
        ``checkpoint_id``; nothing is written then.

        ``anywhere=True`` (never used by the engine; see :meth:`put_kept_writes`) drops the head check: the writes
        are recorded against ``checkpoint_id`` whatever the head is, even a checkpoint not committed yet. The owner
        check stays, and :class:`ThreadNotFoundError` is raised when the thread does not exist.
        """

    async def put_kept_writes(
        self, thread_id: str, checkpoint_id: str, writes: Sequence[StoredWrite], *, run_id: str
    ) -> None:
        """Record writes against any checkpoint of the thread and keep them after the next commit (what LangGraph's
        checkpointer contract needs: every checkpoint keeps the writes its tasks made; graphckpt's engine never
        calls it). ``checkpoint_id`` may be any stored checkpoint of the thread, or one not committed yet: writes
        that arrive before their checkpoint are kept and read back once it is committed. The writes go under
        :func:`kept_key` of the checkpoint, a key no commit clears; read them with :meth:`get_kept_writes`. Same
        replacement, owner check and errors as :meth:`put_writes` (no head check)."""
        await self.put_writes(thread_id, kept_key(checkpoint_id), writes, run_id=run_id, anywhere=True)

    async def get_kept_writes(self, thread_id: str, checkpoint_id: str) -> list[StoredWrite]:
        """The writes :meth:`put_kept_writes` recorded against a checkpoint, ordered by ``(task_id, kind, index)``."""
        return await self.get_writes(thread_id, kept_key(checkpoint_id))

    async def list_family(self, family: str) -> list[ThreadRecord]:
        """The threads of one family, in one indexed query: ``family`` itself and every thread whose id starts with
        ``family + FAMILY_SEP`` (the branches of one logical thread; see :data:`FAMILY_SEP`), not deleted, ordered by
        thread id. This default filters :meth:`list_threads`; SQL backends answer with a range scan of the threads'
        primary key."""
        prefix = family + FAMILY_SEP
        records = await self.list_threads()
        found = [r for r in records if r.thread_id == family or r.thread_id.startswith(prefix)]
        return sorted(found, key=lambda r: r.thread_id)

    @abc.abstractmethod
    async def delete_thread(self, thread_id: str) -> None:
        """Delete a thread, in one transaction: its checkpoints, blobs, pending writes (journaled effects
        included, and kept writes of checkpoints never committed), events, runs, created-thread row, lease, durable
        wait and the crons that run turns of it. Checkpoints, blobs and events that a fork of it
        needs (its lineage up to each fork point) are kept, under a placeholder thread row without tags, error or
        lease; the thread no longer appears in :meth:`list_threads` and its id may be reused only after every fork
        that depends on it is deleted too (then the kept rows go as well). Raises :class:`ThreadNotFoundError` if
        it does not exist. (Refusing a delete that forks depend on is the caller's choice: see
        :meth:`thread_forks` and :func:`graphckpt.erase.erase_thread`.) A backend that keeps freed bytes in its
        files erases them as far as it can: SQLite overwrites them (``secure_delete``) and truncates its WAL."""

    async def drop_steps(self, thread_id: str, below: int, blobs_from: Mapping[str, int]) -> int:
        """Retention inside a live thread (``keep_last``, see :func:`graphckpt.prune.prune`), in one transaction:
        delete the thread's own checkpoints with a step under ``below``, their pending writes (kept writes too)
        and the events of those steps; and of its blobs, per channel, the rows under ``blobs_from[channel]`` (the
        oldest step a kept checkpoint reads that channel from: its last snapshot) or, for a channel not named, under
        ``below``. Steps at or under the highest fork point another thread's lineage needs (see
        :meth:`thread_forks`) are kept whatever the arguments, so forks still read what they read. Returns how many
        checkpoints went (0 when the thread does not exist or its head is under ``below``: nothing is deleted)."""
        raise SaverError(f"{type(self).__name__} cannot drop a thread's old steps")

    async def storage_usage(self, *, top: int = 10) -> StorageUsage:
        """Bytes per table and the ``top`` biggest threads (see :class:`~graphckpt.savers.usage.StorageUsage`), in
        one read. Backends that cannot tell raise :class:`~graphckpt.errors.SaverError`."""
        raise SaverError(f"{type(self).__name__} cannot report its storage usage")

    @contextlib.asynccontextmanager
    async def sweep_lock(self, name: str) -> AsyncIterator[bool]:
        """Whether this process is the one sweeper ``name`` (the TTL sweep) of this store right now: ``True`` while
        the block runs for exactly one holder at a time across processes on a backend shared by several hosts
        (PostgreSQL: a session advisory lock, released when the block ends or the connection drops), ``False`` when
        another holds it. This default yields ``True``: a sweep's deletes are idempotent, so overlapping sweeps of a
        local store only repeat work."""
        yield True

    async def thread_forks(self, thread_id: str) -> list[str]:
        """The live threads whose lineage runs through ``thread_id`` (its forks, their forks, ...; through deleted
        placeholders too), sorted. This default walks :meth:`list_threads` and so misses forks of placeholders;
        the bundled savers answer in one query."""
        children: dict[str, list[str]] = {}
        for record in await self.list_threads():
            if record.parent_thread_id is not None:
                children.setdefault(record.parent_thread_id, []).append(record.thread_id)
        found: set[str] = set()
        todo = [thread_id]
        while todo:
            for child in children.get(todo.pop(), []):
                if child not in found and child != thread_id:
                    found.add(child)
                    todo.append(child)
        return sorted(found)

    # -- reads -------------------------------------------------------------------------------------------------------

    @abc.abstractmethod
    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        """The thread's row, or ``None``. Deleted threads return ``None``."""

    @abc.abstractmethod
    async def list_threads(self, *, status: Status | None = None) -> list[ThreadRecord]:
        """Every (not deleted) thread, optionally only those with ``status``, most recently updated first. Statuses
        are as :func:`thread_status` reports them: ``crashed`` selects the ``running`` threads whose lease expired,
        ``running`` the others."""

    async def page_threads(
        self,
        *,
        limit: int = 50,
        after: str | None = None,
        status: Status | None = None,
        metadata: Mapping[str, Any] | None = None,
        parent_thread_id: str | None = None,
    ) -> ThreadPage:
        """One page of the (not deleted) threads, newest created first (``created_at``, then ``thread_id``,
        descending: a stable order, see :mod:`graphckpt.savers._thread_pages`): at most ``limit`` (1 to 10,000)
        threads after the cursor ``after`` (a page's ``next``), only those with ``status`` (as :meth:`list_threads`
        reports it), whose metadata matches ``metadata`` (:func:`metadata_matches`) and forked from
        ``parent_thread_id``. SQL backends answer it with one indexed read whatever the number of threads; this
        default (the memory saver's) reads every thread."""
        return page_of(
            await self.list_threads(),
            limit=limit,
            after=after,
            status=status,
            metadata=metadata,
            parent_thread_id=parent_thread_id,
        )

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
