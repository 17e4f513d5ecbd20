"""Read threads and checkpoints from a saver without the graph code: :class:`RawReader`.

The engine decodes stored values through the state schema (registered pydantic models and enums, reducers,
defaults, migrations). Tools that only *look* at a database (the CLI's ``threads``, ``history``, ``show`` and
``diff``; a future server) often do not have that code at hand. ``RawReader`` reads the same records with the schema
left out:

- values are plain data: a stored pydantic model is its dict of fields and an enum is its value (the type is never
  looked up or imported: loading stays as safe as the engine's);
- a reducer channel stored as deltas is folded as ``append`` when the writes are lists and as ``merge`` when they are
  dicts; any other writes (a custom reducer) come back as :class:`Unreduced` (the base value and the writes);
- no migrations run, no fields are dropped and no defaults are filled: a field appears once it was written.

Everything else is the engine's own logic (lineage walking across forks, interrupts, errors), so a ``RawReader``
reports the same checkpoints, frontiers and metadata as an ``App`` over the same saver. It never writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import pydantic

from graphckpt.app import App
from graphckpt.checkpoint import Snapshot, ThreadInfo
from graphckpt.codec import Body, Codec
from graphckpt.diff import Diff
from graphckpt.errors import ThreadNotFoundError
from graphckpt.graph import StateGraph
from graphckpt.portal import Portal
from graphckpt.savers.base import Saver, Status, StoredCheckpoint
from graphckpt.serde import _ENUM, _MODEL, Serializer
from graphckpt.state import Channel

_ANY_ADAPTER: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(Any)

__all__ = ["RawReader", "Unreduced", "raw_codec"]

CheckpointSpec = Snapshot | tuple[str, str | None]


@dataclass(frozen=True, slots=True)
class Unreduced:
    """A reducer channel whose deltas could not be folded without its reducer: the last full value and the writes
    that follow it, in order."""

    base: Any
    writes: list[Any]


class RawReader:
    """Read-only access to every thread of ``saver``, with values decoded as plain data (see the module docstring).

    Same reading methods as :class:`~graphckpt.app.App` (``get_state``, ``history``, ``threads``, ``diff``, with
    async twins) plus :meth:`tag`. Close it (or use it as a context manager) to release the saver.
    """

    def __init__(self, saver: Saver) -> None:
        self.saver = saver
        self._app = _RawApp(saver)
        self._portal: Portal = self._app._portal

    # -- async -------------------------------------------------------------------------------------------------------

    async def aget_state(self, thread_id: str, checkpoint_id: str | None = None) -> Snapshot:
        """The head of ``thread_id``, or any checkpoint of its lineage by id. See :meth:`App.aget_state`."""
        return await self._app.aget_state(thread_id, checkpoint_id)

    async def ahistory(self, thread_id: str, *, limit: int | None = None, before: str | None = None) -> list[Snapshot]:
        """Checkpoints of the thread's lineage, newest first. See :meth:`App.ahistory`."""
        return await self._app.ahistory(thread_id, limit=limit, before=before)

    async def athreads(self, status: Status | None = None) -> list[ThreadInfo]:
        """Every thread, most recently updated first. See :meth:`App.athreads`."""
        return await self._app.athreads(status)

    async def adiff(self, a: CheckpointSpec, b: CheckpointSpec) -> Diff:
        """What differs between two checkpoints' (raw) values. See :meth:`App.adiff`."""
        return await self._app.adiff(a, b)

    async def atag(self, thread_id: str, key: str) -> Any:
        """The user tag ``key`` (``tags={key: ...}`` given to ``invoke``/``resume``/``fork``) of the newest checkpoint
        of the thread's lineage that has it, or ``None``. Reads metadata only; values are not decoded.

        Raises :class:`ThreadNotFoundError` if the thread does not exist."""
        record = await self.saver.get_thread(thread_id)
        if record is None:
            raise ThreadNotFoundError(f"no thread {thread_id!r}")
        found = _tag(record.metadata, key)
        if found is not None:
            return found
        thread, below, seen = thread_id, None, set()  # a parent's checkpoints count only up to the fork point
        while thread not in seen:
            seen.add(thread)
            rows = await self.saver.list_checkpoints(thread, before_step=below)  # newest first
            for cp in rows:
                found = _tag(cp.metadata, key)
                if found is not None:
                    return found
            first = rows[-1] if rows else None
            if first is None or first.parent_checkpoint_id is None or first.parent_thread_id in (None, thread):
                return None
            parent = await self.saver.get_checkpoint(first.parent_thread_id, first.parent_checkpoint_id)
            if parent is None:
                return None
            thread, below = parent.thread_id, parent.step + 1
        return None

    async def aclose(self) -> None:
        """Close the saver."""
        await self.saver.aclose()

    # -- sync facade -------------------------------------------------------------------------------------------------

    def get_state(self, thread_id: str, checkpoint_id: str | None = None) -> Snapshot:
        """Sync :meth:`aget_state`."""
        return self._portal.call(self.aget_state(thread_id, checkpoint_id))

    def history(self, thread_id: str, *, limit: int | None = None, before: str | None = None) -> list[Snapshot]:
        """Sync :meth:`ahistory`."""
        return self._portal.call(self.ahistory(thread_id, limit=limit, before=before))

    def threads(self, status: Status | None = None) -> list[ThreadInfo]:
        """Sync :meth:`athreads`."""
        return self._portal.call(self.athreads(status))

    def diff(self, a: CheckpointSpec, b: CheckpointSpec) -> Diff:
        """Sync :meth:`adiff`."""
        return self._portal.call(self.adiff(a, b))

    def tag(self, thread_id: str, key: str) -> Any:
        """Sync :meth:`atag`."""
        return self._portal.call(self.atag(thread_id, key))

    def close(self) -> None:
        """Close the saver and stop the background loop."""
        self._app.close()

    def __enter__(self) -> RawReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> RawReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _tag(metadata: Mapping[str, Any], key: str) -> Any:
    tags = metadata.get("tags")
    return tags.get(key) if isinstance(tags, Mapping) else None


