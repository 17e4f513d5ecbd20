"""Read threads and checkpoints from a saver without the graph code: :class:`RawReader`.

The engine decodes stored values through the state schema (registered pydantic models and enums, reducers,
defaults, migrations). Tools that only *look* at a database (the CLI's ``threads``, ``history``, ``show`` and
``diff``; the server) often do not have that code at hand, and must never import code named by stored data.
``RawReader`` reads the same records through the same :class:`~graphckpt.store.ThreadStore` with an explicit raw
schema (:class:`RawSchema`):

- values are plain data: a stored pydantic model is its dict of fields and an enum is its value (the type is never
  looked up or imported: loading stays as safe as the engine's);
- a reducer channel stored as deltas is folded as ``append`` when the writes are lists and as ``merge`` when they are
  dicts; any other writes (a custom reducer) come back as :class:`Unreduced` (the base value and the writes);
- no migrations run, no fields are dropped and no defaults are filled: a field appears once it was written.

Everything else is the store's own logic (lineage walking across forks, interrupts, errors), so a ``RawReader``
reports the same checkpoints, frontiers and metadata as an ``App`` over the same saver. It never writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import pydantic

from graphckpt.audit import Prices, thread_audit, thread_spend
from graphckpt.checkpoint import Snapshot, ThreadInfo
from graphckpt.codec import Body, Codec
from graphckpt.diff import Diff, diff_values
from graphckpt.savers.base import Saver, Status, StoredCheckpoint, ThreadRecord
from graphckpt.serde import Serializer
from graphckpt.state import Channel, StateSchema
from graphckpt.store import ThreadStore
from graphckpt.subgraph import link_of, with_subgraphs
from graphckpt.sync import Portal
from graphckpt.views import as_dict, thread_info

_ANY_ADAPTER: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(Any)

__all__ = ["RawCodec", "RawReader", "RawSchema", "Unreduced"]

CheckpointSpec = Snapshot | tuple[str, str | None]


@dataclass(frozen=True, slots=True)
class Unreduced:
    """A reducer channel whose deltas could not be folded without its reducer: the last full value and the writes
    that follow it, in order."""

    base: Any
    writes: list[Any]


class RawReader:
    """Read-only access to every thread of ``saver``, with values decoded as plain data (see the module docstring).

    Same reading methods as :class:`~graphckpt.app.App` (``get_state``, ``history``, ``threads``, ``thread``,
    ``diff``, with async twins) plus :meth:`tag`. Close it (or use it as a context manager) to release the saver.
    """

    def __init__(self, saver: Saver) -> None:
        self.saver = saver
        self.codec = RawCodec()
        self.store = ThreadStore(saver, self.codec)
        self._portal = Portal()

    # -- async -------------------------------------------------------------------------------------------------------

    async def aget_state(self, thread_id: str, checkpoint_id: str | None = None) -> Snapshot:
        """The head of ``thread_id``, or any checkpoint of its lineage by id. See :meth:`App.aget_state`."""
        return await self.store.state(thread_id, checkpoint_id)

    async def ahistory(
        self, thread_id: str, *, limit: int | None = None, before: str | None = None, subgraphs: bool = False
    ) -> list[Snapshot]:
        """Checkpoints of the thread's lineage, newest first; with ``subgraphs``, those of the subgraphs its tasks
        ran too. See :meth:`App.ahistory`."""
        snaps = await self.store.history(thread_id, limit=limit, before=before)
        if not subgraphs:
            return snaps

        async def child_history(record: ThreadRecord) -> list[Snapshot]:
            return await self.ahistory(record.thread_id, subgraphs=True)

        return await with_subgraphs(self.saver, snaps, child_history)

    async def athreads(self, status: Status | None = None) -> list[ThreadInfo]:
        """Every thread, most recently updated first, but the child threads of subgraphs. See :meth:`App.athreads`."""
        return [thread_info(r) for r in await self.saver.list_threads(status=status) if link_of(r.metadata) is None]

    async def athread(self, thread_id: str) -> ThreadInfo:
        """One thread's record. See :meth:`App.athread`."""
        return thread_info(await self.store.thread(thread_id))

    async def aaudit(self, thread_id: str, *, prices: Prices | None = None) -> dict[str, Any]:
        """The thread's audit record. See :meth:`App.aaudit`."""
        return await thread_audit(self.store, thread_id, prices)

    async def aspend(self, thread_id: str, *, prices: Prices | None = None) -> dict[str, Any]:
        """The thread's spend (own, inherited, total). See :meth:`App.aspend`."""
        return await thread_spend(self.store, await self.store.thread(thread_id), prices)

    async def adiff(self, a: CheckpointSpec, b: CheckpointSpec) -> Diff:
        """What differs between two checkpoints' (raw) values. See :meth:`App.adiff`."""
        sa = a if isinstance(a, Snapshot) else await self.aget_state(*a)
        sb = b if isinstance(b, Snapshot) else await self.aget_state(*b)
        return diff_values(sa.ref, as_dict(sa.values), sb.ref, as_dict(sb.values))

    async def atag(self, thread_id: str, key: str) -> Any:
        """The user tag ``key`` (``tags={key: ...}`` given to ``invoke``/``resume``/``fork``) of the newest checkpoint
        of the thread's lineage that has it, or ``None``. Reads metadata only; values are not decoded.

        Raises :class:`ThreadNotFoundError` if the thread does not exist."""
        record = await self.store.thread(thread_id)
        found = _tag(record.metadata, key)
        if found is not None:
            return found
        for cp in await self.store.lineage_checkpoints(record):
            found = _tag(cp.metadata, key)
            if found is not None:
                return found
        return None

    async def aclose(self) -> None:
        """Close the saver."""
        await self.saver.aclose()

    # -- sync facade -------------------------------------------------------------------------------------------------

    def get_state(self, thread_id: str, checkpoint_id: str | None = None) -> Snapshot:
        """Sync :meth:`aget_state`."""
        return self._portal.call(self.aget_state(thread_id, checkpoint_id))

    def history(
        self, thread_id: str, *, limit: int | None = None, before: str | None = None, subgraphs: bool = False
    ) -> list[Snapshot]:
        """Sync :meth:`ahistory`."""
        return self._portal.call(self.ahistory(thread_id, limit=limit, before=before, subgraphs=subgraphs))

    def threads(self, status: Status | None = None) -> list[ThreadInfo]:
        """Sync :meth:`athreads`."""
        return self._portal.call(self.athreads(status))

    def thread(self, thread_id: str) -> ThreadInfo:
        """Sync :meth:`athread`."""
        return self._portal.call(self.athread(thread_id))

    def diff(self, a: CheckpointSpec, b: CheckpointSpec) -> Diff:
        """Sync :meth:`adiff`."""
        return self._portal.call(self.adiff(a, b))

    def tag(self, thread_id: str, key: str) -> Any:
        """Sync :meth:`atag`."""
        return self._portal.call(self.atag(thread_id, key))

    def close(self) -> None:
        """Close the saver and stop the background loop."""
        self._portal.shutdown(self.aclose())

    def __enter__(self) -> RawReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> RawReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _tag(metadata: Mapping[str, Any], key: str) -> Any:
    tags = metadata.get("tags") if isinstance(metadata, Mapping) else None
    return tags.get(key) if isinstance(tags, Mapping) else None


