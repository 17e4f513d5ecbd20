"""``ThreadStore``: the one place a thread's checkpoints are read and written, over a saver and a codec.

Reading: a thread's record, its loaded head and pending writes, any checkpoint of its lineage by id or step, history
pages, all through one lineage walk (:func:`lineage_segments`). Writing: :meth:`ThreadStore.write_checkpoint` is the
one recipe that turns a :class:`~graphckpt.records.StepRecord` into a checkpoint (changed channels, body, metadata) and
moves the head by compare-and-set; :meth:`~ThreadStore.record_writes` records pending writes; :meth:`~ThreadStore.claim`
takes a thread over, with a lease (see :mod:`graphckpt.lease`) when a run will follow. The engine, the app, forks,
the raw reader and export all go through it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

from graphckpt import ids, lease
from graphckpt.checkpoint import Interrupt, NodeUsage, Snapshot, Task, TaskError
from graphckpt.codec import Body, Codec, referable_update
from graphckpt.control import START, Send
from graphckpt.errors import CheckpointNotFoundError, CorruptCheckpointError, ThreadNotFoundError, ThreadStateError
from graphckpt.records import Head, Recorded, StepRecord, TaskResult
from graphckpt.savers import events
from graphckpt.savers.base import Blob, FinishedTask, Saver, Status, StoredCheckpoint, StoredWrite, ThreadRecord
from graphckpt.views import LazyFold, bulk, make_snapshot

__all__ = ["NO_RESULT", "ThreadStore", "lineage_segments", "partial_thread_error", "step_metadata"]

_AUDIT_KINDS = {
    "started": "starts",
    "finished": "finishes",
    "attempt": "attempts",
    "answered": "answered",
    "request": "requests",
}
"""The audit record's write kinds and the :class:`Recorded` table each fills (see :mod:`graphckpt.audit`)."""

NO_RESULT = b""
"""The data of a ``result`` pending write that withdraws an earlier one (a task that failed after its result was
written early); encoded results are never empty."""


def lineage_segments(lineage: Sequence[tuple[str, int]], upper: int) -> Iterator[tuple[str, int, int]]:
    """The lineage walk: ``(thread_id, first, upper)`` for each segment of ``lineage`` (newest first) holding
    checkpoints below step ``upper``: that thread's checkpoints with ``first <= step < upper`` belong to the lineage.
    A fork's ancestors count only up to the fork point."""
    for thread_id, first in lineage:
        if upper > first:
            yield thread_id, first, upper
        upper = min(upper, first)


