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

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import pydantic

from graphckpt.codec import Body, Codec, Loose
from graphckpt.compat._lgread import CompatBody, compat_body, compat_history_ranges, compat_ranges, fold_compat
from graphckpt.errors import CorruptCheckpointError
from graphckpt.reads import Reader
from graphckpt.savers.base import Blob, BlobRange, Saver, StoredCheckpoint
from graphckpt.serde import Serializer
from graphckpt.state import Channel, StateSchema
from graphckpt.store import ThreadStore
from graphckpt.sync import sync_twin

_ANY_ADAPTER: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(Any)

__all__ = ["RawCodec", "RawReader", "RawSchema", "Unreduced"]


@dataclass(frozen=True, slots=True)
class Unreduced:
    """A reducer channel whose deltas could not be folded without its reducer: the last full value and the writes
    that follow it, in order."""

    base: Any
    writes: list[Any]


class RawReader(Reader):
    """Read-only access to every thread of ``saver``, with values decoded as plain data (see the module docstring).

    The reading methods of :class:`~graphckpt.app.App` (:class:`~graphckpt.reads.Reader`: ``get_state``,
    ``history``, ``threads``, ``thread``, ``diff``, ``audit``, ``spend``, with async twins) plus :meth:`tag`. Close
    it (or use it as a context manager) to release the saver.
    """

    def __init__(self, saver: Saver) -> None:
        self.codec = RawCodec()
        super().__init__(ThreadStore(saver, self.codec))

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

    tag = sync_twin(atag)

    def close(self) -> None:
        """Close the saver and stop the background loop."""
        self.portal.shutdown(self.aclose())


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
    """The codec over :class:`RawSchema`: models read as dicts, no migrations, nothing dropped, no defaults.

    It also reads checkpoints a LangGraph graph stored through :class:`graphckpt.compat.langgraph.GraphckptSaver`
    (their own body format, dispatched to :mod:`graphckpt.compat._lgread`), so every tool reads those threads too."""

    def __init__(self) -> None:
        super().__init__(RawSchema(), Serializer(raw=True), version=1 << 30, snapshot_every=1)
        self._plain = Serializer(raw=True)

    def decode_body(self, cp: StoredCheckpoint) -> Body:
        try:
            found = compat_body(self._plain, cp)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise self._corrupt(cp, f"checkpoint body has the wrong shape ({exc})") from None
        return found if found is not None else super().decode_body(cp)

    def ranges(self, step: int, body: Body) -> list[BlobRange]:
        return compat_ranges(step, body) if isinstance(body, CompatBody) else super().ranges(step, body)

    def history_ranges(
        self, oldest: StoredCheckpoint, old: Body, newest: StoredCheckpoint, new: Body
    ) -> list[BlobRange]:
        if isinstance(old, CompatBody) and isinstance(new, CompatBody):
            return compat_history_ranges(newest, old, new)
        return super().history_ranges(oldest, old, newest, new)

    async def load_values(
        self, saver: Saver, cp: StoredCheckpoint, body: Body, *, loose: Loose | None = None
    ) -> dict[str, Any]:
        if not isinstance(body, CompatBody):
            return await super().load_values(saver, cp, body, loose=loose)
        ranges = self.ranges(cp.step, body)
        return self.fold_many([(cp, body)], await saver.get_blobs(ranges) if ranges else [])[0]

    def fold_many(self, items: Sequence[tuple[StoredCheckpoint, Body]], blobs: Sequence[Blob]) -> list[dict[str, Any]]:
        engine = [k for k, (_, body) in enumerate(items) if not isinstance(body, CompatBody)]
        folded = iter(super().fold_many([items[k] for k in engine], blobs) if engine else [])
        out = []
        for cp, body in items:
            if isinstance(body, CompatBody):
                try:
                    out.append(fold_compat(functools.partial(self._loads, cp), cp, body, blobs))
                except CorruptCheckpointError as exc:
                    raise self._corrupt(cp, str(exc)) from None
            else:
                out.append(next(folded))
        return out

    def upgrade(
        self, cp: StoredCheckpoint, body: Body, stored: dict[str, Any], unfoldable: Sequence[str] = ()
    ) -> dict[str, Any]:
        """As stored: no migrations, nothing dropped, no defaults (every channel is known: nothing is unfoldable)."""
        return stored
