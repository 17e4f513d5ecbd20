"""``App``: a compiled graph bound to a saver. Run, resume, stream, inspect, fork and diff threads.

Every operation is async (``ainvoke``, ``aresume``, ...); the sync twins come from
:class:`~graphckpt.sync.SyncFacade`, which runs the same coroutines on one background loop. Each method parses its
arguments and hands over: runs begin in :mod:`graphckpt.begin` and are driven by :class:`~graphckpt.engine.Run`;
checkpoints are read and written by the :class:`~graphckpt.store.ThreadStore`; forks are made by
:mod:`graphckpt.fork`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import typing
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from graphckpt import begin, recovery, runs
from graphckpt.audit import Prices, thread_audit, thread_spend
from graphckpt.checkpoint import CheckpointRef, Snapshot, ThreadInfo
from graphckpt.codec import Codec
from graphckpt.compiled import CompiledGraph
from graphckpt.control import Command
from graphckpt.diff import Diff, diff_values
from graphckpt.engine import Run
from graphckpt.fork import Goto, LoadLater, fork, update_state
from graphckpt.records import NO_ANSWER
from graphckpt.recovery import CrashedThread, RecoveryResult
from graphckpt.savers.base import Saver, Status
from graphckpt.savers.memory import MemorySaver
from graphckpt.savers.queue import RunRecord, RunStatus
from graphckpt.serde import Serializer, types_in
from graphckpt.store import ThreadStore
from graphckpt.streams import EPHEMERAL, STREAM_MODES, StreamMode, ahead_by_one, chunks
from graphckpt.subgraph import (
    SEPARATOR,
    SubgraphNode,
    delete_with_subgraphs,
    link_of,
    store_for,
    subgraph_heads,
    with_subgraphs,
)
from graphckpt.sync import InlineRunner, SyncFacade
from graphckpt.views import as_dict, thread_info

__all__ = ["App", "StreamMode"]

CheckpointSpec = Snapshot | CheckpointRef | tuple[str, str | None]


class App(SyncFacade):
    """A compiled graph bound to a saver. Create it with :meth:`StateGraph.compile`."""

    def __init__(
        self,
        graph: CompiledGraph,
        saver: Saver | None,
        *,
        recursion_limit: int,
        snapshot_every: int,
        lease_seconds: float | None = None,
    ) -> None:
        self.graph = graph
        self.saver: Saver = saver if saver is not None else MemorySaver()
        self.recursion_limit = recursion_limit
        serde = Serializer()
        annotations = [c.annotation for c in graph.state.channels.values()] + _input_annotations(graph)
        for spec in graph.nodes.values():  # a subgraph's values become this graph's updates and journal entries
            if isinstance(spec.fn, SubgraphNode):
                annotations += [c.annotation for c in spec.fn.app.graph.state.channels.values()]
        for annotation in annotations:
            for tp in types_in(annotation):
                serde.register(tp)
        self.codec = Codec(
            graph.state, serde, version=graph.version, snapshot_every=snapshot_every, migrations=graph.migrations
        )
        self.store = ThreadStore(self.saver, self.codec, lease_seconds=lease_seconds)
        self._options = begin.RunOptions(graph, self.store, recursion_limit)
        self.graph_ref: str | None = None
        """``module:attr`` of this graph, what workers load to run the runs it submits (set by the CLI)."""
        self._init_sync()
        self._runner = InlineRunner(self._node_ms)

    @property
    def lease_seconds(self) -> float:
        """How long this app's runs hold a thread without a heartbeat (see ``compile(lease_seconds=)``)."""
        return self.store.lease_seconds

    @property
    def interrupt_before(self) -> frozenset[str]:
        return self.graph.interrupt_before

    @property
    def interrupt_after(self) -> frozenset[str]:
        return self.graph.interrupt_after

    def with_saver(self, saver: Saver) -> App:
        """The same compiled graph and options, bound to another saver."""
        return App(
            self.graph, saver, recursion_limit=self.recursion_limit, snapshot_every=self.codec.snapshot_every,
            lease_seconds=self.store.lease_seconds,
        )  # fmt: skip

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
        Raises :class:`NodeError` when a node fails (the thread is ``failed``; call :meth:`aresume`).

        ``input`` may be ``Command(resume=answer)`` (LangGraph's spelling): then it is :meth:`aresume` with that
        answer, not a new input."""
        if isinstance(input, Command):
            return await self.aresume(_resumed_thread(input, thread_id), input, recursion_limit=recursion_limit,
                                      tags=tags)  # fmt: skip
        run = await begin.start(self._options, input, thread_id, recursion_limit, tags, self._runner)
        await run.drain()
        return self.store.snapshot(run.head, run.status, run.recorded)

    async def aresume(
        self,
        thread_id: str,
        answer: Any = NO_ANSWER,
        *,
        recursion_limit: int | None = None,
        tags: Mapping[str, Any] | None = None,
    ) -> Snapshot:
        """Continue a thread from its head: after a crash (``running``), a failure (``failed``: only the tasks
        without recorded results run again) or an interrupt (``answer`` is what ``ctx.interrupt`` returns).
        Resuming a ``done`` thread returns its head unchanged."""
        run = await begin.resume(self._options, thread_id, answer, recursion_limit, tags, self._runner)
        await run.drain()
        return self.store.snapshot(run.head, run.status, run.recorded)

    async def astream(
        self,
        input: Any,
        *,
        thread_id: str | None = None,
        mode: StreamMode | Sequence[StreamMode] = "updates",
        recursion_limit: int | None = None,
        tags: Mapping[str, Any] | None = None,
        resume: bool = False,
        answer: Any = NO_ANSWER,
        subgraphs: bool = False,
    ) -> AsyncIterator[Any]:
        """Run like :meth:`ainvoke` (or like :meth:`aresume` with ``resume=True``: then ``input`` is ignored and
        ``answer``, when given, answers the open interrupt) and yield as the run goes:

        - ``updates``: ``{node: update}`` for each task of each committed step (``None`` for an empty update);
        - ``values``: the state after the input and after each step that changed it (only the ``output_schema``'s
          fields when the graph has one);
        - ``checkpoints``: the :class:`Snapshot` of each committed checkpoint (the whole state);
        - ``custom``: what nodes write with ``ctx.write(...)`` / ``get_stream_writer()``, as they write it;
        - ``tasks``: ``{"id", "name", "input", "attempt"}`` when a task starts, ``{"id", "name", "result"}`` when
          its step is committed;
        - ``messages``: ``(message_chunk, metadata)`` for each piece of a model's answer as it arrives (from
          ``nodes.llm.chat_node``, or a node's own ``ctx.stream_message``): the chunk is
          ``{"role": "assistant", "content": piece, "id": completion_id}``, the metadata names the node
          (``langgraph_node``), step (``langgraph_step``), thread and namespace; the journal still records whole
          completions;
        - ``debug``: LangGraph-shaped ``{"type", "step", "timestamp", "payload"}`` events: ``task`` when a task
          starts, ``task_result`` and ``checkpoint`` when its step is committed.

        ``custom``, ``messages``, task starts and debug ``task`` events are ephemeral (not stored); the rest comes
        from committed checkpoints. A list of modes yields ``(mode, chunk)`` pairs. ``subgraphs=True`` also yields
        what subgraphs run, and every chunk becomes ``(namespace, chunk)`` (or ``(namespace, mode, chunk)``): ``()``
        for this graph, ``("node:task_id", ...)`` for a subgraph, as in LangGraph. The run advances as the stream is
        read: it is never more than one step ahead of its reader, and a stream abandoned midway stops its run (what
        it committed stays)."""
        modes = [mode] if isinstance(mode, str) else list(mode)
        unknown = [m for m in modes if m not in STREAM_MODES]
        if unknown or not modes:
            raise ValueError(f"stream mode must be one of {', '.join(STREAM_MODES)} (or a list of them), not {mode!r}")
        if isinstance(input, Command):  # LangGraph's stream(Command(resume=answer), config)
            resume, answer, thread_id = True, input, _resumed_thread(input, thread_id)
        if resume:
            if thread_id is None:
                raise ValueError("astream(resume=True) needs thread_id")
            run = await begin.resume(
                self._options, thread_id, answer, recursion_limit, tags, self._runner, streamed=True
            )
        else:
            run = await begin.start(self._options, input, thread_id, recursion_limit, tags, self._runner, streamed=True)
        wanted: set[str] = set(modes)
        ephemeral = (wanted & EPHEMERAL) | ({"subgraph"} if subgraphs else set())
        # closed with this stream (not when collected): a stream left midway stops its run and releases its lease
        async with contextlib.aclosing(ahead_by_one(run, ephemeral=ephemeral)) as items:
            async for item in items:
                for namespace, chunk_mode, chunk in chunks(item, wanted, self.graph, self.store):
                    if isinstance(mode, str):
                        yield (namespace, chunk) if subgraphs else chunk
                    else:
                        yield (namespace, chunk_mode, chunk) if subgraphs else (chunk_mode, chunk)

    # -- reading ---------------------------------------------------------------------------------------------------

    async def aget_state(
        self, thread_id: str, checkpoint_id: str | None = None, *, step: int | None = None, subgraphs: bool = False
    ) -> Snapshot:
        """The head of ``thread_id`` (with its current status, open interrupts and errors), or any checkpoint of
        its lineage by id or by step (read-only time travel): one indexed read for the checkpoint. A subgraph's
        child thread (``Snapshot.namespace`` names it) is read with that subgraph's schema. ``subgraphs=True``
        fills :attr:`Snapshot.subgraphs` (at any depth) with the heads of the child threads its frontier's subgraph
        tasks have started."""
        snap = await (await self._store_of(thread_id)).state(thread_id, checkpoint_id, step)
        if subgraphs:
            snap.subgraphs = await subgraph_heads(self, snap, self.aget_state)
        return snap

    async def _store_of(self, thread_id: str) -> ThreadStore:
        """The store that reads ``thread_id``: this graph's, or a subgraph's for a child thread."""
        has_subgraphs = any(isinstance(n.fn, SubgraphNode) for n in self.graph.nodes.values())
        if SEPARATOR not in thread_id or not has_subgraphs:
            return self.store
        record = await self.saver.get_thread(thread_id)
        link = link_of(record.metadata) if record is not None else None
        store = store_for(self, link.get("ns", ())) if link is not None else None
        return store if store is not None else self.store

    async def ahistory(
        self,
        thread_id: str,
        *,
        limit: int | None = None,
        before: str | None = None,
        filter: Mapping[str, Any] | None = None,
        subgraphs: bool = False,
    ) -> list[Snapshot]:
        """Checkpoints of the thread's lineage, newest first, walking into the ancestors of a fork. ``before``: only
        checkpoints older than that one; ``filter``: metadata keys that must be equal; ``limit``: at most that many.
        ``subgraphs=True`` adds the checkpoints of the subgraphs its tasks ran (at any depth), each in its place in
        time, with :attr:`Snapshot.namespace` naming the subgraph (``limit`` counts this thread's own)."""
        store = await self._store_of(thread_id)
        snaps = await store.history(thread_id, limit=limit, before=before, filter=filter)
        if not subgraphs:
            return snaps

        async def child_history(record: Any) -> list[Snapshot]:
            return await self.ahistory(record.thread_id, subgraphs=True)

        return await with_subgraphs(self.saver, snaps, child_history)

    async def athreads(self, status: Status | None = None) -> list[ThreadInfo]:
        """Every thread, most recently updated first; only those with ``status`` when given. The child threads of
        subgraphs are not listed (``history(..., subgraphs=True)`` shows them with their parent)."""
        return [thread_info(r) for r in await self.saver.list_threads(status=status) if link_of(r.metadata) is None]

    async def aaudit(self, thread_id: str, *, prices: Prices | None = None) -> dict[str, Any]:
        """The thread's audit record (see :mod:`graphckpt.audit`): every external call (started, finished,
        failed, lost, with its idempotency key), every failed attempt (with its traceback), every interrupt answer
        (who, when, what, refused ones too), and the spend: tokens used and calls lost, ``own`` vs ``inherited``
        for a fork, with cost when ``prices`` (or ``GRAPHCKPT_PRICES``) gives a price table."""
        return await thread_audit(self.store, thread_id, prices if prices is not None else Prices.from_env())

    async def aspend(self, thread_id: str, *, prices: Prices | None = None) -> dict[str, Any]:
        """The thread's spend alone (``own``, ``inherited``, ``total``), from metadata only: cheap for listings."""
        record = await self.store.thread(thread_id)
        return await thread_spend(self.store, record, prices if prices is not None else Prices.from_env())

    # -- the run queue (see graphckpt.runs and graphckpt.worker) -------------------------------------------------------

    async def asubmit(
        self,
        input: Any = None,
        *,
        thread_id: str | None = None,
        multitask: runs.Multitask = "reject",
        resume: bool = False,
        answer: Any = NO_ANSWER,
        graph: str | None = None,
        tags: Mapping[str, Any] | None = None,
        recursion_limit: int | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> RunRecord:
        """Queue a run for a worker (see :func:`graphckpt.runs.submit`): ``multitask="reject"`` raises
        :class:`ThreadBusyError` at once when the thread is busy, ``"enqueue"`` runs it after the current one;
        ``tags`` (not ``None``) are its checkpoints' tags instead of the thread's; ``recursion_limit`` caps the
        run's super-steps (its worker applies it); ``metadata`` is the run's own."""
        return await runs.submit(self, input, thread_id=thread_id, multitask=multitask, resume=resume, answer=answer,
                                 graph=graph, tags=tags, recursion_limit=recursion_limit,
                                 metadata=metadata)  # fmt: skip

    async def aruns(self, *, thread_id: str | None = None, status: RunStatus | None = None) -> list[RunRecord]:
        """Queued, running and ended runs, oldest first."""
        return await runs.list_runs(self, thread_id=thread_id, status=status)

    async def acancel_run(self, run_id: str) -> bool:
        """Cancel a queued run; ``False`` when it is not queued any more."""
        return await runs.cancel(self, run_id)

    async def _begin(self, run: RunRecord, fence: str, tags: Mapping[str, Any]) -> Run:
        """A queued run's engine run (for :class:`~graphckpt.worker.Worker`), claimed with ``fence``, with the
        recursion limit it was submitted with: its input starts the thread, unless an earlier attempt of this run
        already committed it (then it resumes)."""
        found = runs.submitted(self, run)
        payload, limit = found.value, found.recursion_limit
        if run.kind == "input" and run.attempt > 1:
            record = await self.saver.get_thread(run.thread_id)
            old = record.metadata.get("tags") if record is not None else None
            if isinstance(old, Mapping) and old.get("run") == run.run_id:  # its input step is committed
                return await begin.resume(self._options, run.thread_id, NO_ANSWER, limit, tags, self._runner,
                                          streamed=True, run_id=fence)  # fmt: skip
        if run.kind == "input":
            return await begin.start(self._options, payload, run.thread_id, limit, tags, self._runner, streamed=True,
                                     run_id=fence)  # fmt: skip
        return await begin.resume(self._options, run.thread_id, payload, limit, tags, self._runner, streamed=True,
                                  run_id=fence)  # fmt: skip

    async def acrashed(self) -> list[CrashedThread]:
        """The crashed threads (``running``, lease expired: their process died), each with what a person needs to
        decide whether to continue it (confirm-first recovery; see :mod:`graphckpt.recovery`)."""
        return await recovery.crashed(self)

    async def arecover(self, thread_ids: Sequence[str]) -> list[RecoveryResult]:
        """Continue the chosen crashed threads from their last checkpoint, one after the other; a thread another
        process took first is skipped with its reason (see :func:`graphckpt.recovery.recover`)."""
        return await recovery.recover(self, thread_ids)

    async def athread(self, thread_id: str) -> ThreadInfo:
        """One thread's record; :class:`ThreadNotFoundError` if there is none."""
        return thread_info(await self.store.thread(thread_id))

    async def adiff(self, a: CheckpointSpec, b: CheckpointSpec) -> Diff:
        """What differs between two checkpoints' values. Each side is a :class:`Snapshot` or
        ``(thread_id, checkpoint_id)`` (``None`` for the head)."""
        sa, sb = await self._resolve(a), await self._resolve(b)
        return diff_values(sa.ref, as_dict(sa.values), sb.ref, as_dict(sb.values))

    async def _resolve(self, spec: CheckpointSpec) -> Snapshot:
        if isinstance(spec, Snapshot):
            # loaded in a worker thread: a sync fork's values are loaded by a sync call, which must not block the
            # loop it waits for
            await asyncio.to_thread(getattr, spec, "values")
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
        goto: Goto | None = None,
        as_node: str | None = None,
        tags: Mapping[str, Any] | None = None,
    ) -> Snapshot:
        """Branch: a new thread whose first checkpoint has ``checkpoint_id`` (of ``thread_id``'s lineage, or the
        one at ``step``) as parent.

        ``update`` is applied through the reducers; the frontier is the one of that checkpoint unless ``goto``
        re-routes it, or ``as_node`` does: the update is applied as that node's writes and its edges and routers
        are evaluated again on the new state (LangGraph's ``update_state(..., as_node=)``; ``START`` routes from the
        entry). The source thread is never changed; ``resume(new_thread_id)`` runs the branch.

        The fork stores O(1) bytes. When ``update`` touches only plain fields (no reducer) and the source was written
        by this schema version, the new checkpoint is built without the source's values. The returned snapshot's
        ``values`` still need them, and a property cannot await on the caller's loop, so their blobs are fetched here,
        concurrently with the commit (a saver with several connections, like PostgreSQL's, runs both at once; SQLite
        runs them one after the other), and decoded on first access. If that fetch fails after the commit
        succeeded, the branch exists and reading ``values`` raises the error. The sync :meth:`fork` fetches nothing
        at fork time: it loads the values on first access."""
        return await self._fork(thread_id, checkpoint_id, step, update, new_thread_id, goto, tags, None, as_node)

    async def _fork(
        self,
        thread_id: str,
        checkpoint_id: str | None,
        step: int | None,
        update: Mapping[str, Any] | None,
        new_thread_id: str | None,
        goto: Goto | None,
        tags: Mapping[str, Any] | None,
        load_later: LoadLater | None,
        as_node: str | None = None,
    ) -> Snapshot:
        return await fork(self.graph, self.store, thread_id, checkpoint_id, step, update, new_thread_id, goto, tags,
                          as_node=as_node, load_later=load_later)  # fmt: skip

    async def aupdate_state(
        self,
        thread_id: str,
        update: Mapping[str, Any] | None,
        *,
        as_node: str | None = None,
        tags: Mapping[str, Any] | None = None,
    ) -> Snapshot:
        """Edit a thread's state at its head: a new checkpoint of the same thread (source ``update``; history is
        never rewritten) with ``update`` applied through the reducers. Its frontier is the head's, or, with
        ``as_node``, what that node's edges and routers pick on the new state. Results recorded against the old head
        (a failed step's finished siblings, an open ``ctx.interrupt``) are not carried over: those tasks run again.
        The thread is taken over for the edit, so a run still going on it fails its next write."""
        return await update_state(self.graph, self.store, thread_id, update, as_node, tags)

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete a thread and the child threads its subgraphs ran. Checkpoints its forks still need are kept (see
        the saver spec)."""
        await delete_with_subgraphs(self.saver, thread_id)

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the saver."""
        self._closes += 1
        await self.saver.aclose()

    async def __aenter__(self) -> App:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def to_mermaid(self) -> str:
        """The graph as mermaid text."""
        return self.graph.to_mermaid()


def _resumed_thread(command: Command, thread_id: str | None) -> str:
    """The thread a ``Command`` given as input resumes; only ``Command(resume=...)`` is an input."""
    if command.resume is None or command.update is not None or command.goto:
        raise ValueError(
            "as the input of invoke/stream, only Command(resume=answer) is accepted (it answers the thread's open "
            "interrupt); use update_state(...) or fork(..., goto=...) to change a thread's state or route"
        )
    if thread_id is None:
        raise ValueError("invoke(Command(resume=...)) needs the thread_id of the interrupted thread")
    return thread_id


def _input_annotations(graph: CompiledGraph) -> list[Any]:
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
