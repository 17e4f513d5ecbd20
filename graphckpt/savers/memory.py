"""``MemorySaver``: the reference saver, in process memory. Nothing survives the process; use it for tests."""

from __future__ import annotations

import bisect
import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from graphckpt import ids
from graphckpt.errors import ThreadConflictError, ThreadNotFoundError
from graphckpt.savers._checks import (
    brief,
    check_filter,
    check_storable,
    claim_lost,
    lease_lost,
    metadata_matches,
    thread_busy,
    thread_status,
    utf8_safe,
)
from graphckpt.savers._memory_crons import MemoryCrons
from graphckpt.savers._memory_items import MemoryItems
from graphckpt.savers._memory_retention import MemoryRetention
from graphckpt.savers._memory_runs import MemoryRuns
from graphckpt.savers._memory_waits import MemoryWaits
from graphckpt.savers.base import (
    Blob,
    BlobRange,
    EventKind,
    Lease,
    Owner,
    Saver,
    Status,
    StoredCheckpoint,
    StoredEvent,
    StoredWrite,
    ThreadRecord,
    kept_key,
)
from graphckpt.savers.events import checkpoint_events
from graphckpt.savers.lazyjson import LazyJsonMapping
from graphckpt.savers.usage import StorageUsage, ThreadUsage

__all__ = ["MemorySaver"]

_WRITE_EVENTS: dict[str, EventKind] = {
    "effect": "effect.recorded",
    "interrupt": "interrupt.raised",
    "error": "task.failed",
}


@dataclasses.dataclass
class _Thread:
    record: ThreadRecord
    steps: list[int] = dataclasses.field(default_factory=list)  # sorted
    by_step: dict[int, StoredCheckpoint] = dataclasses.field(default_factory=dict)
    by_id: dict[str, StoredCheckpoint] = dataclasses.field(default_factory=dict)
    deleted: bool = False