# -- the schema-free codec ---------------------------------------------------------------------------------------------


class _NoFields(TypedDict):
    """The (empty) schema a raw schema starts from; every stored channel is then accepted."""


class _GuessingChannel(Channel):
    """A stored channel of unknown type: deltas fold as ``append`` (lists) or ``merge`` (dicts), else unreduced."""

    def fold(self, value: Any, writes: Sequence[Any]) -> Any:
        for w in writes:
            if isinstance(value, Unreduced):
                value = Unreduced(value.base, [*value.writes, w])
            elif isinstance(w, list) and isinstance(value, list | None):
                value = [*(value or []), *w]
            elif isinstance(w, dict) and isinstance(value, dict | None):
                value = {**(value or {}), **w}
            else:
                value = Unreduced(value, [w])
        return value


class _AnyChannels(dict[str, Channel]):
    """Every channel name is known: a guessing channel is made for it on first use."""

    def __missing__(self, name: str) -> Channel:
        channel = _GuessingChannel(name, Any, _ANY_ADAPTER, None, None)
        self[name] = channel
        return channel

    def get(self, name: str, default: Any = None) -> Channel:
        return self[name]

    def __contains__(self, name: object) -> bool:
        return True


class RawSchema(StateSchema):
    """A state schema that knows every channel a store holds, of any type, with no defaults; values are dicts."""

    def __init__(self) -> None:
        super().__init__(_NoFields)
        self.channels = _AnyChannels()


class RawCodec(Codec):
    """The codec over :class:`RawSchema`: models read as dicts, no migrations, nothing dropped, no defaults."""

    def __init__(self) -> None:
        super().__init__(RawSchema(), Serializer(raw=True), version=1 << 30, snapshot_every=1)

    def upgrade(
        self, cp: StoredCheckpoint, body: Body, stored: dict[str, Any], unfoldable: Sequence[str] = ()
    ) -> dict[str, Any]:
        """As stored: no migrations, nothing dropped, no defaults (every channel is known: nothing is unfoldable)."""
        return stored
