"""``App``: a compiled graph bound to a saver. Run, resume, inspect, fork and diff threads.

Every operation is async inside (``ainvoke``, ``aresume``, ...); the sync methods are a thin facade that runs the
same coroutine on a long-lived background loop (:class:`~graphckpt.portal.Portal`).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import threading
import typing
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from graphckpt import ids
from graphckpt.checkpoint import CheckpointRef, Interrupt, Snapshot, Task, ThreadInfo
from graphckpt.codec import Body, Codec, Loose
from graphckpt.control import START, Send
from graphckpt.diff import Diff, diff_values
from graphckpt.engine import (
    SYNC_FACADE,
    Head,
    Recorded,
    RouteError,
    Run,
    TaskResult,
    decode_recorded,
    frontier_status,
    note_sync_call,
    route,
    step_metadata,
)
from graphckpt.errors import (
    CheckpointNotFoundError,
    InvalidUpdateError,
    NodeError,
    SyncCallError,
    ThreadConflictError,
    ThreadNotFoundError,
    ThreadStateError,
)
from graphckpt.portal import Portal
from graphckpt.savers.base import Blob, BlobRange, Saver, Status, StoredCheckpoint, StoredWrite, ThreadRecord
from graphckpt.savers.memory import MemorySaver
from graphckpt.serde import Serializer, types_in
from graphckpt.views import LazyFold, as_dict, make_snapshot, thread_info

if TYPE_CHECKING:
    from graphckpt.graph import StateGraph

__all__ = ["App", "StreamMode"]

T = TypeVar("T")
StreamMode = Literal["updates", "values", "checkpoints"]
_NO_ANSWER: Any = object()
CheckpointSpec = Snapshot | CheckpointRef | tuple[str, str | None]


class App:
    """A compiled graph. Create it with :meth:`StateGraph.compile`."""

    def __init__(
        self,
        graph: StateGraph,
        saver: Saver | None,
        *,
        interrupt_before: frozenset[str],
        interrupt_after: frozenset[str],
        recursion_limit: int,
        snapshot_every: int,
    ) -> None:
        self.graph = graph
        self.saver: Saver = saver if saver is not None else MemorySaver()
        self.interrupt_before = interrupt_before
        self.interrupt_after = interrupt_after
        self.recursion_limit = recursion_limit
        serde = Serializer()
        for annotation in [c.annotation for c in graph.state.channels.values()] + _input_annotations(graph):
            for tp in types_in(annotation):
                serde.register(tp)
        self.codec = Codec(
            graph.state, serde, version=graph.version, snapshot_every=snapshot_every, migrations=graph.migrations
        )
        self._portal = Portal()
        self._sync_lock = threading.Lock()
        self._sync_calls = 0  # sync calls in flight (see engine.SYNC_FACADE)
        self._node_ms: dict[str, float] = {}  # sync nodes' average duration, shared by this app's runs
        self._closes = 0  # how many times the app was closed (a sync fork's lazy values must not outlive it)

    # -- running ----------------------------------------------------------------------------------------------------

    async def ainvoke(
        self,
        input: Mapping[str, Any] | Any,
        *,
        thread_id: str | None = None,
        recursion_limit: int | None = None,
        tags: Mapping[str, Any] | None = None,
    ) -> Snapshot:
        """Start a run on ``thread_id`` (a new thread, or one that is ``done``: multi-turn) with ``input`` applied
        through the reducers, and run it until it is done, interrupted or failed. Returns the head snapshot.
        Raises :class:`NodeError` when a node fails (the thread is ``failed``; call :meth:`aresume`)."""
        return await self._start(input, thread_id, recursion_limit, tags, None)

    async def aresume(
        self,
        thread_id: str,
        answer: Any = _NO_ANSWER,
        *,
        recursion_limit: int | None = None,
        tags: Mapping[str, Any] | None = None,
    ) -> Snapshot:
        """Continue a thread from its head: after a crash (``running``), a failure (``failed``: only the tasks
        without recorded results run again) or an interrupt (``answer`` is what ``ctx.interrupt`` returns).
        Resuming a ``done`` thread returns its head unchanged."""
        return await self._resume(thread_id, answer, recursion_limit, tags, None)

    async def _start(
        self,
        input: Any,
        thread_id: str | None,
        recursion_limit: int | None,
        tags: Mapping[str, Any] | None,
        on_commit: Any,
    ) -> Snapshot:
        _check_limit(recursion_limit)
        if thread_id is None:
            thread_id = ids.new_id()
        elif not isinstance(thread_id, str) or not thread_id:
            raise ValueError(f"thread_id must be a non-empty string (or None for a new thread), not {thread_id!r}")
        update = self.codec.state.validate_update(input, node="input")
        record = await self.saver.get_thread(thread_id)
        run_id = ids.new_id()
        if record is None:
            base = Head(_NO_CP, Body([], {}, [(thread_id, 0)], schema_version=self.graph.version), {})
            values, writes = self.codec.state.apply(self.codec.state.defaults(), [update])
            step, parent, expected = 0, None, None
        elif record.status == "done":
            base, _ = await self._load_head(thread_id, record)
            values, writes = self.codec.state.apply(base.values, [update])
            step, parent, expected = base.cp.step + 1, base.cp.checkpoint_id, base.cp.checkpoint_id
        else:
            raise ThreadStateError(
                f"thread {thread_id!r} is {record.status}; call resume({thread_id!r}"
                f"{', answer' if record.status == 'interrupted' else ''}) to continue it"
            )
        self.codec.state.check_required(values, node="input")
        cid = ids.new_id()
        start = TaskResult(Task("input", START), update)
        try:
            tasks, barriers = route(self.graph, values, [start], base.body.barriers, cid, self.codec)
        except RouteError as exc:  # nothing was written: the thread is as it was
            if isinstance(exc.cause, InvalidUpdateError):
                raise exc.cause from None
            raise NodeError(
                f"thread {thread_id!r}: the router after START raised {type(exc.cause).__name__}: {exc.cause}",
                thread_id=thread_id,
                node=START,
                step=step,
            ) from exc.cause
        status, interrupts = frontier_status(tasks, [], self.interrupt_before, frozenset())
        channels, inline, full = self.codec.carry_over(base.body, values)
        loose = {name: list(rows) for name, rows in base.loose.items()}
        blobs = self.codec.channel_blobs(thread_id, step, values, writes, channels, inline, full=full, loose=loose)
        body = Body(tasks, channels, base.body.lineage, interrupts, barriers, self.graph.version, inline)
        metadata = step_metadata("input", step, [], dict(tags) if tags else None)
        metadata["writes"] = {"input": list(update)}
        cp = StoredCheckpoint(
            thread_id, cid, thread_id if parent else None, parent, step, ids.now(), status, metadata,
            self.codec.encode_body(body, cid), blobs,
        )  # fmt: skip
        if record is not None:  # a new turn on a done thread: take it over only now that the checkpoint is ready
            await self.saver.claim(thread_id, expected_head=record.head_checkpoint_id, expected_run_id=record.run_id,
                                   run_id=run_id)  # fmt: skip
        await self.saver.commit(cp, expected_head=expected, run_id=run_id)
        head = Head(cp, body, values, loose)
        if on_commit is not None:
            on_commit(head, [start])
        return await self._drive(head, Recorded(), run_id, recursion_limit, tags, on_commit, first=False)

    async def _resume(
        self, thread_id: str, answer: Any, recursion_limit: int | None, tags: Any, on_commit: Any
    ) -> Snapshot:
        _check_limit(recursion_limit)
        record = await self._thread(thread_id)
        head, recorded = await self._load_head(thread_id, record)
        if tags is None:
            tags = head.cp.metadata.get("tags")  # a resumed run keeps the tags of the run it continues
        open_interrupts = recorded.open_interrupts(head.body.tasks)
        if record.status == "done" or not head.body.tasks:
            if answer is not _NO_ANSWER:
                raise ThreadStateError(f"thread {thread_id!r} is done; nothing is waiting for an answer")
            if record.status != "done":  # e.g. a crash after a new turn claimed the thread, before its first commit
                run_id = ids.new_id()
                await self.saver.claim(
                    thread_id, expected_head=head.cp.checkpoint_id, expected_run_id=record.run_id, run_id=run_id
                )
                await self.saver.put_writes(thread_id, head.cp.checkpoint_id, [], run_id=run_id, status="done")
            return self._snapshot(head, "done", recorded)
        if open_interrupts and answer is _NO_ANSWER:
            task, _, question = open_interrupts[0]
            raise ThreadStateError(
                f"thread {thread_id!r} is waiting for an answer to {question!r} (node {task.node!r}); "
                f"call resume({thread_id!r}, answer)"
            )
        if not open_interrupts and answer is not _NO_ANSWER:
            raise ThreadStateError(f"thread {thread_id!r} is not waiting for an answer (no ctx.interrupt is open)")
        # an answer that cannot be stored is refused before the claim, which would mark the thread running
        answer_data = self.codec.serde.dumps(answer) if open_interrupts else b""
        run_id = ids.new_id()
        await self.saver.claim(
            thread_id, expected_head=head.cp.checkpoint_id, expected_run_id=record.run_id, run_id=run_id
        )
        # The previous owner, if still alive, may have recorded writes (a journaled effect, a finished task) between
        # our read and the claim; from the claim on nobody else can write against this head: read them again.
        writes = await self.saver.get_writes(thread_id, head.cp.checkpoint_id)
        recorded = decode_recorded(self.codec, head.cp, writes, head.body.tasks)
        if open_interrupts:
            task, index, _ = open_interrupts[0]
            await self.saver.put_writes(
                thread_id, head.cp.checkpoint_id, [StoredWrite(task.id, "resume", index, answer_data)], run_id=run_id
            )
            recorded.answers[(task.id, index)] = answer
        recorded.errors.clear()
        return await self._drive(head, recorded, run_id, recursion_limit, tags, on_commit, first=True)

    async def _drive(
        self,
        head: Head,
        recorded: Recorded,
        run_id: str,
        recursion_limit: int | None,
        tags: Any,
        on_commit: Any,
        *,
        first: bool,
    ) -> Snapshot:
        if not first and head.cp.status == "interrupted":
            return self._snapshot(head, "interrupted", recorded)
        run = Run(
            self.graph, self.codec, self.saver, head=head, recorded=recorded, run_id=run_id,
            interrupt_before=self.interrupt_before, interrupt_after=self.interrupt_after,
            recursion_limit=self.recursion_limit if recursion_limit is None else recursion_limit,
            tags=dict(tags) if tags else None,
            on_commit=on_commit, node_ms=self._node_ms,
        )  # fmt: skip
        status = await run.execute()
        return self._snapshot(run.head, status, run.recorded)

    # -- streaming -----------------------------------------------------------------------------------------------

    async def astream(
        self,
        input: Any,
        *,
        thread_id: str | None = None,
        mode: StreamMode = "updates",
        recursion_limit: int | None = None,
        tags: Mapping[str, Any] | None = None,
        resume: bool = False,
        answer: Any = _NO_ANSWER,
    ) -> AsyncIterator[Any]:
        """Run like :meth:`ainvoke` (or like :meth:`aresume` with ``resume=True``: then ``input`` is ignored and
        ``answer``, when given, answers the open interrupt) and yield after every committed checkpoint:
        ``updates``: ``{node: update}`` of the step; ``values``: the state; ``checkpoints``: the :class:`Snapshot`."""
        if mode not in ("updates", "values", "checkpoints"):
            raise ValueError(f"stream mode must be 'updates', 'values' or 'checkpoints', not {mode!r}")
        queue: asyncio.Queue[tuple[Head, list[TaskResult]] | None] = asyncio.Queue()

        def on_commit(head: Head, results: list[TaskResult]) -> None:
            queue.put_nowait((head, results))

        if resume:
            if thread_id is None:
                raise ValueError("astream(resume=True) needs thread_id")
            coro = self._resume(thread_id, answer, recursion_limit, tags, on_commit)
        else:
            coro = self._start(input, thread_id, recursion_limit, tags, on_commit)
        runner = asyncio.ensure_future(coro)
        runner.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (item := await queue.get()) is not None:
                head, results = item
                if mode == "updates":
                    update: dict[str, Any] = {}
                    for r in results:
                        if r.task.node == START:
                            continue
                        update.setdefault(r.task.node, []).append(r.update)
                    if update:
                        yield {k: v[0] if len(v) == 1 else v for k, v in update.items()}
                elif mode == "values":
                    yield self.codec.state.make(head.values)
                else:
                    yield self._snapshot(head, head.cp.status, None)
            await runner
        finally:
            if not runner.done():
                runner.cancel()  # a stream abandoned midway stops its run, and has stopped it when this returns
                await asyncio.wait([runner])

    # -- reading ---------------------------------------------------------------------------------------------------

    async def aget_state(
        self, thread_id: str, checkpoint_id: str | None = None, *, step: int | None = None
    ) -> Snapshot:
        """The head of ``thread_id`` (with its current status, open interrupts and errors), or any checkpoint of
        its lineage by id or by step (read-only time travel): one indexed read for the checkpoint."""
        if checkpoint_id is None and step is None:
            record = await self._thread(thread_id)
            head, recorded = await self._load_head(thread_id, record)
            return self._snapshot(head, record.status, recorded)
        cp, found = await self._find(thread_id, checkpoint_id, step)
        if found is not None and cp.checkpoint_id == found.head_checkpoint_id:
            head, recorded = await self._load_head(thread_id, found)
            return self._snapshot(head, found.status, recorded)
        body = self.codec.decode_body(cp)
        return self._snapshot(Head(cp, body, await self.codec.load_values(self.saver, cp, body)), cp.status, None)

    async def ahistory(
        self,
        thread_id: str,
        *,
        limit: int | None = None,
        before: str | None = None,
        filter: Mapping[str, Any] | None = None,
    ) -> list[Snapshot]:
        """Checkpoints of the thread's lineage, newest first, walking into the ancestors of a fork. ``before``: only
        checkpoints older than that one; ``filter``: metadata keys that must be equal; ``limit``: at most that many."""
        record = await self._thread(thread_id)
        head_cp = await self._checkpoint(thread_id, record.head_checkpoint_id)
        lineage = self.codec.decode_body(head_cp).lineage
        upper = record.head_step + 1
        if before is not None:
            upper = (await self._find(thread_id, before))[0].step
        found: list[StoredCheckpoint] = []
        for tid, first in lineage:
            if upper > first:
                remaining = None if limit is None else limit - len(found)
                if remaining is not None and remaining <= 0:
                    break
                rows = await self.saver.list_checkpoints(tid, limit=remaining, before_step=upper, filter=filter)
                found += [cp for cp in rows if cp.step >= first]
            upper = min(upper, first)
        if not found:
            return []
        old, new = self.codec.decode_body(found[-1]), self.codec.decode_body(found[0])
        ranges = self.codec.history_ranges(found[-1], old, found[0], new)
        fold = LazyFold(self.codec, found, await self.saver.get_blobs(ranges) if ranges else [])
        return [
            make_snapshot(
                cp,
                record.status if cp.checkpoint_id == record.head_checkpoint_id else cp.status,
                functools.partial(fold.frontier, i),
                functools.partial(fold.values, i),
            )
            for i, cp in enumerate(found)
        ]

    async def athreads(self, status: Status | None = None) -> list[ThreadInfo]:
        """Every thread, most recently updated first; only those with ``status`` when given."""
        return [thread_info(r) for r in await self.saver.list_threads(status=status)]

    async def adiff(self, a: CheckpointSpec, b: CheckpointSpec) -> Diff:
        """What differs between two checkpoints' values. Each side is a :class:`Snapshot` or
        ``(thread_id, checkpoint_id)`` (``None`` for the head)."""
        sa, sb = await self._resolve(a), await self._resolve(b)
        return diff_values(sa.ref, as_dict(sa.values), sb.ref, as_dict(sb.values))

    async def _resolve(self, spec: CheckpointSpec) -> Snapshot:
        if isinstance(spec, Snapshot):
            if isinstance(spec._values_loader, _ThroughPortal):  # a sync fork's: its first read is a sync call,
                await asyncio.to_thread(getattr, spec, "values")  # which must not block the loop it waits for
            return spec
        thread_id, checkpoint_id = spec
        return await self.aget_state(thread_id, checkpoint_id)

    # -- forking ---------------------------------------------------------------------------------------------------

    async def afork(
        self,
        thread_id: str,
        checkpoint_id: str | None = None,
        *,
        step: int | None = None,
        update: Mapping[str, Any] | None = None,
        new_thread_id: str | None = None,
        goto: str | Send | list[str | Send] | None = None,
        tags: Mapping[str, Any] | None = None,
    ) -> Snapshot:
        """Branch: a new thread whose first checkpoint has ``checkpoint_id`` (of ``thread_id``'s lineage, or the
        one at ``step``) as parent.

        ``update`` is applied through the reducers; the frontier is the one of that checkpoint unless ``goto``
        re-routes it. The source thread is never changed; ``resume(new_thread_id)`` runs the branch.

        The fork stores O(1) bytes. When ``update`` touches only plain fields (no reducer) and the source was written
        by this schema version, the new checkpoint is built without the source's values. The returned snapshot's
        ``values`` still need them, and a property cannot await on the caller's loop, so their blobs are fetched here,
        concurrently with the commit (a saver with several connections, like PostgreSQL's, runs both at once; SQLite
        runs them one after the other), and decoded on first access. If that fetch fails after the commit
        succeeded, the branch exists and reading ``values`` raises the error. The sync :meth:`fork` fetches nothing
        at fork time: it loads the values on first access."""
        return await self._fork(thread_id, checkpoint_id, step, update, new_thread_id, goto, tags, lazy=False)

    async def _fork(
        self,
        thread_id: str,
        checkpoint_id: str | None,
        step: int | None,
        update: Mapping[str, Any] | None,
        new_thread_id: str | None,
        goto: str | Send | list[str | Send] | None,
        tags: Mapping[str, Any] | None,
        *,
        lazy: bool,
    ) -> Snapshot:
        """:meth:`afork`; with ``lazy`` (the sync facade) the source's values, when the new checkpoint does not need
        them, are fetched on the portal loop on the snapshot's first access instead of now."""
        src_cp, _ = await self._find(thread_id, checkpoint_id, step)
        new_thread_id = new_thread_id or ids.new_id()
        validated = self.codec.state.validate_update(update, node="fork")
        src_body = self.codec.decode_body(src_cp)
        ranges = self.codec.ranges(src_cp.step, src_body)
        state = self.codec.state
        fetch_ranges: list[BlobRange] = []  # fetched beside the commit
        through_portal = False  # the values are loaded on first access by a sync call (lazy)
        load_source: Callable[[], list[dict[str, Any]]]
        if src_body.schema_version != self.graph.version or any(state.channels[k].reducer for k in validated):
            # the source's values are needed now: to fold the update, or to store them again in this version
            src_blobs = await self.saver.get_blobs(ranges) if ranges else []
            values, writes = state.apply(
                self.codec.fold_many([(src_cp, src_body)], src_blobs)[0], [validated], sources=["fork"]
            )
            fork_values: Callable[[], dict[str, Any]] = lambda: values  # noqa: E731
        else:  # plain fields only: the branch's values are the source's with the update on top, folded on demand
            values, writes = dict(validated), {k: [v] for k, v in validated.items()}
            if not ranges:  # every field rides in the body: nothing to fetch
                load_source = functools.partial(self.codec.fold_many, [(src_cp, src_body)], [])
            elif lazy:
                load_source = self._source_loader(src_cp, src_body, ranges, new_thread_id)
                through_portal = True
            else:
                fetch_ranges = ranges
            fork_values = functools.cache(lambda: {**load_source()[0], **validated})
        channels, inline, full = self.codec.carry_over(src_body, values)
        cid, step = ids.new_id(), src_cp.step + 1
        if goto is None:
            tasks = [Task(f"{cid}.{i}", t.node, t.payload, t.has_payload) for i, t in enumerate(src_body.tasks)]
        else:
            targets = goto if isinstance(goto, list) else [goto]
            try:
                tasks, _ = route(
                    self.graph, {}, [TaskResult(Task("fork", "__fork__"), {}, list(targets))], {}, cid, self.codec
                )
            except RouteError as exc:
                raise InvalidUpdateError(f"fork of thread {thread_id!r}: goto {goto!r}: {exc.cause}") from None
        status, interrupts = frontier_status(tasks, [], self.interrupt_before, frozenset())
        blobs = self.codec.channel_blobs(new_thread_id, step, values, writes, channels, inline, full=full)
        body = Body(tasks, channels, [(new_thread_id, step), *src_body.lineage], interrupts, src_body.barriers,
                    self.graph.version, inline)  # fmt: skip
        metadata = step_metadata("fork", step, [], dict(tags) if tags else None)
        metadata["writes"] = {"fork": list(validated)}
        metadata["forked_from"] = {"thread_id": src_cp.thread_id, "checkpoint_id": src_cp.checkpoint_id}
        cp = StoredCheckpoint(
            new_thread_id, cid, src_cp.thread_id, src_cp.checkpoint_id, step, ids.now(), status, metadata,
            self.codec.encode_body(body, cid), blobs,
        )  # fmt: skip
        fetch = asyncio.ensure_future(self.saver.get_blobs(fetch_ranges)) if fetch_ranges else None
        if fetch is not None:
            fetch.add_done_callback(_retrieved)  # its error is raised by reading the values, or not at all
        try:
            await self.saver.commit(cp, expected_head=None, run_id=ids.new_id())
        except BaseException as exc:
            if fetch is not None:
                fetch.cancel()
            if isinstance(exc, ThreadConflictError):
                raise ThreadConflictError(f"cannot fork into {new_thread_id!r}: that thread already exists") from None
            raise
        if fetch is not None:
            try:
                await asyncio.wait([fetch])
            except BaseException:
                fetch.cancel()
                raise
            load_source = functools.partial(_fold_fetched, self.codec, src_cp, src_body, fetch)
        make = state.make
        values_of: Callable[[], Any] = lambda: make(fork_values())  # noqa: E731
        if through_portal:
            values_of = _ThroughPortal(values_of)
        return make_snapshot(cp, status, lambda: (body.tasks, interrupts, body.schema_version), values_of)

    def _source_loader(
        self, src_cp: StoredCheckpoint, src_body: Body, ranges: list[BlobRange], new_thread_id: str
    ) -> Callable[[], list[dict[str, Any]]]:
        """For the sync :meth:`fork`: fetch and fold the source's values when first needed, through the portal (the
        caller is not on that loop). Raises :class:`SyncCallError` if the app was closed since, instead of reopening
        its saver on a new loop that nobody would close."""
        closes = self._closes

        def load() -> list[dict[str, Any]]:
            if self._closes != closes:
                raise SyncCallError(
                    f"the values of fork {new_thread_id!r} are loaded on first access and the app was closed since; "
                    f"read them before closing it, or later with get_state({new_thread_id!r})"
                )
            return self.codec.fold_many([(src_cp, src_body)], self._sync(self.saver.get_blobs(ranges)))

        return load

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete a thread. Checkpoints its forks still need are kept (see the saver spec)."""
        await self.saver.delete_thread(thread_id)

    # -- loading helpers -------------------------------------------------------------------------------------------

    async def _thread(self, thread_id: str) -> ThreadRecord:
        record = await self.saver.get_thread(thread_id)
        if record is None:
            raise ThreadNotFoundError(f"no thread {thread_id!r}")
        return record

    async def _checkpoint(self, thread_id: str, checkpoint_id: str) -> StoredCheckpoint:
        cp = await self.saver.get_checkpoint(thread_id, checkpoint_id)
        if cp is None:
            raise CheckpointNotFoundError(f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}")
        return cp

    async def _load_head(self, thread_id: str, record: ThreadRecord) -> tuple[Head, Recorded]:
        cp = await self._checkpoint(thread_id, record.head_checkpoint_id)
        body = self.codec.decode_body(cp)
        loose: Loose = {}
        values = await self.codec.load_values(self.saver, cp, body, loose=loose)
        writes = await self.saver.get_writes(thread_id, cp.checkpoint_id)
        return Head(cp, body, values, loose), decode_recorded(self.codec, cp, writes, body.tasks)

    async def _find(
        self, thread_id: str, checkpoint_id: str | None, step: int | None = None
    ) -> tuple[StoredCheckpoint, ThreadRecord | None]:
        """A checkpoint of ``thread_id``'s lineage, by id or step: its own, or an ancestor's up to the fork point.
        Also returns the thread's row when it was read on the way."""
        if checkpoint_id is None and step is None:
            raise ValueError("give a checkpoint_id or a step")
        record, cp = await self.saver.get_thread_and_checkpoint(thread_id, checkpoint_id, step=step)
        if record is None:  # (a deleted thread may keep rows that a fork needs: they are read through the fork)
            raise ThreadNotFoundError(f"no thread {thread_id!r}")
        if cp is not None:
            return cp, record
        lineage = self.codec.decode_body(await self._checkpoint(thread_id, record.head_checkpoint_id)).lineage
        for (_, upper_first), (tid, _first) in itertools.pairwise(lineage):
            if step is not None and step >= upper_first:
                break
            cp = await self.saver.get_checkpoint(tid, checkpoint_id, step=step)
            if cp is not None and cp.step < upper_first:
                return cp, record
        what = f"checkpoint {checkpoint_id!r}" if checkpoint_id is not None else f"checkpoint at step {step}"
        raise CheckpointNotFoundError(f"thread {thread_id!r} has no {what} in its lineage")

    def _snapshot(self, head: Head, status: Status, recorded: Recorded | None) -> Snapshot:
        cp, body = head.cp, head.body
        interrupts = list(body.interrupts) if status == "interrupted" or recorded is None else []
        errors: tuple[Any, ...] = ()
        if recorded is not None:
            asked = recorded.open_interrupts(body.tasks)
            interrupts += [Interrupt(t.node, "inside", payload=p, task_id=t.id) for t, _i, p in asked]
            errors = tuple(recorded.errors.values()) if status == "failed" else ()
        make = self.codec.state.make
        return make_snapshot(
            cp, status, lambda: (body.tasks, interrupts, body.schema_version), lambda: make(head.values), errors=errors
        )

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the saver."""
        self._closes += 1
        await self.saver.aclose()

    async def __aenter__(self) -> App:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def to_mermaid(self) -> str:
        """The graph as mermaid text."""
        return self.graph.to_mermaid()

    # -- the sync facade ---------------------------------------------------------------------------------------------

    def invoke(self, input: Any, *, thread_id: str | None = None, recursion_limit: int | None = None,
               tags: Mapping[str, Any] | None = None) -> Snapshot:  # fmt: skip
        """Sync :meth:`ainvoke`."""
        return self._sync(self.ainvoke(input, thread_id=thread_id, recursion_limit=recursion_limit, tags=tags))

    def resume(self, thread_id: str, answer: Any = _NO_ANSWER, *, recursion_limit: int | None = None,
               tags: Mapping[str, Any] | None = None) -> Snapshot:  # fmt: skip
        """Sync :meth:`aresume`."""
        return self._sync(self.aresume(thread_id, answer, recursion_limit=recursion_limit, tags=tags))

    def stream(self, input: Any, *, thread_id: str | None = None, mode: StreamMode = "updates",
               recursion_limit: int | None = None, tags: Mapping[str, Any] | None = None,
               resume: bool = False, answer: Any = _NO_ANSWER) -> Iterator[Any]:  # fmt: skip
        """Sync :meth:`astream`."""
        return self._sync_iter(
            self.astream(
                input,
                thread_id=thread_id,
                mode=mode,
                recursion_limit=recursion_limit,
                tags=tags,
                resume=resume,
                answer=answer,
            )
        )

    def get_state(self, thread_id: str, checkpoint_id: str | None = None, *, step: int | None = None) -> Snapshot:
        """Sync :meth:`aget_state`."""
        return self._sync(self.aget_state(thread_id, checkpoint_id, step=step))

    def history(self, thread_id: str, *, limit: int | None = None, before: str | None = None,
                filter: Mapping[str, Any] | None = None) -> list[Snapshot]:  # fmt: skip
        """Sync :meth:`ahistory`."""
        return self._sync(self.ahistory(thread_id, limit=limit, before=before, filter=filter))

    def fork(self, thread_id: str, checkpoint_id: str | None = None, *, step: int | None = None,
             update: Mapping[str, Any] | None = None, new_thread_id: str | None = None,
             goto: str | Send | list[str | Send] | None = None,
             tags: Mapping[str, Any] | None = None) -> Snapshot:  # fmt: skip
        """Sync :meth:`afork`, with one difference: when the new checkpoint does not need the source's values (see
        :meth:`afork`), they are not fetched now but on the first access to the returned snapshot's ``values``
        (through the app's background loop), so a fork costs the same however long the source's history is. Read them
        before closing the app (afterwards that raises :class:`SyncCallError`), or use ``get_state`` later."""
        return self._sync(self._fork(thread_id, checkpoint_id, step, update, new_thread_id, goto, tags, lazy=True))

    def diff(self, a: CheckpointSpec, b: CheckpointSpec) -> Diff:
        """Sync :meth:`adiff`."""
        return self._sync(self.adiff(a, b))

    def threads(self, status: Status | None = None) -> list[ThreadInfo]:
        """Sync :meth:`athreads`."""
        return self._sync(self.athreads(status))

    def delete_thread(self, thread_id: str) -> None:
        """Sync :meth:`adelete_thread`."""
        self._sync(self.adelete_thread(thread_id))

    def _sync(self, coro: Coroutine[Any, Any, T]) -> T:
        note_sync_call(self._node_ms)
        with self._sync_lock:
            self._sync_calls += 1
        try:
            return self._portal.call(_as_sync_facade(coro, self._only_sync_call))
        except SyncCallError:
            coro.close()  # refused on the portal's own thread: never started (a no-op if it ran and raised this)
            raise
        finally:
            with self._sync_lock:
                self._sync_calls -= 1

    def _sync_iter(self, agen: AsyncIterator[T]) -> Iterator[T]:
        note_sync_call(self._node_ms)
        with self._sync_lock:
            self._sync_calls += 1  # a stream in flight: other sync calls must not block the loop meanwhile
        try:
            yield from self._portal.iterate(agen)
        finally:
            with self._sync_lock:
                self._sync_calls -= 1

    def _only_sync_call(self) -> bool:
        return self._sync_calls == 1

    def close(self) -> None:
        """Close the saver and stop the background loop. Sync calls other threads still have running end with
        :class:`SyncCallError` (their runs stop as after a crash: every committed checkpoint stays). (After async use
        only, prefer ``await app.aclose()``.)"""
        if self._portal._loop is not None:
            self._portal.shutdown(self.aclose())
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(self.aclose())
            return
        raise RuntimeError("App.close() blocks; on a running event loop use `await app.aclose()`")


_NO_CP = StoredCheckpoint("", "", None, None, -1, 0.0, "running", {}, b"")


async def _as_sync_facade(coro: Coroutine[Any, Any, T], only_caller: Callable[[], bool]) -> T:
    SYNC_FACADE.set(only_caller)  # this coroutine runs in its own task: the setting stays in its context
    return await coro


class _ThroughPortal(Generic[T]):
    """A loader that makes a sync call (the sync fork's values): it cannot run on the portal loop's own thread."""

    __slots__ = ("load",)

    def __init__(self, load: Callable[[], T]) -> None:
        self.load = load

    def __call__(self) -> T:
        return self.load()


def _fold_fetched(
    codec: Codec, cp: StoredCheckpoint, body: Body, fetch: asyncio.Future[list[Blob]]
) -> list[dict[str, Any]]:
    return codec.fold_many([(cp, body)], fetch.result())


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Mark a background read's error as seen: it is raised where the result is read, if anywhere (e.g. a fork's
    values), instead of being logged as never retrieved."""
    if not future.cancelled():
        future.exception()


def _input_annotations(graph: StateGraph) -> list[Any]:
    """The annotation of each node's first parameter: the types a ``Send`` payload to it may carry are registered
    with the serializer like the state's own (a model named nowhere cannot be stored)."""
    found: list[Any] = []
    for spec in graph.nodes.values():
        try:
            params = list(inspect.signature(spec.fn).parameters.values())
            hints = typing.get_type_hints(spec.fn)
        except Exception:
            continue  # builtins, partials of C functions, unresolvable forward references: nothing to register
        if params and params[0].name in hints:
            found.append(hints[params[0].name])
    return found


def _check_limit(recursion_limit: int | None) -> None:
    if recursion_limit is not None and (type(recursion_limit) is not int or recursion_limit < 1):
        raise ValueError(f"recursion_limit must be a positive number of super-steps, not {recursion_limit!r}")
