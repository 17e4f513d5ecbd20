"""graphckpt's storage under an unchanged LangGraph graph: ``graph.compile(checkpointer=GraphckptSaver(...))``.

:class:`GraphckptSaver` is a LangGraph ``BaseCheckpointSaver`` over any graphckpt saver (memory, SQLite,
PostgreSQL). It implements ``put``, ``put_writes``, ``get_tuple``, ``list`` (``filter``, ``before``, ``limit``),
``delete_thread``, ``copy_thread``, ``delete_for_runs`` and ``prune``, each sync and async. How LangGraph's threads,
namespaces and branches map to graphckpt threads is described in :mod:`graphckpt.compat._lgvalues`; values are
stored with :mod:`graphckpt.compat._lgtypes` (an allow-list: nothing is imported by a name read from storage).

All calls run on one private event loop thread, so one instance serves sync and async callers alike (LangGraph calls
the sync methods from worker threads and the async ones from its own loop).

Needs the ``langgraph`` extra (``pip install 'graphckpt[langgraph]'``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

from graphckpt.compat._lgstore import Loaded, Store
from graphckpt.compat._lgtypes import SafeSerde, langgraph_serializer, schema_types
from graphckpt.errors import GraphckptError
from graphckpt.savers.base import Saver

__all__ = ["GraphckptSaver"]

_T = TypeVar("_T")


class _LoopThread:
    """A daemon thread running one event loop; coroutines are handed to it from any thread or loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="graphckpt-langgraph", daemon=True)
        self._thread.start()

    def run(self, coro: Awaitable[_T]) -> _T:
        if threading.current_thread() is self._thread:
            raise GraphckptError("GraphckptSaver's sync methods cannot be called from its own loop")
        return asyncio.run_coroutine_threadsafe(_wrap(coro), self.loop).result()

    async def arun(self, coro: Awaitable[_T]) -> _T:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_wrap(coro), self.loop))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()


async def _wrap(coro: Awaitable[_T]) -> _T:
    return await coro


def _conf(config: RunnableConfig | None) -> dict[str, Any]:
    return dict((config or {}).get("configurable") or {})


class GraphckptSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer storing into a graphckpt saver.

    ``types``: the pydantic models, enums and dataclasses your state holds (besides LangChain messages and
    LangGraph's own types, always allowed); :meth:`register_graph` adds those a graph's schemas mention. A value
    of any other type is refused when written, naming the type.
    """

    def __init__(self, saver: Saver, *, types: Iterable[type] = ()) -> None:
        self.serializer = langgraph_serializer(schema_types(*types))
        super().__init__(serde=SafeSerde(self.serializer))
        self.saver = saver
        self._store = Store(saver, self.serializer)
        self._loop = _LoopThread()

    @classmethod
    def from_url(cls, url: str, *, types: Iterable[type] = ()) -> GraphckptSaver:
        """Over the saver of a database URL: a SQLite path (or ``sqlite:///path``), a ``postgresql://`` URL (with
        ``?schema=NAME`` if wanted), or ``memory://``."""
        if url == "memory://":
            from graphckpt.savers.memory import MemorySaver

            return cls(MemorySaver(), types=types)
        from graphckpt.targets import Database

        return cls(Database(url).saver(create=True), types=types)

    def register(self, *types: type) -> None:
        """Allow more pydantic models, enums or dataclasses to be stored (and those their fields name)."""
        for tp in schema_types(*types):
            self.serializer.register(tp)

    def register_graph(self, graph: Any) -> None:
        """Allow the models, enums and dataclasses a LangGraph ``StateGraph`` (or compiled graph) names in its state,
        input and output schemas and its nodes' input schemas."""
        builder = getattr(graph, "builder", graph)
        annotations: list[Any] = list(getattr(builder, "schemas", {}) or {})
        for node in (getattr(builder, "nodes", {}) or {}).values():
            annotations.append(getattr(node, "input_schema", None) or getattr(node, "input", None))
        self.register(*schema_types(*[a for a in annotations if a is not None]))

    def setup(self) -> None:
        """Create the graphckpt saver's tables if needed and open it (as LangGraph's own savers' ``setup``; without
        it the first call does it)."""
        self._loop.run(self.saver.setup())

    def close(self) -> None:
        """Close the graphckpt saver and stop the loop thread."""
        self._loop.run(self.saver.aclose())
        self._loop.stop()

    def __enter__(self) -> GraphckptSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- async -------------------------------------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        c = _conf(config)
        loaded = await self._loop.arun(
            self._store.get(c["thread_id"], c.get("checkpoint_ns", ""), c.get("checkpoint_id"))
        )
        return self._tuple(loaded) if loaded is not None else None

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for item in await self._loop.arun(self._list(config, filter, before, limit)):
            yield self._tuple(item)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        c = _conf(config)
        ns = c.get("checkpoint_ns", "")
        put = self._store.put(c["thread_id"], ns, c.get("checkpoint_id"), checkpoint, metadata, new_versions)
        await self._loop.arun(put)
        return {"configurable": {"thread_id": c["thread_id"], "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        c = _conf(config)
        put = self._store.put_writes(
            c["thread_id"], c.get("checkpoint_ns", ""), c["checkpoint_id"], writes, task_id, task_path
        )
        await self._loop.arun(put)

    async def adelete_thread(self, thread_id: str) -> None:
        await self._loop.arun(self._store.delete(thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._loop.arun(self._store.copy(source_thread_id, target_thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._loop.arun(self._delete_for_runs(run_ids))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._loop.arun(self._prune(thread_ids, strategy))

    # -- sync --------------------------------------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        c = _conf(config)
        loaded = self._loop.run(self._store.get(c["thread_id"], c.get("checkpoint_ns", ""), c.get("checkpoint_id")))
        return self._tuple(loaded) if loaded is not None else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        for item in self._loop.run(self._list(config, filter, before, limit)):
            yield self._tuple(item)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._loop.run(self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._loop.run(self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._loop.run(self._store.delete(thread_id))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._loop.run(self._store.copy(source_thread_id, target_thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._loop.run(self._delete_for_runs(run_ids))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._loop.run(self._prune(thread_ids, strategy))

    # -- shared ------------------------------------------------------------------------------------------------------

    async def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Sequence[Loaded]:
        c = _conf(config)
        before_id = _conf(before).get("checkpoint_id") if before is not None else None
        return await self._store.list(
            c.get("thread_id"),
            c.get("checkpoint_ns"),
            c.get("checkpoint_id"),
            filter=filter,
            before=before_id,
            limit=limit,
        )

    async def _delete_for_runs(self, run_ids: Sequence[str]) -> None:
        targets = set(run_ids)
        if not targets:
            return
        everything = await self._store.list(None, None, None, filter=None, before=None, limit=None)
        by_thread: dict[str, list[Loaded]] = {}
        for item in everything:
            by_thread.setdefault(item.thread_id, []).append(item)
        for thread_id, items in by_thread.items():
            if any(item.metadata.get("run_id") in targets for item in items):
                keep = [item for item in items if item.metadata.get("run_id") not in targets]
                await self._store.rebuild(thread_id, keep)

    async def _prune(self, thread_ids: Sequence[str], strategy: str) -> None:
        if strategy not in ("keep_latest", "delete"):
            raise GraphckptError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        for thread_id in thread_ids:
            if strategy == "delete":
                await self._store.delete(thread_id)
                continue
            items = await self._store.list(thread_id, None, None, filter=None, before=None, limit=None)
            newest: dict[str, Loaded] = {}
            for item in items:  # newest first
                newest.setdefault(item.ns, item)
            if len(newest) < len(items):
                await self._store.rebuild(thread_id, list(newest.values()))

    def _tuple(self, item: Loaded) -> CheckpointTuple:
        config: RunnableConfig = {
            "configurable": {
                "thread_id": item.thread_id,
                "checkpoint_ns": item.ns,
                "checkpoint_id": item.checkpoint["id"],
            }
        }
        parent: RunnableConfig | None = None
        if item.parent_id is not None:
            parent = {
                "configurable": {"thread_id": item.thread_id, "checkpoint_ns": item.ns, "checkpoint_id": item.parent_id}
            }
        return CheckpointTuple(
            config=config,
            checkpoint=item.checkpoint,  # type: ignore[arg-type]
            metadata=item.metadata,  # type: ignore[arg-type]
            parent_config=parent,
            pending_writes=item.writes,
        )
