"""Reading threads: :class:`Reader`, the read methods :class:`~graphckpt.app.App` and
:class:`~graphckpt.reader.RawReader` share (state, history, threads, one thread, audit, spend, diff, with their sync
twins), written once over a thread store.

An app's reads decode a subgraph's child thread with that subgraph's codec (it hands its compiled graph); a raw
reader's one schema-free store reads every thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from graphckpt.audit import Prices, thread_audit, thread_spend
from graphckpt.checkpoint import CheckpointRef, Snapshot, ThreadInfo
from graphckpt.diff import Diff, diff_values
from graphckpt.listing import iter_threads
from graphckpt.savers.waits import wake_times
from graphckpt.subgraph import SEPARATOR, SubgraphNode, link_of, store_for, subgraph_heads, with_subgraphs
from graphckpt.sync import SyncFacade, sync_twin
from graphckpt.views import as_dict, thread_info

if TYPE_CHECKING:
    from graphckpt.compiled import CompiledGraph
    from graphckpt.savers.base import Status, ThreadRecord
    from graphckpt.store import ThreadStore

__all__ = ["CheckpointSpec", "Reader"]

T = TypeVar("T")

CheckpointSpec = Snapshot | CheckpointRef | tuple[str, str | None]
"""One side of a diff: a snapshot, or ``(thread_id, checkpoint_id)`` (``None`` for the head)."""


class Reader(SyncFacade):
    """The reads of the threads in ``store``'s saver. ``graph``: the compiled graph that runs them, whose subgraphs'
    child threads are decoded with their own codecs (``None``: ``store`` decodes every thread). ``env_prices``: an
    audit or spend without ``prices`` uses the price table of ``GRAPHCKPT_PRICES``."""

    def __init__(self, store: ThreadStore, graph: CompiledGraph | None = None, *, env_prices: bool = False) -> None:
        super().__init__()
        self.store, self.saver, self.env_prices = store, store.saver, env_prices
        self._graph = graph
        self._nested = graph is not None and any(isinstance(n.fn, SubgraphNode) for n in graph.nodes.values())

    async def store_of(self, thread_id: str) -> ThreadStore:
        """The store that reads ``thread_id``: the graph's, or a subgraph's for a child thread."""
        if self._graph is None or not self._nested or SEPARATOR not in thread_id:
            return self.store
        record = await self.saver.get_thread(thread_id)
        link = link_of(record.metadata) if record is not None else None
        store = store_for(self.store, self._graph, link.get("ns", ())) if link is not None else None
        return store if store is not None else self.store

    async def aget_state(
        self, thread_id: str, checkpoint_id: str | None = None, *, step: int | None = None, subgraphs: bool = False
    ) -> Snapshot:
        """The head of ``thread_id`` (with its current status, open interrupts and errors), or any checkpoint of
        its lineage by id or by step (read-only time travel): one indexed read for the checkpoint. A subgraph's
        child thread (``Snapshot.namespace`` names it) is read with that subgraph's schema. ``subgraphs=True``
        fills :attr:`Snapshot.subgraphs` (at any depth) with the heads of the child threads its frontier's subgraph
        tasks have started."""
        snap = await (await self.store_of(thread_id)).state(thread_id, checkpoint_id, step)
        if subgraphs and self._graph is not None:
            snap.subgraphs = await subgraph_heads(self.saver, self._graph, snap, self.aget_state)
        return snap

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
        store = await self.store_of(thread_id)
        snaps = await store.history(thread_id, limit=limit, before=before, filter=filter)
        if not subgraphs:
            return snaps

        async def child_history(record: ThreadRecord) -> list[Snapshot]:
            return await self.ahistory(record.thread_id, subgraphs=True)

        return await with_subgraphs(self.saver, snaps, child_history)

    async def athreads(
        self, status: Status | Literal["waiting"] | None = None, *, limit: int | None = None, after: str | None = None
    ) -> list[ThreadInfo]:
        """Every thread, most recently updated first; only those with ``status`` when given. The child threads of
        subgraphs are not listed (``history(..., subgraphs=True)`` shows them with their parent). A thread a durable
        wait holds has :attr:`ThreadInfo.wake_at`; ``status="waiting"`` lists only those (``interrupted`` ones
        with a wake-up time; soonest first without ``limit``/``after``).

        With ``limit`` or ``after``: one page, read by index at any size, in a stable order (newest created first,
        see :meth:`~graphckpt.savers.base.Saver.page_threads`): at most ``limit`` threads after the one whose
        :attr:`ThreadInfo.cursor` is ``after``; fewer than ``limit`` only on the last page."""
        waiting = status == "waiting"
        wanted: Status | None = "interrupted" if waiting else cast("Status | None", status)
        if limit is None and after is None:
            records = [r for r in await self.saver.list_threads(status=wanted) if link_of(r.metadata) is None]
            wakes = await wake_times(self.saver, records)
            if waiting:
                records = sorted((r for r in records if r.thread_id in wakes), key=lambda r: wakes[r.thread_id])
            return [thread_info(r, wakes.get(r.thread_id)) for r in records]
        out: list[ThreadInfo] = []
        pages = iter_threads(self.saver, status=wanted, after=after, limit=None if waiting else limit)
        async for r in pages:
            wake = (await wake_times(self.saver, [r])).get(r.thread_id)
            if wake is not None or not waiting:
                out.append(thread_info(r, wake))
            if limit is not None and len(out) >= limit:
                break
        return out

    async def athread(self, thread_id: str) -> ThreadInfo:
        """One thread's record (with :attr:`ThreadInfo.wake_at` when a durable wait holds it);
        :class:`ThreadNotFoundError` if there is none."""
        record = await self.store.thread(thread_id)
        return thread_info(record, (await wake_times(self.saver, [record])).get(thread_id))

    async def aaudit(self, thread_id: str, *, prices: Prices | None = None) -> dict[str, Any]:
        """The thread's audit record (see :mod:`graphckpt.audit`): every external call (started, finished,
        failed, lost, with its idempotency key), every failed attempt (with its traceback), every interrupt answer
        (who, when, what, refused ones too), and the spend: tokens used and calls lost, ``own`` vs ``inherited``
        for a fork, with cost when ``prices`` (or ``GRAPHCKPT_PRICES``) gives a price table."""
        return await thread_audit(self.store, thread_id, self._prices(prices))

    async def aspend(self, thread_id: str, *, prices: Prices | None = None) -> dict[str, Any]:
        """The thread's spend alone (``own``, ``inherited``, ``total``), from metadata only: cheap for listings."""
        return await thread_spend(self.store, await self.store.thread(thread_id), self._prices(prices))

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

    def _prices(self, prices: Prices | None) -> Prices | None:
        return prices if prices is not None or not self.env_prices else Prices.from_env()

    get_state, history, threads = sync_twin(aget_state), sync_twin(ahistory), sync_twin(athreads)
    thread, audit, spend, diff = sync_twin(athread), sync_twin(aaudit), sync_twin(aspend), sync_twin(adiff)

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the saver."""
        self.closes += 1
        await self.saver.aclose()

    async def __aenter__(self: T) -> T:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