class ThreadStore:
    """Checkpoints of threads in ``saver``, encoded by ``codec``."""

    def __init__(self, saver: Saver, codec: Codec, *, lease_seconds: float | None = None) -> None:
        self.saver = saver
        self.codec = codec
        self.lease_seconds = lease.lease_seconds(lease_seconds)
        """How long a run's lease lasts without a heartbeat (see :func:`graphckpt.lease.lease_seconds`)."""

    def lease_until(self) -> float:
        """The expiry of a lease taken now."""
        return ids.now() + self.lease_seconds

    def heartbeat(self, thread_id: str, run_id: str, until: float) -> lease.Heartbeat:
        """The heartbeat of a lease that run ``run_id`` took until ``until`` (started by the run)."""
        return lease.Heartbeat(self.saver, thread_id, run_id, self.lease_seconds, until)

    # -- reading ---------------------------------------------------------------------------------------------------

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        return await self.saver.get_thread(thread_id)

    async def thread(self, thread_id: str) -> ThreadRecord:
        """The thread's record; :class:`ThreadNotFoundError` if there is none."""
        record = await self.saver.get_thread(thread_id)
        if record is None:
            raise ThreadNotFoundError(f"no thread {thread_id!r}")
        return record

    async def checkpoint(self, thread_id: str, checkpoint_id: str) -> StoredCheckpoint:
        cp = await self.saver.get_checkpoint(thread_id, checkpoint_id)
        if cp is None:
            raise CheckpointNotFoundError(f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}")
        return cp

    async def load_head(self, record: ThreadRecord) -> tuple[Head, Recorded]:
        """The thread's head, loaded with the delta rows a run continuing from it packs, and its pending writes."""
        cp = await self.checkpoint(record.thread_id, record.head_checkpoint_id)
        body = self.codec.decode_body(cp)
        loose: dict[str, list[tuple[int, bytes]]] = {}
        values = await self.codec.load_values(self.saver, cp, body, loose=loose)
        return Head(cp, body, values, loose), await self.recorded(cp, body.tasks)

    async def recorded(self, cp: StoredCheckpoint, tasks: Sequence[Task]) -> Recorded:
        """The pending writes recorded against ``cp``, decoded."""
        return self.decode_recorded(cp, await self.saver.get_writes(cp.thread_id, cp.checkpoint_id), tasks)

    async def lineage(self, record: ThreadRecord) -> list[tuple[str, int]]:
        return self.codec.decode_body(await self.checkpoint(record.thread_id, record.head_checkpoint_id)).lineage

    async def find(
        self, thread_id: str, checkpoint_id: str | None, step: int | None = None
    ) -> tuple[StoredCheckpoint, ThreadRecord]:
        """A checkpoint of ``thread_id``'s lineage, by id or step: its own, or an ancestor's up to the fork point;
        with the thread's record."""
        if checkpoint_id is None and step is None:
            raise ValueError("give a checkpoint_id or a step")
        record, cp = await self.saver.get_thread_and_checkpoint(thread_id, checkpoint_id, step=step)
        if record is None:  # (a deleted thread may keep rows that a fork needs: they are read through the fork)
            raise ThreadNotFoundError(f"no thread {thread_id!r}")
        if cp is not None:
            return cp, record
        for tid, first, upper in lineage_segments(await self.lineage(record), record.head_step + 1):
            if tid == thread_id or (step is not None and not first <= step < upper):
                continue
            cp = await self.saver.get_checkpoint(tid, checkpoint_id, step=step)
            if cp is not None and first <= cp.step < upper:
                return cp, record
        what = f"checkpoint {checkpoint_id!r}" if checkpoint_id is not None else f"checkpoint at step {step}"
        raise CheckpointNotFoundError(f"thread {thread_id!r} has no {what} in its lineage")

    async def state(self, thread_id: str, checkpoint_id: str | None = None, step: int | None = None) -> Snapshot:
        """The head (with its current status, open interrupts and errors), or a checkpoint of the lineage."""
        if checkpoint_id is None and step is None:
            record = await self.thread(thread_id)
            head, recorded = await self.load_head(record)
            return self.snapshot(head, record.status, recorded)
        cp, record = await self.find(thread_id, checkpoint_id, step)
        if cp.thread_id == thread_id and cp.checkpoint_id == record.head_checkpoint_id:
            head, recorded = await self.load_head(record)
            return self.snapshot(head, record.status, recorded)
        body = self.codec.decode_body(cp)
        return self.snapshot(Head(cp, body, await self.codec.load_values(self.saver, cp, body)), cp.status, None)

    async def history(
        self,
        thread_id: str,
        *,
        limit: int | None = None,
        before: str | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[Snapshot]:
        """Checkpoints of the thread's lineage, newest first (see ``App.ahistory``): one query per segment walked
        and one for the blobs of the page; values are folded on first access."""
        record = await self.thread(thread_id)
        upper = record.head_step + 1
        if before is not None:
            upper = (await self.find(thread_id, before))[0].step
        found: list[StoredCheckpoint] = []
        for tid, first, below in lineage_segments(await self.lineage(record), upper):
            remaining = None if limit is None else limit - len(found)
            if remaining is not None and remaining <= 0:
                break
            rows = await self.saver.list_checkpoints(tid, limit=remaining, before_step=below, filter=filter)
            found += [cp for cp in rows if cp.step >= first]
        if not found:
            return []
        old, new = self.codec.decode_body(found[-1]), self.codec.decode_body(found[0])
        ranges = self.codec.history_ranges(found[-1], old, found[0], new)
        fold = LazyFold(self.codec, found, await self.saver.get_blobs(ranges) if ranges else [])
        head = (record.thread_id, record.head_checkpoint_id)
        with bulk():
            return [
                make_snapshot(
                    cp,
                    record.status if (cp.thread_id, cp.checkpoint_id) == head else cp.status,
                    functools.partial(fold.frontier, i),
                    functools.partial(fold.values, i),
                )
                for i, cp in enumerate(found)
            ]

    async def lineage_checkpoints(self, record: ThreadRecord) -> list[StoredCheckpoint]:
        """Every checkpoint of the thread's lineage, newest first (metadata only is read; no values)."""
        found: list[StoredCheckpoint] = []
        for tid, first, below in lineage_segments(await self.lineage(record), record.head_step + 1):
            found += [cp for cp in await self.saver.list_checkpoints(tid, before_step=below) if cp.step >= first]
        return found

    def snapshot(self, head: Head, status: Status, recorded: Recorded | None) -> Snapshot:
        """``head`` as a user sees it; with ``recorded``, its open ``ctx.interrupt`` calls and (failed) errors."""
        body = head.body
        interrupts = list(body.interrupts) if status == "interrupted" or recorded is None else []
        errors: tuple[TaskError, ...] = ()
        if recorded is not None:
            asked = recorded.open_interrupts(body.tasks)
            interrupts += [Interrupt(t.node, "inside", payload=p, task_id=t.id, index=i) for t, i, p in asked]
            errors = tuple(recorded.errors.values()) if status == "failed" else ()
        make, values = self.codec.state.make, head.values
        return make_snapshot(
            head.cp, status, lambda: (body.tasks, interrupts, body.schema_version), lambda: make(values), errors=errors
        )

    def decode_recorded(self, cp: StoredCheckpoint, writes: Sequence[StoredWrite], tasks: Sequence[Task]) -> Recorded:
        """Pending writes of ``cp`` back into results, effects, interrupts, answers and errors."""
        by_id = {t.id: t for t in tasks}
        rec = Recorded()
        for w in writes:
            task = by_id.get(w.task_id)
            if task is None:
                continue  # a write for a task this checkpoint does not plan: ignore it
            if w.kind == "result" and w.data == NO_RESULT:
                continue  # the task failed after its result was written: it runs again
            value = self.codec.decode_value(cp, w.data)
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
                    last = rec.last_attempt(task.id)  # ("attempt" sorts before "error": already decoded)
                    trace = last.get("traceback") if last is not None else None
                    rec.errors[task.id] = TaskError(
                        str(node), task.id, str(type_), str(message), trace if isinstance(trace, str) else None
                    )
                elif w.kind in _AUDIT_KINDS:
                    if not isinstance(value, dict):
                        raise TypeError(f"expected a mapping, got {type(value).__name__}")
                    getattr(rec, _AUDIT_KINDS[w.kind])[(task.id, w.index)] = value
            except (KeyError, TypeError, ValueError) as exc:
                raise CorruptCheckpointError(
                    f"checkpoint {cp.checkpoint_id} of thread {cp.thread_id!r}: pending write {w.kind} of task "
                    f"{w.task_id} has the wrong shape ({exc})",
                    thread_id=cp.thread_id,
                    checkpoint_id=cp.checkpoint_id,
                ) from None
        return rec

    # -- writing ---------------------------------------------------------------------------------------------------

    async def write_checkpoint(
        self,
        base: Head,
        record: StepRecord,
        *,
        run_id: str,
        checkpoint_id: str | None = None,
        fork_into: str | None = None,
        expected_head: str | None,
        claim: ThreadRecord | None = None,
        lease_until: float | None = None,
        rewrite: bool = False,
    ) -> Head:
        """The one checkpoint recipe: the step after ``base`` (its changed channels, body and metadata), committed
        with ``expected_head`` as the head's compare-and-set. ``fork_into`` starts a new thread of that id whose
        first checkpoint has ``base`` as parent. ``claim`` (the thread's record) takes the thread over first, once
        the checkpoint is built: a value that cannot be stored raises :class:`SerializationError` before anything
        is written. With ``lease_until`` the thread (created or claimed) is leased to this process until then.
        ``rewrite``: every channel of ``record.values`` is stored in full (values that do not follow from the base's,
        see :mod:`graphckpt.rebranch`). Returns the new head."""
        codec, step = self.codec, base.cp.step + 1
        checkpoint_id = checkpoint_id or ids.new_id()
        thread_id = fork_into or base.cp.thread_id
        channels, inline, full = codec.carry_over(base.body, record.values)
        if rewrite:
            full = [name for name in record.values if name in codec.state.channels]
        loose = None if fork_into else {name: list(rows) for name, rows in base.loose.items()}
        blobs = codec.channel_blobs(
            thread_id, step, record.values, record.writes, channels, inline, full=full, loose=loose
        )
        lineage = [(thread_id, step), *base.body.lineage] if fork_into else base.body.lineage
        body = Body(record.tasks, channels, lineage, record.interrupts, record.barriers, codec.version, inline)
        encoded = codec.encode_body(body, checkpoint_id)
        metadata = step_metadata(record.source, step, record.results, dict(record.tags) if record.tags else None)
        if record.wrote is not None:
            metadata["writes"] = dict(record.wrote)
        metadata.update(record.extra)
        parent = base.cp.checkpoint_id or None
        cp = StoredCheckpoint(
            thread_id,
            checkpoint_id,
            base.cp.thread_id if parent else None,
            parent,
            step,
            ids.now(),
            record.status,
            metadata,
            encoded,
            blobs,
            self.finished_tasks(record.results, blobs, inline, metadata) if record.source == "loop" else (),
        )
        if claim is not None:
            await self.claim(claim, run_id=run_id, lease_until=lease_until)
        owner = lease.owner() if lease_until is not None and claim is None else None
        await self.saver.commit(cp, expected_head=expected_head, run_id=run_id, owner=owner, lease_until=lease_until)
        events.changed(self.saver)
        return Head(cp, body, record.values, loose or {})

    def finished_tasks(
        self, results: Sequence[TaskResult], blobs: Sequence[Blob], inline: Mapping[str, bytes], meta: Mapping[str, Any]
    ) -> list[FinishedTask]:
        """The step's tasks as their ``task.finished`` events tell them (the input's pseudo-task is not one). The
        update of a step's only task is usually in the checkpoint already (:func:`~graphckpt.codec.referable_update`):
        its event then points there instead of storing it twice (not in a subgraph's child thread, whose graph a
        server streaming the parent does not decode)."""
        tasks = [r for r in results if r.task.node != START]
        referable = (
            len(tasks) == 1 and "subgraph" not in meta and referable_update(self.codec, tasks[0].update, blobs, inline)
        )
        return [
            FinishedTask(
                r.task.id, r.task.node, r.update, r.duration_ms, r.usage or None, update_in_checkpoint=referable
            )
            for r in tasks
        ]

    async def task_update(self, thread_id: str, checkpoint_id: str, keys: Sequence[str]) -> dict[str, Any] | None:
        """The update of a ``task.finished`` event that points to its checkpoint (``update_in_checkpoint``), read
        back from it (see :meth:`~graphckpt.codec.Codec.step_update`); ``None`` when it cannot be."""
        cp = await self.saver.get_checkpoint(thread_id, checkpoint_id)
        return None if cp is None else await self.codec.step_update(self.saver, cp, keys)

    async def claim(
        self, record: ThreadRecord, *, run_id: str, lease_until: float | None = None, take_over: bool = False
    ) -> int:
        """Take the thread over for ``run_id``, from the head and run that ``record`` shows; leased to this process
        until ``lease_until`` when given. Refused with :class:`~graphckpt.errors.ThreadBusyError` while another
        live process holds the lease; a dead owner on this host is no owner (its lease is taken at once), and
        ``take_over`` takes a live one too (fenced by its epoch: the old owner loses its next write). Returns the
        new epoch."""
        owner = lease.owner() if lease_until is not None else None
        held = record.lease
        take = held.epoch if held is not None and (take_over or held.owner.dead()) else None
        epoch = await self.saver.claim(
            record.thread_id,
            expected_head=record.head_checkpoint_id,
            expected_run_id=record.run_id,
            run_id=run_id,
            owner=owner,
            lease_until=lease_until,
            take_epoch=take,
        )
        events.changed(self.saver)  # its run.started
        return epoch

    async def record_writes(
        self,
        cp: StoredCheckpoint,
        writes: list[StoredWrite],
        *,
        run_id: str,
        status: Status | None = None,
        error: str | None = None,
    ) -> None:
        """Record pending writes against ``cp`` (and set the thread's status, for a stop)."""
        await self.saver.put_writes(cp.thread_id, cp.checkpoint_id, writes, run_id=run_id, status=status, error=error)
        events.changed(self.saver)


def step_metadata(source: str, step: int, results: Sequence[TaskResult], tags: dict[str, Any] | None) -> dict[str, Any]:
    """The audit record: which node wrote which keys, how long each node took, what models it used."""
    writes: dict[str, list[str]] = {}
    durations: dict[str, float] = {}
    replayed: dict[str, float] = {}
    usage: dict[str, dict[str, Any]] = {}
    for r in results:
        node = r.task.node
        keys = writes.setdefault(node, [])
        keys += [k for k in r.update if k not in keys]
        durations[node] = round(durations.get(node, 0.0) + r.duration_ms, 3)
        if r.replayed_ms:
            replayed[node] = round(replayed.get(node, 0.0) + r.replayed_ms, 3)
        if r.usage:
            reported: dict[str, Any] = dict(r.usage)
            u = usage.setdefault(node, {"model": reported.get("model", "")})
            for k in ("prompt_tokens", "completion_tokens", "calls"):
                u[k] = u.get(k, 0) + int(reported.get(k, 0))
    meta: dict[str, Any] = {"source": source, "step": step, "writes": writes, "durations_ms": durations}
    if usage:
        meta["usage"] = usage
    if replayed:
        meta["replayed_ms"] = replayed
    if tags:
        meta["tags"] = tags
    return meta


def partial_thread_error(record: ThreadRecord, what: str) -> ThreadStateError:
    """Why a ``partial`` thread (an imported ancestor, see :data:`graphckpt.Status`) cannot ``what``."""
    return ThreadStateError(
        f"thread {record.thread_id!r} is partial: an import brought it only up to checkpoint "
        f"{record.head_checkpoint_id!r}, the fork point a descendant needs, so it cannot {what} (its own run stayed "
        "in the source); fork it to continue from there, or import the thread itself"
    )
