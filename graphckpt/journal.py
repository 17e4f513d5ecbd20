"""The journal of a run: what a task's :class:`~graphckpt.context.Context` writes to while the step runs (journaled
effects, call starts and ends, failed attempts, interrupt answers, lease checks), and the group commit of finished
tasks' results as pending writes.

Every write is a pending write against the run's head checkpoint, recorded through the thread store. Finished
results of parallel tasks are queued and written together (:data:`WRITE_LINGER`); the step's commit holds whatever
was not written by then.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any, Protocol

from graphckpt import ids
from graphckpt.audit import CallInfo, digest
from graphckpt.control import Send
from graphckpt.errors import GraphckptError, SerializationError
from graphckpt.items import ItemStore, ScopedItems, tenant_of
from graphckpt.savers.base import Status, StoredWrite
from graphckpt.savers.waits import WaitTable

if TYPE_CHECKING:
    from graphckpt.checkpoint import Task
    from graphckpt.lease import Heartbeat
    from graphckpt.records import Head, Recorded, TaskResult
    from graphckpt.store import ThreadStore

__all__ = ["WRITE_LINGER", "Journal", "RunPosition"]

WRITE_LINGER = 0.002
"""Group commit: a finished task's result waits this long (seconds) for siblings that finish close behind it, then
all that finished are recorded in one transaction. When every task finishes inside the window, no pending write is
recorded at all: the super-step's commit holds the results. A long-running sibling delays a finished task's
durability by at most this much."""


class RunPosition(Protocol):
    """What a journal reads of its run: the head its writes go against, what is recorded there, and where the run's
    ephemeral events go."""

    head: Head
    recorded: Recorded
    thread_id: str
    namespace: tuple[str, ...]
    loop: asyncio.AbstractEventLoop

    @property
    def step(self) -> int: ...
    def emit(self, mode: str, payload: Any) -> None: ...
    def wants(self, mode: str) -> bool: ...


class Journal:
    """One run's journal (see the module docstring): the engine side of its tasks' contexts."""

    def __init__(self, run: RunPosition, store: ThreadStore, run_id: str, lease: Heartbeat | None) -> None:
        self.run, self.store, self.codec, self.run_id, self.lease = run, store, store.codec, run_id, lease
        self._queue: list[TaskResult] = []
        self._flusher: asyncio.Task[None] | None = None
        self._flush_timer: asyncio.TimerHandle | None = None
        self._replayed_ms: dict[str, float] = {}
        """Per task: the original time of the journaled calls the running attempt replayed."""
        self._held: tuple[str, dict[str, Any]] = ("", {})
        """The waker's answers, by interrupt id, of the durable waits held at the head so far (the step's parallel
        tasks share the thread's one wait: its firing answers every one of them)."""
        self._holding = asyncio.Lock()
        self._paying: set[tuple[str, int]] = set()
        """The started calls ``(task id, seq)`` whose end is not journaled yet: paid work still in flight."""
        self._settled = asyncio.Event()
        self._settled.set()

    # -- paid work in flight ----------------------------------------------------------------------------------------

    @property
    def calls_in_flight(self) -> int:
        """How many started journaled calls have not returned and been recorded yet."""
        return len(self._paying)

    async def settled(self) -> None:
        """Return once no journaled call is in flight: every call started has returned and its result (or its
        failure) is recorded. What a cancel waits for before it stops a step midway, so nothing paid is lost."""
        await self._settled.wait()

    def _paid(self, key: tuple[str, int]) -> None:
        self._paying.discard(key)
        if not self._paying:
            self._settled.set()

    # -- the run, as a context sees it ------------------------------------------------------------------------------

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self.run.loop

    @property
    def thread_id(self) -> str:
        return self.run.thread_id

    @property
    def step(self) -> int:
        return self.run.step

    @property
    def namespace(self) -> tuple[str, ...]:
        return self.run.namespace

    def emit(self, mode: str, payload: Any) -> None:
        self.run.emit(mode, payload)

    def wants(self, mode: str) -> bool:
        return self.run.wants(mode)

    def lease_fresh(self) -> bool:
        return self.lease is None or self.lease.fresh()

    async def hold(self, task: Task, index: int | None, wake_at: float, answers: dict[str, Any]) -> None:
        """A durable wait of ``task`` (see :mod:`graphckpt.waiting`): journal its wake-up time as effect ``index``
        (unless ``None``: already journaled), then record the thread's wait with the waker's ``answers`` (by
        interrupt id). Called before the thread stops ``interrupted``. The waits of parallel tasks at one head share
        the thread's one wait row: the earliest time, and the answers of all of them (a task woken before its own
        time waits again)."""
        if index is not None:
            await self.record_effect(task, index, wake_at)
        saver = self.store.saver
        if not isinstance(saver, WaitTable):
            raise GraphckptError(f"node {task.node!r}: {type(saver).__name__} has no durable waits")
        head = self.run.head.cp.checkpoint_id
        async with self._holding:  # one write at a time: the last one carries every answer held so far
            if self._held[0] != head:
                self._held = (head, {})
            self._held[1].update(answers)
            data = self.codec.serde.dumps(dict(self._held[1]))
            await saver.put_wait(self.run.thread_id, head, wake_at, data)

    @property
    def items(self) -> ScopedItems:
        """The item store of the run's saver (``ctx.store``; see :meth:`graphckpt.items.ItemStore.of`), as the
        thread's server namespace sees it (the whole store for a thread outside any)."""
        return ScopedItems(ItemStore.of(self.store.saver), tenant_of(self.run.thread_id))

    async def check_lease(self) -> None:
        if self.lease is not None:
            await self.lease.check()

    # -- what a context writes ------------------------------------------------------------------------------------

    async def record(
        self, writes: list[StoredWrite], *, status: Status | None = None, error: str | None = None
    ) -> None:
        """Record ``writes`` against the head (with the thread's new ``status`` when it stops)."""
        await self.store.record_writes(self.run.head.cp, writes, run_id=self.run_id, status=status, error=error)

    def recorded_effect(self, task: Task, index: int) -> tuple[bool, Any]:
        """Whether effect ``index`` of ``task`` is journaled, and its value (counted as a replay)."""
        key = (task.id, index)
        rec = self.run.recorded
        if key not in rec.effects:
            return False, None
        rec.replays[key] = rec.replays.get(key, 0) + 1
        for (tid, seq), start in rec.starts.items():  # the original call's time: a replayed step is not "fast"
            end = rec.finishes.get((tid, seq))
            if tid == task.id and start.get("effect") == index and end is not None and end.get("status") == "finished":
                ms = end.get("ms")
                if isinstance(ms, int | float) and not isinstance(ms, bool):
                    self._replayed_ms[task.id] = self._replayed_ms.get(task.id, 0.0) + float(ms)
                break
        return True, rec.effects[key]

    def replayed_ms(self, task_id: str) -> float:
        """The original time of the journaled calls ``task_id``'s attempt replayed; the count starts again."""
        return self._replayed_ms.pop(task_id, 0.0)

    async def start_call(self, task: Task, index: int, attempt: int, info: CallInfo, key: str) -> int:
        """Record that the task's effect ``index`` is about to be called (durably, before the call)."""
        recorded = self.run.recorded
        seq = recorded.next_seq(recorded.starts, task.id)
        entry: dict[str, Any] = {
            "effect": index,
            "name": info.name,
            "args": digest(info.arguments),
            "key": key,
            "attempt": attempt,
            "started_at": ids.now(),
        }
        if info.model is not None:
            entry["model"] = info.model
        recorded.starts[(task.id, seq)] = entry  # before the await: a concurrent effect takes the next number
        self._paying.add((task.id, seq))
        self._settled.clear()
        await self.record([StoredWrite(task.id, "started", seq, self.codec.serde.dumps(entry))])
        return seq

    async def record_effect(
        self,
        task: Task,
        index: int,
        value: Any,
        *,
        seq: int = -1,
        ms: float = 0.0,
        info: CallInfo | None = None,
        requests: list[dict[str, Any]] | None = None,
    ) -> None:
        """Journal effect ``index``'s ``value`` (with the end of its started call ``seq`` and the entries of its
        last ``requests``, in one transaction)."""
        try:
            data = self.codec.serde.dumps(value)
        except SerializationError as exc:
            raise SerializationError(
                f"node {task.node!r}: the result of effect #{index} cannot be journaled: {exc}"
            ) from None
        writes = [StoredWrite(task.id, "effect", index, data)]
        end: dict[str, Any] | None = None
        if seq >= 0:  # the call's end, in the journal entry's transaction
            end = {"status": "finished", "ms": round(ms, 3), "finished_at": ids.now()}
            if info is not None and info.usage is not None:
                with contextlib.suppress(Exception):
                    prompt, completion = info.usage(value)
                    end["usage"] = {"prompt_tokens": int(prompt), "completion_tokens": int(completion)}
            writes.append(StoredWrite(task.id, "finished", seq, self.codec.serde.dumps(end)))
        numbered = self._number_requests(task.id, requests or [])
        writes += [StoredWrite(task.id, "request", n, self.codec.serde.dumps(e)) for n, e in numbered]
        try:
            await self.record(writes)
        finally:
            self._paid((task.id, seq))
        self.run.recorded.effects[(task.id, index)] = value
        if end is not None:
            self.run.recorded.finishes[(task.id, seq)] = end

    async def call_failed(self, task: Task, seq: int, ms: float, exc: BaseException) -> None:
        """Record that the started call ``seq`` raised."""
        end = {
            "status": "failed",
            "ms": round(ms, 3),
            "finished_at": ids.now(),
            "error": f"{type(exc).__name__}: {exc}",
        }
        self.run.recorded.finishes[(task.id, seq)] = end
        try:
            await self.record([StoredWrite(task.id, "finished", seq, self.codec.serde.dumps(end))])
        finally:
            self._paid((task.id, seq))

    async def record_request(self, task: Task, entry: dict[str, Any]) -> None:
        """Record one HTTP attempt of a started call that did not answer (durably, before it is retried)."""
        writes = [
            StoredWrite(task.id, "request", n, self.codec.serde.dumps(e))
            for n, e in self._number_requests(task.id, [entry])
        ]
        await self.record(writes)

    def _number_requests(self, task_id: str, entries: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
        recorded, out = self.run.recorded, []
        for entry in entries:
            seq = recorded.next_seq(recorded.requests, task_id)
            recorded.requests[(task_id, seq)] = entry  # before the await: a concurrent call takes the next number
            out.append((seq, entry))
        return out

    async def record_attempt(self, entry: dict[str, Any]) -> None:
        """Record a failed attempt that is retried (the last one is recorded with the failure)."""
        task_id = str(entry["task"])
        recorded = self.run.recorded
        seq = recorded.next_seq(recorded.attempts, task_id)
        recorded.attempts[(task_id, seq)] = entry
        await self.record([StoredWrite(task_id, "attempt", seq, self.codec.serde.dumps(entry))])

    def answer(self, task: Task, index: int) -> tuple[bool, Any]:
        """Whether interrupt ``index`` of ``task`` has an answer, and the answer."""
        key = (task.id, index)
        answers = self.run.recorded.answers
        return (True, answers[key]) if key in answers else (False, None)

    # -- group commit of pending results ----------------------------------------------------------------------

    def enqueue(self, result: TaskResult) -> None:
        """Queue a finished task's result; it is written within ``WRITE_LINGER`` seconds if siblings still run."""
        self._queue.append(result)  # encoded only if it is written before the step commits
        if self._flush_timer is None and (self._flusher is None or self._flusher.done()):
            self._flush_timer = self.run.loop.call_later(WRITE_LINGER, self._start_flush)

    async def settle(self) -> None:
        """Every task of the step has finished: let a write under way end and drop what is still queued (the step's
        commit, or the stop's writes, hold it)."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()  # every task finished inside the linger: the commit records them all
            self._flush_timer = None
        if self._flusher is not None:
            await self._flusher
            self._flusher = None
        self._queue.clear()

    def _start_flush(self) -> None:
        self._flush_timer = None
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        while self._queue:
            try:
                batch = [StoredWrite(r.task.id, "result", 0, self.encode_result(r)) for r in self._queue]
            except SerializationError:
                return  # not storable: the step's commit finds the same value and fails the node that wrote it
            self._queue = []
            if self._flush_timer is not None:
                self._flush_timer.cancel()
                self._flush_timer = None
            await self.record(batch)

    def encode_result(self, r: TaskResult) -> bytes:
        """A finished task's result as its ``result`` pending write."""
        goto = [[g.node, True, g.payload] if isinstance(g, Send) else [g, False, None] for g in r.goto]
        try:
            return self.codec.serde.dumps({"u": r.update, "g": goto, "ms": r.duration_ms, "use": dict(r.usage)})
        except SerializationError as exc:
            raise SerializationError(f"node {r.task.node!r}: {exc}") from None