# -- the schema-free codec ---------------------------------------------------------------------------------------------


class _NoFields(TypedDict):
    """The (empty) schema the raw reader's graph is built over; its codec accepts any stored channel instead."""


class _RawSerializer(Serializer):
    """Decodes registered models as their dict of fields and enums as their value, without knowing the types."""

    def _ext(self, code: int, payload: bytes, depth: int) -> Any:
        if code in (_ENUM, _MODEL):
            _name, inner = self._seq(payload, depth)
            return inner
        return super()._ext(code, payload, depth)


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


class _RawCodec(Codec):
    def upgrade(
        self, cp: StoredCheckpoint, body: Body, stored: dict[str, Any], unfoldable: Sequence[str] = ()
    ) -> dict[str, Any]:
        """As stored: no migrations, nothing dropped, no defaults (every channel is known: nothing is unfoldable)."""
        return stored


class _RawApp(App):
    """An ``App`` over an empty schema whose codec reads any channel; only its reading methods are used."""

    def __init__(self, saver: Saver) -> None:
        graph = StateGraph(_NoFields)
        super().__init__(
            graph, saver, interrupt_before=frozenset(), interrupt_after=frozenset(), recursion_limit=1, snapshot_every=1
        )
        self.codec = raw_codec(graph)


def raw_codec(graph: StateGraph | None = None) -> Codec:
    """The schema-free codec (any channel, values as plain data, no migrations) over ``graph`` (its channels are
    replaced) or a new empty graph. It decodes stored bytes without importing or calling anything they name."""
    graph = graph if graph is not None else StateGraph(_NoFields)
    graph.state.channels = _AnyChannels()
    return _RawCodec(graph.state, _RawSerializer(), version=1 << 30, snapshot_every=1)
