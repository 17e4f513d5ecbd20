"""``App``: a compiled graph bound to a saver. Run, resume, stream, inspect, fork and diff threads.

Every operation is async (``ainvoke``, ``aresume``, ...); each sync twin (``invoke``, ``resume``, ...) is made from
it by :func:`~graphckpt.sync.sync_twin`, which runs the same coroutine on one background loop. ``App`` is a facade:
each method parses its arguments and hands over. Runs begin in :mod:`graphckpt.begin` and are driven by
:class:`~graphckpt.engine.Run`; reads are :class:`~graphckpt.reads.Reader` (shared with the raw reader); forks are
made by :mod:`graphckpt.fork`; the run queue is :mod:`graphckpt.runs`; recovery is :mod:`graphckpt.recovery`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from graphckpt import begin, recovery
from graphckpt.checkpoint import Snapshot
from graphckpt.compiled import CompiledGraph
from graphckpt.control import Command
from graphckpt.fork import fork, update_state
from graphckpt.lifecycle import DataLifecycle
from graphckpt.prune import with_ttl
from graphckpt.queueing import RunQueueing
from graphckpt.reads import Reader
from graphckpt.records import NO_ANSWER, CrashedThread, Goto, RecoveryResult
from graphckpt.savers.base import Saver
from graphckpt.savers.memory import MemorySaver
from graphckpt.store import ThreadStore
from graphckpt.streams import StreamMode, check_modes, stream
from graphckpt.subgraph import codec_for
from graphckpt.sync import sync_iter_twin, sync_twin

__all__ = ["App", "StreamMode"]


class App(Reader, DataLifecycle, RunQueueing):
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
        self.codec = codec_for(graph, snapshot_every)
        super().__init__(ThreadStore(self.saver, self.codec, lease_seconds=lease_seconds), graph, env_prices=True)
        self.run_options = begin.RunOptions(graph, self.store, recursion_limit)
        """What every run of this app shares: graph, store, step limit (what a worker begins queued runs with)."""
        self.graph_ref: str | None = None
        """``module:attr`` of this graph, what workers load to run the runs it submits (set by the CLI)."""

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
        every, lease = self.codec.snapshot_every, self.store.lease_seconds
        return App(self.graph, saver, recursion_limit=self.recursion_limit, snapshot_every=every, lease_seconds=lease)

    # -- running ----------------------------------------------------------------------------------------------------

    async def ainvoke(
        self,
        input: Mapping[str, Any] | Any,
        *,
        thread_id: str | None = None,
        recursion_limit: int | None = None,
        tags: Mapping[str, Any] | None = None,
        ttl: Any = None,
    ) -> Snapshot:
        """Start a run on ``thread_id`` (a new thread, or one that is ``done``: multi-turn) with ``input`` applied
        through the reducers, and run it until it is done, interrupted or failed. Returns the head snapshot.
        Raises :class:`NodeError` when a node fails (the thread is ``failed``; call :meth:`aresume`).

        ``input`` may be ``Command(resume=answer)`` (LangGraph's spelling): then it is :meth:`aresume` with that
        answer, not a new input. ``ttl`` (seconds, a ``timedelta``, ``"30d"`` or LangGraph's ``{"strategy":
        "delete", "ttl": minutes}``) sets the thread's time-to-live from its last activity (:mod:`graphckpt.prune`)."""
        if isinstance(input, Command):
            thread_id = begin.resumed_thread(input, thread_id)
            return await self.aresume(thread_id, input, recursion_limit=recursion_limit, tags=tags, ttl=ttl)
        tags = await with_ttl(tags, ttl, self.saver, thread_id)
        run = await begin.start(self.run_options, input, thread_id, recursion_limit, tags, self.runner)
        await run.drain()
        return self.store.snapshot(run.head, run.status, run.recorded)

    async def aresume(
        self,
        thread_id: str,
        answer: Any = NO_ANSWER,
        *,
        recursion_limit: int | None = None,
        tags: Mapping[str, Any] | None = None,
        take_over: bool = False,
        ttl: Any = None,
    ) -> Snapshot:
        """Continue a thread from its head: after a crash (``running``), a failure (``failed``: only the tasks
        without recorded results run again) or an interrupt (``answer`` is what ``ctx.interrupt`` returns).
        A ``done`` thread's head is returned as is. ``take_over``: take a live owner's thread (its next write fails).
        ``ttl``: as in :meth:`ainvoke`."""
        options, runner, tags = self.run_options, self.runner, await with_ttl(tags, ttl, self.saver, thread_id)
        run = await begin.resume(options, thread_id, answer, recursion_limit, tags, runner, take_over=take_over)
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
        take_over: bool = False,
        ttl: Any = None,
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
        it committed stays). ``take_over`` with ``resume``: as in :meth:`aresume`; ``ttl``: as in :meth:`ainvoke`."""
        check_modes(mode)  # before the run begins
        tags = await with_ttl(tags, ttl, self.saver, thread_id)
        args = (self.run_options, input, thread_id, recursion_limit, tags, self.runner)
        run = await begin.streamed(*args, resuming=resume, answer=answer, take_over=take_over)
        chunks = stream(run, mode, subgraphs=subgraphs, graph=self.graph, store=self.store)
        async with contextlib.aclosing(chunks) as items:  # closed with this stream: a stream left midway stops its run
            async for item in items:
                yield item

    invoke = sync_twin(ainvoke)
    resume = sync_twin(aresume)
    stream = sync_iter_twin(astream)

    # -- recovery (see graphckpt.recovery; the run queue is graphckpt.queueing's) ------------------------------------

    async def acrashed(self) -> list[CrashedThread]:
        """The crashed threads (``running``, lease expired: their process died), each with what a person needs to
        decide whether to continue it (confirm-first recovery; see :mod:`graphckpt.recovery`)."""
        return await recovery.crashed(self.store)

    async def arecover(self, thread_ids: Sequence[str]) -> list[RecoveryResult]:
        """Continue the chosen crashed threads from their last checkpoint, one after the other; a thread another
        process took first is skipped with its reason (see :func:`graphckpt.recovery.recover`)."""
        return await recovery.recover(self.aresume, thread_ids)

    crashed, recover = sync_twin(acrashed), sync_twin(arecover)

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
        return await fork(
            self.graph, self.store, thread_id, checkpoint_id, step, update, new_thread_id, goto, tags, as_node=as_node
        )

    def fork(
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
        """Sync :meth:`afork`, with one difference: when the new checkpoint does not need the source's values (see
        :meth:`afork`), they are not fetched now but on the first access to the returned snapshot's ``values``
        (through the app's background loop), so a fork costs the same however long the source's history is. Read them
        before closing the app (afterwards that raises :class:`SyncCallError`), or use ``get_state`` later."""
        later = self.load_later(self.codec, self.saver)
        where = (self.graph, self.store, thread_id, checkpoint_id, step, update, new_thread_id, goto, tags)
        return self.sync_call(fork(*where, as_node=as_node, load_later=later))

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

    update_state = sync_twin(aupdate_state)

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    def to_mermaid(self) -> str:
        """The graph as mermaid text."""
        return self.graph.to_mermaid()