class MemorySaver(MemoryRuns, MemoryItems, MemoryWaits, MemoryCrons, MemoryRetention, Saver):
    """Keeps everything in dictionaries. Follows the :class:`~graphckpt.savers.base.Saver` spec exactly, so it is
    also the executable reference for other backends."""

    def __init__(self, *, events: bool = True) -> None:
        self.events = events
        """Whether commits write their steps' events (see :mod:`graphckpt.savers.events`)."""
        self._threads: dict[str, _Thread] = {}
        self._blobs: dict[tuple[str, str], dict[int, Blob]] = {}
        self._writes: dict[tuple[str, str], dict[tuple[str, str, int], StoredWrite]] = {}
        self._events: dict[str, list[StoredEvent]] = {}  # per thread, in (step, seq) order
        self._version = 0

    def __del__(self) -> None:  # nothing to release
        pass

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
        check_storable(checkpoint, expected_head=expected_head, run_id=run_id)
        kept = _kept_rows(checkpoint.thread_id, kept_writes)
        thread = self._live(checkpoint.thread_id)
        now = ids.now()
        if expected_head is None:
            if checkpoint.thread_id in self._threads:  # live, or deleted but still holding rows a fork needs
                raise ThreadConflictError(f"thread {brief(checkpoint.thread_id)!r} already exists")
        elif thread is None:
            raise ThreadNotFoundError(f"thread {brief(checkpoint.thread_id)!r} does not exist")
        elif thread.record.run_id != run_id:
            raise lease_lost(checkpoint.thread_id, thread.record.lease, run_id, now)
        elif thread.record.head_checkpoint_id != expected_head:
            raise ThreadConflictError(
                f"thread {brief(checkpoint.thread_id)!r} moved: head is {brief(thread.record.head_checkpoint_id)!r}, "
                f"expected {brief(expected_head)!r}"
            )
        if thread is not None and checkpoint.step in thread.by_step:
            raise ThreadConflictError(
                f"thread {brief(checkpoint.thread_id)!r} already has a checkpoint at step {checkpoint.step}"
            )
        stored = dataclasses.replace(checkpoint, blobs=(), tasks=())
        running = checkpoint.status == "running"
        if thread is None:
            lease = None
            if owner is not None and lease_until is not None and running:
                lease = Lease(owner, 1, now, lease_until)
            thread = _Thread(
                ThreadRecord(
                    thread_id=checkpoint.thread_id,
                    head_checkpoint_id=checkpoint.checkpoint_id,
                    head_step=checkpoint.step,
                    status=checkpoint.status,
                    run_id=run_id,
                    created_at=now,
                    updated_at=now,
                    parent_thread_id=checkpoint.parent_thread_id
                    if checkpoint.parent_thread_id != checkpoint.thread_id
                    else None,
                    parent_checkpoint_id=checkpoint.parent_checkpoint_id,
                    metadata=dict(checkpoint.metadata),
                    lease=lease,
                    epoch=1,
                )
            )
            self._threads[checkpoint.thread_id] = thread
            if not running:  # -- runs
                self.end_run(checkpoint.thread_id, run_id, checkpoint.status, None, now)
        else:
            thread.record = dataclasses.replace(
                thread.record,
                head_checkpoint_id=checkpoint.checkpoint_id,
                head_step=checkpoint.step,
                status=checkpoint.status,
                updated_at=now,
                error=None,
                metadata=dict(checkpoint.metadata),
                lease=thread.record.lease if running else None,
            )
            if not running:  # -- runs: the claim's run ends with this commit
                self.end_run(checkpoint.thread_id, run_id, checkpoint.status, None, now)
        bisect.insort(thread.steps, checkpoint.step)
        thread.by_step[checkpoint.step] = stored
        thread.by_id[checkpoint.checkpoint_id] = stored
        for blob in checkpoint.blobs:
            stored_blobs = self._blobs.setdefault((blob.thread_id, blob.channel), {})
            if blob.kind == "chunk":  # it packs the deltas stored after its step: their rows go
                for step in [s for s in stored_blobs if blob.step < s < checkpoint.step]:
                    del stored_blobs[step]
            stored_blobs[blob.step] = blob
        if checkpoint.parent_checkpoint_id is not None and checkpoint.parent_thread_id == checkpoint.thread_id:
            self._writes.pop((checkpoint.thread_id, checkpoint.parent_checkpoint_id), None)
        self._checkpoint_events(checkpoint, created=expected_head is None, run_id=run_id)
        for key, rows in kept.items():
            self._writes.setdefault(key, {}).update(rows)

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
        check_storable(thread_id=thread_id, expected_head=expected_head, expected_run_id=expected_run_id, run_id=run_id)
        thread = self._require(thread_id)
        now = ids.now()
        record = thread.record
        held = record.lease is not None and now <= record.lease.lease_until and record.lease.epoch != take_epoch
        if held and record.lease is not None and record.status == "running":
            raise thread_busy(thread_id, record.lease, now)
        if record.head_checkpoint_id != expected_head or record.run_id != expected_run_id:
            raise claim_lost(thread_id, record, now)
        epoch = record.epoch + 1
        lease = Lease(owner, epoch, now, lease_until) if owner is not None and lease_until is not None else None
        thread.record = dataclasses.replace(
            record, run_id=run_id, status="running", updated_at=now, lease=lease, epoch=epoch
        )
        if record.run_id != run_id:
            self._event(thread_id, record.head_step + 1, "run.started", {"run_id": run_id})
        return epoch

    async def expire_lease(self, thread_id: str, *, epoch: int) -> bool:
        check_storable(thread_id=thread_id)
        thread = self._live(thread_id)
        if thread is None or thread.record.lease is None or thread.record.status != "running":
            return False
        record = thread.record
        if record.epoch != epoch or record.lease is None:
            return False
        now = ids.now() - 0.001  # strictly past for every later read
        thread.record = dataclasses.replace(record, lease=dataclasses.replace(record.lease, lease_until=now))
        self.renew_run(thread_id, record.run_id, now)
        return True

    async def heartbeat(self, thread_id: str, *, run_id: str, lease_until: float) -> None:
        check_storable(thread_id=thread_id, run_id=run_id)
        thread = self._require(thread_id)
        now = ids.now()
        record = thread.record
        if record.run_id != run_id:
            raise lease_lost(thread_id, record.lease, run_id, now)
        if record.lease is None:
            return  # released (the run stopped): nothing to renew
        self.renew_run(thread_id, run_id, lease_until)
        lease = dataclasses.replace(record.lease, heartbeat_at=now, lease_until=lease_until)
        thread.record = dataclasses.replace(record, lease=lease)

    async def release(self, thread_id: str, *, run_id: str) -> None:
        check_storable(thread_id=thread_id, run_id=run_id)
        thread = self._live(thread_id)
        if thread is not None and thread.record.run_id == run_id:
            thread.record = dataclasses.replace(thread.record, lease=None)

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
        check_storable(thread_id=thread_id, checkpoint_id=checkpoint_id, run_id=run_id)
        error = utf8_safe(error)
        for w in writes:
            check_storable(task_id=w.task_id)
        thread = self._require(thread_id)
        if thread.record.run_id != run_id:
            raise lease_lost(thread_id, thread.record.lease, run_id, ids.now())
        if not anywhere and thread.record.head_checkpoint_id != checkpoint_id:
            raise ThreadConflictError(
                f"thread {brief(thread_id)!r} moved: head is {brief(thread.record.head_checkpoint_id)!r}, "
                f"expected {brief(checkpoint_id)!r}"
            )
        table = self._writes.setdefault((thread_id, checkpoint_id), {})
        step = thread.by_id[checkpoint_id].step + 1 if checkpoint_id in thread.by_id else None
        for write in writes:
            table[(write.task_id, write.kind, write.index)] = write
            if step is not None and write.kind in _WRITE_EVENTS:
                payload = {"task_id": write.task_id, "index": write.index, "checkpoint_id": checkpoint_id}
                self._event(thread_id, step, _WRITE_EVENTS[write.kind], payload)
        if status is not None:
            before = thread.record.status
            lease = thread.record.lease if status == "running" else None
            thread.record = dataclasses.replace(
                thread.record, status=status, error=error, updated_at=ids.now(), lease=lease
            )
            if status in ("failed", "interrupted") and status != before:
                stop: EventKind = "run.failed" if status == "failed" else "run.interrupted"
                self._event(thread_id, thread.record.head_step + 1, stop, {"status": status, "error": error})
            if status != "running":  # -- runs
                self.end_run(thread_id, run_id, status, error, ids.now())

    async def delete_thread(self, thread_id: str) -> None:
        check_storable(thread_id=thread_id)
        thread = self._require(thread_id)
        thread.deleted = True  # a placeholder while a fork needs its lineage: no tags, error or lease
        thread.record = dataclasses.replace(thread.record, metadata={}, error=None, lease=None)
        self.forget_runs(thread_id)
        self._waits.pop(thread_id, None)
        for cron_id in [c.cron_id for c in self._crons.values() if c.thread_id == thread_id]:
            del self._crons[cron_id]
        self._collect()

    async def storage_usage(self, *, top: int = 10) -> StorageUsage:
        per: dict[str, list[int]] = {}
        tables = dict.fromkeys(("checkpoints", "blobs", "writes", "events"), 0)

        def add(table: str, thread_id: str, n: int, cps: int = 0) -> None:
            tables[table] += n
            row = per.setdefault(thread_id, [0, 0])
            row[0] += n
            row[1] += cps

        for tid, thread in self._threads.items():
            for cp in thread.by_step.values():
                add("checkpoints", tid, len(cp.body) + len(json.dumps(dict(cp.metadata), default=str)), 1)
            for e in self._events.get(tid, []):
                add("events", tid, len(json.dumps(e.payload, default=str)))
        for (tid, _), blobs in self._blobs.items():
            for blob in blobs.values():
                add("blobs", tid, len(blob.data))
        for (tid, _), writes in self._writes.items():
            for w in writes.values():
                add("writes", tid, len(w.data))
        ranked = sorted(per.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top]
        threads = [ThreadUsage(tid, n, cps) for tid, (n, cps) in ranked]
        return StorageUsage(tables, threads, sum(tables.values()), len(per))

    async def thread_forks(self, thread_id: str) -> list[str]:
        found: set[str] = set()
        frontier = {thread_id}
        while frontier:
            frontier = {
                t for t, th in self._threads.items() if th.record.parent_thread_id in frontier and t != thread_id
            } - found
            found |= frontier
        return sorted(t for t in found if not self._threads[t].deleted)

    def _collect(self) -> None:
        """Drop the rows of deleted threads beyond what the lineage of a remaining thread needs. Repeats until
        nothing changes: dropping a deleted fork's rows may free rows of the thread it was forked from."""
        pruned = True
        while pruned:  # a list, not a generator: every deleted thread is pruned in each round
            pruned = any(
                [t.deleted and self._prune(i, t, self._needed_steps(i)) for i, t in list(self._threads.items())]
            )

    def _prune(self, thread_id: str, thread: _Thread, needed: int | None) -> bool:
        """Drop the checkpoints, writes and blobs of ``thread_id`` above step ``needed`` (all when ``None``)."""
        dropped = [s for s in thread.steps if needed is None or s > needed]
        for step in dropped:
            cp = thread.by_step.pop(step)
            del thread.by_id[cp.checkpoint_id]  # its writes and kept writes go below with the keys no checkpoint has
        thread.steps = [s for s in thread.steps if needed is not None and s <= needed]
        kept = {k for cp in thread.by_id for k in (cp, kept_key(cp))}
        for key in [k for k in self._writes if k[0] == thread_id and k[1] not in kept]:
            del self._writes[key]  # kept writes of a checkpoint never committed too
        events = self._events.get(thread_id, [])
        events[:] = [e for e in events if needed is not None and e.step <= needed]
        for key, blobs in list(self._blobs.items()):
            if key[0] == thread_id:
                for step in [s for s in blobs if needed is None or s > needed]:
                    del blobs[step]
                if not blobs:
                    del self._blobs[key]
        if needed is None:
            del self._threads[thread_id]
            self._events.pop(thread_id, None)
            return True
        return bool(dropped)

    def _needed_steps(self, thread_id: str) -> int | None:
        """The highest step of ``thread_id`` that a fork's lineage still uses, or ``None``. Deleted forks that are
        still kept (because a fork of theirs needs them) count too."""
        highest: int | None = None
        for other in self._threads.values():
            if other.record.thread_id == thread_id:
                continue
            first = other.by_step[other.steps[0]] if other.steps else None
            if first is not None and first.parent_thread_id == thread_id and first.parent_checkpoint_id:
                parent = self._threads[thread_id].by_id.get(first.parent_checkpoint_id)
                if parent is not None:
                    highest = parent.step if highest is None else max(highest, parent.step)
        return highest

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        thread = self._live(thread_id)
        return _reported(thread.record, ids.now()) if thread is not None else None

    async def list_threads(self, *, status: Status | None = None) -> list[ThreadRecord]:
        now = ids.now()
        records = [_reported(t.record, now) for t in self._threads.values() if not t.deleted]
        if status is not None:
            records = [r for r in records if r.status == status]
        return sorted(records, key=lambda r: (r.updated_at, r.thread_id), reverse=True)

    async def get_checkpoint(
        self, thread_id: str, checkpoint_id: str | None = None, *, step: int | None = None
    ) -> StoredCheckpoint | None:
        thread = self._threads.get(thread_id)
        if thread is None:
            return None
        if checkpoint_id is not None:
            found = thread.by_id.get(checkpoint_id)
            return found if found is not None and (step is None or found.step == step) else None
        if step is not None:
            return thread.by_step.get(step)
        if thread.deleted:
            return None
        return thread.by_id.get(thread.record.head_checkpoint_id)

    async def list_checkpoints(
        self,
        thread_id: str,
        *,
        limit: int | None = None,
        before_step: int | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[StoredCheckpoint]:
        if filter:
            check_filter(filter)
        thread = self._threads.get(thread_id)
        if thread is None:
            return []
        out: list[StoredCheckpoint] = []
        for step in reversed(thread.steps):
            if limit is not None and len(out) >= limit:
                break
            if before_step is not None and step >= before_step:
                continue
            cp = thread.by_step[step]
            if filter and not metadata_matches(cp.metadata, filter):
                continue
            out.append(cp)
        return out

    async def get_blobs(self, ranges: Sequence[BlobRange]) -> list[Blob]:
        found: dict[tuple[str, str, int], Blob] = {}  # a blob inside several ranges is returned once
        for r in ranges:
            for step, blob in self._blobs.get((r.thread_id, r.channel), {}).items():
                if r.min_step <= step <= r.max_step:
                    found[(r.thread_id, r.channel, step)] = blob
        return sorted(found.values(), key=lambda b: (b.channel, b.step))

    async def get_writes(self, thread_id: str, checkpoint_id: str) -> list[StoredWrite]:
        table = self._writes.get((thread_id, checkpoint_id), {})
        return [table[key] for key in sorted(table)]

    # -- events (what the SQL savers write: graphckpt.savers.events, and the triggers of _events_sql) ---------------

    def _event(self, thread_id: str, step: int, kind: EventKind, payload: Mapping[str, Any], at: float = 0.0) -> None:
        log = self._events.setdefault(thread_id, [])
        seq = log[-1].seq + 1 if log and log[-1].step == step else 0
        log.append(StoredEvent(thread_id, step, seq, kind, payload, at or ids.now()))
        self._version += 1

    def _checkpoint_events(self, cp: StoredCheckpoint, *, created: bool, run_id: str) -> None:
        if created and cp.metadata.get("source") == "input":
            self._event(cp.thread_id, cp.step, "run.started", {"run_id": run_id})
        for kind, payload in checkpoint_events(cp) if self.events else ():  # parsed when a reader looks inside
            self._event(cp.thread_id, cp.step, kind, LazyJsonMapping(payload), cp.created_at)

    async def read_events(
        self, segments: Sequence[tuple[str, int, int]], *, after: tuple[int, int], limit: int
    ) -> list[StoredEvent]:
        found = [
            e
            for tid, first, upper in segments
            for e in self._events.get(tid, ())
            if first <= e.step < upper and (e.step, e.seq) > after
        ]
        return sorted(found, key=lambda e: (e.step, e.seq))[:limit]

    async def event_kind(self, thread_id: str, step: int, seq: int) -> str | None:
        return next((e.kind for e in self._events.get(thread_id, ()) if (e.step, e.seq) == (step, seq)), None)

    async def events_version(self) -> int:
        return self._version

    def _live(self, thread_id: str) -> _Thread | None:
        thread = self._threads.get(thread_id)
        return thread if thread is not None and not thread.deleted else None

    def _require(self, thread_id: str) -> _Thread:
        thread = self._live(thread_id)
        if thread is None:
            raise ThreadNotFoundError(f"thread {brief(thread_id)!r} does not exist")
        return thread


def _reported(record: ThreadRecord, now: float) -> ThreadRecord:
    """The record as reads report it: ``crashed`` for a ``running`` thread whose lease expired (or whose owner is a
    dead process of this host)."""
    status = thread_status(record.status, record.lease, now)
    return record if status == record.status else dataclasses.replace(record, status=status)


def _kept_rows(
    thread_id: str, kept_writes: Mapping[str, Sequence[StoredWrite]] | None
) -> dict[tuple[str, str], dict[tuple[str, str, int], StoredWrite]]:
    """``commit``'s ``kept_writes`` by the key of their table, checked."""
    out: dict[tuple[str, str], dict[tuple[str, str, int], StoredWrite]] = {}
    for checkpoint_id, writes in (kept_writes or {}).items():
        for w in writes:
            check_storable(task_id=w.task_id)
        out[(thread_id, kept_key(checkpoint_id))] = {(w.task_id, w.kind, w.index): w for w in writes}
    return out
