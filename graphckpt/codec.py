"""Checkpoints to bytes and back: the engine's side of storage.

A checkpoint's ``body`` holds what the engine needs to continue: the frontier, the channel table (for each channel,
the step of its last snapshot and how many deltas follow it), the lineage (which thread stores which steps), the
interrupts and the join barriers. Channel values live in blobs keyed by ``(thread, channel, step)``; reading a
checkpoint's values costs one query for at most one snapshot plus ``snapshot_every`` deltas per channel.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from graphckpt.checkpoint import Interrupt, Task
from graphckpt.errors import (
    CorruptCheckpointError,
    GraphckptError,
    GraphSetupError,
    InvalidUpdateError,
    SerializationError,
)
from graphckpt.savers.base import Blob, BlobRange, Saver, StoredCheckpoint, brief
from graphckpt.serde import Serializer
from graphckpt.state import StateSchema

__all__ = ["CHUNK", "CHUNK_DELTA_MAX", "Body", "Codec", "Loose", "referable_update", "replace_lineage", "split_chunk"]

logger = logging.getLogger(__name__)

_FORMAT = 1
_LINEAGE = "lin"  # the body's key of its lineage (see :func:`replace_lineage`)

INLINE_MAX = 64
"""A plain channel encoded in at most this many bytes is carried in the checkpoint body (see ``channel_blobs``)."""
INLINE_TOTAL = 512
"""At most this many bytes of carried channels per checkpoint; the rest get blob rows."""
CHUNK = 32
"""A reducer channel's deltas are packed into one ``chunk`` row this many at a time (see ``channel_blobs``)."""
CHUNK_DELTA_MAX = 8192
"""A delta encoded in more bytes keeps its own row and is never packed: packing saves per-row costs, which large
deltas do not feel, and would write them twice. So a chunk holds at most ``CHUNK * CHUNK_DELTA_MAX`` bytes, and a
run keeps at most that much of a channel in memory to pack."""

Loose = dict[str, list[tuple[int, bytes]]]
"""Per channel, the deltas a thread stored as rows of their own since its last chunk or snapshot, at most the newest
``CHUNK - 1`` of them: (step, data)."""


@dataclass(slots=True)
class Body:
    """The decoded ``body`` of a checkpoint."""

    tasks: list[Task]
    channels: dict[str, tuple[int, int]]  # channel -> (step of its last snapshot, deltas since)
    lineage: list[tuple[str, int]]  # newest first: (thread_id, first step stored under it)
    interrupts: list[Interrupt] = field(default_factory=list)
    barriers: dict[str, list[str]] = field(default_factory=dict)
    schema_version: int = 1
    inline: dict[str, bytes] = field(default_factory=dict)  # small plain channels, carried in every body


class Codec:
    """Encodes and decodes checkpoints for one state schema."""

    def __init__(
        self,
        state: StateSchema,
        serde: Serializer,
        *,
        version: int,
        snapshot_every: int,
        migrations: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]] | None = None,
    ) -> None:
        self.state = state
        self.migrations = dict(migrations or {})
        self.serde = serde
        self.version = version
        self.snapshot_every = snapshot_every

    # -- writing -----------------------------------------------------------------------------------------------------

    def encode_body(self, body: Body, checkpoint_id: str) -> bytes:
        """Compact: a task's id is left out when it is the usual ``<checkpoint_id>.<index>``; empty parts are
        left out."""
        tasks = []
        for i, t in enumerate(body.tasks):
            entry: list[Any] = [t.node, t.payload] if t.has_payload else [t.node]
            if t.id != f"{checkpoint_id}.{i}":
                entry = [t.node, t.has_payload, t.payload, t.id]
            tasks.append(entry)
        raw: dict[str, Any] = {
            "f": _FORMAT,
            "sv": body.schema_version,
            "t": tasks,
            "ch": {k: list(v) for k, v in body.channels.items()},
            _LINEAGE: [list(seg) for seg in body.lineage],
        }
        if body.interrupts:
            raw["i"] = [[i.node, i.when, i.payload, i.task_id] for i in body.interrupts]
        if body.barriers:
            raw["b"] = body.barriers
        if body.inline:
            raw["v"] = body.inline
        return self.serde.dumps(raw)

    def carry_over(
        self, body: Body, values: Mapping[str, Any]
    ) -> tuple[dict[str, tuple[int, int]], dict[str, bytes], list[str]]:
        """What the next checkpoint after ``body`` starts from: copies of its channel table and carried fields, and
        the channels it must store in full. When ``body`` was written by an older schema version, ``values`` were
        migrated on load, so every channel is stored again in this version (and fields the schema dropped are left
        behind) instead of deltas on top of the old bytes."""
        channels, inline = dict(body.channels), dict(body.inline)
        if body.schema_version == self.version:
            return channels, inline, []
        known = self.state.channels
        return (
            {k: v for k, v in channels.items() if k in known},
            {k: v for k, v in inline.items() if k in known},
            [name for name in values if name in known],
        )

    def channel_blobs(
        self,
        thread_id: str,
        step: int,
        values: Mapping[str, Any],
        writes: Mapping[str, Sequence[Any]],
        channels: dict[str, tuple[int, int]],
        inline: dict[str, bytes],
        *,
        full: Iterable[str] = (),
        loose: Loose | None = None,
    ) -> list[Blob]:
        """Blobs for the channels that changed at ``step``; updates ``channels``, ``inline`` and ``loose`` in place.

        A plain channel whose encoded value is small (``INLINE_MAX`` bytes, ``INLINE_TOTAL`` for all of them) is
        carried in the body of every checkpoint instead of a blob row: a few bytes per step are cheaper than a row and
        its index entry, and reading it needs no query. A larger plain channel stores its new value. A reducer channel
        stores its writes as a delta, or its full value when it has none yet or ``snapshot_every`` deltas follow its
        last snapshot. Channels in ``full`` store their full value.

        With ``loose`` (the thread's delta rows not yet packed, see :data:`Loose`), every ``CHUNK``-th delta of a
        channel is stored as a ``chunk`` holding it and the loose ones before it, which the saver puts in place of
        their rows: a past state is then a few rows to read, and long values pack densely. Deltas larger than
        ``CHUNK_DELTA_MAX`` keep their own rows (see :func:`_pend`).
        """
        blobs: list[Blob] = []
        forced = set(full)
        for name in [*writes, *(c for c in forced if c not in writes and c in values)]:
            channel = self.state.channels[name]
            base = channels.get(name)
            try:
                if channel.reducer is None:
                    data, kind = self.serde.dumps(values[name]), "snapshot"
                    carried = sum(len(v) for k, v in inline.items() if k != name)
                    if len(data) <= INLINE_MAX and carried + len(data) <= INLINE_TOTAL:
                        inline[name] = data
                        channels.pop(name, None)
                        continue
                    inline.pop(name, None)
                    channels[name] = (step, 0)
                elif base is None or base[1] + 1 >= self.snapshot_every or name in forced:
                    data, kind = self.serde.dumps(values[name]), "snapshot"
                    channels[name] = (step, 0)
                else:
                    data, kind = self.serde.dumps(list(writes[name])), "delta"
                    channels[name] = (base[0], base[1] + 1)
            except SerializationError as exc:
                raise SerializationError(f"state field {name!r}: {exc}", field=name) from None
            at = step
            if loose is not None:
                if kind == "snapshot":
                    loose.pop(name, None)
                else:
                    pending = loose.setdefault(name, [])
                    if _pend(pending, step, data):
                        at, kind, data = pending[0][0], "chunk", _pack_chunk(pending)
                        del loose[name]
            blobs.append(Blob(thread_id, name, at, kind, data))  # type: ignore[arg-type]
        return blobs

    # -- reading -----------------------------------------------------------------------------------------------------

    def decode_body(self, cp: StoredCheckpoint) -> Body:
        raw = self._loads(cp, cp.body)
        try:
            if raw["f"] != _FORMAT:
                raise ValueError(f"unknown body format {raw['f']!r}")
            tasks = []
            for i, entry in enumerate(raw["t"]):
                if len(entry) == 1:
                    tasks.append(Task(f"{cp.checkpoint_id}.{i}", str(entry[0])))
                elif len(entry) == 2:
                    tasks.append(Task(f"{cp.checkpoint_id}.{i}", str(entry[0]), entry[1], True))
                else:
                    node, has_payload, payload, task_id = entry
                    tasks.append(Task(str(task_id), str(node), payload, bool(has_payload)))
            return Body(
                tasks=tasks,
                channels={str(k): (int(v[0]), int(v[1])) for k, v in raw["ch"].items()},
                lineage=[(str(t), int(s)) for t, s in raw[_LINEAGE]],
                interrupts=[Interrupt(str(n), w, payload=p, task_id=t) for n, w, p, t in raw.get("i", ())],
                barriers={str(k): [str(x) for x in v] for k, v in raw.get("b", {}).items()},
                schema_version=int(raw["sv"]),
                inline={str(k): bytes(v) for k, v in raw.get("v", {}).items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self._corrupt(cp, f"checkpoint body has the wrong shape ({exc})") from None

    def ranges(self, step: int, body: Body) -> list[BlobRange]:
        """The blob ranges that hold every channel's value at ``step``."""
        out: list[BlobRange] = []
        for name, (base, _) in body.channels.items():
            upper = step
            for thread_id, first in body.lineage:
                lo = max(base, first)
                if lo <= upper:
                    out.append(BlobRange(thread_id, name, lo, upper))
                upper = first - 1
                if upper < base:
                    break
        return out

    async def load_values(
        self, saver: Saver, cp: StoredCheckpoint, body: Body, *, loose: Loose | None = None
    ) -> dict[str, Any]:
        """The state values at ``cp``: one blob query (none when every field rides in the body), then
        :meth:`fold_many`. With ``loose``, also collects ``cp``'s thread's delta rows not yet packed into a chunk (a
        run continuing from ``cp`` packs them)."""
        ranges = self.ranges(cp.step, body)
        blobs = await saver.get_blobs(ranges) if ranges else []
        if loose is not None:  # replay the packing rule over the thread's own rows, in step order per channel
            for blob in blobs:
                if blob.thread_id != cp.thread_id:
                    continue
                if blob.kind == "delta":
                    pending = loose.setdefault(blob.channel, [])
                    if _pend(pending, blob.step, blob.data):
                        # CHUNK rows the writer never packed (an import stores every delta as its own row, so do
                        # older versions): they stay rows; only the newest CHUNK - 1 wait, as they would in a run
                        del pending[0]
                else:  # a snapshot or a chunk: no row before it waits to be packed
                    loose.pop(blob.channel, None)
        return self.fold_many([(cp, body)], blobs)[0]

    def history_ranges(
        self, oldest: StoredCheckpoint, old: Body, newest: StoredCheckpoint, new: Body
    ) -> list[BlobRange]:
        """Blob ranges covering every checkpoint of one lineage between ``oldest`` and ``newest``, found from those
        two alone: a channel's snapshot step only grows along a lineage, so ``oldest`` holds the lowest bases."""
        out: list[BlobRange] = []
        for name in {**old.channels, **new.channels}:
            lo = old.channels[name][0] if name in old.channels else oldest.step
            upper = newest.step
            for thread_id, first in new.lineage:
                if max(lo, first) <= upper:
                    out.append(BlobRange(thread_id, name, max(lo, first), upper))
                upper = first - 1
                if upper < lo:
                    break
        return out

    def fold_many(self, items: Sequence[tuple[StoredCheckpoint, Body]], blobs: Sequence[Blob]) -> list[dict[str, Any]]:
        """The values at each checkpoint of ``items`` (one lineage), from blobs that cover them all.

        Each channel is its snapshot folded with the deltas up to the checkpoint's step; walking the checkpoints
        oldest first, a channel whose snapshot did not change only folds the deltas since the previous one. Then
        migrations run when a checkpoint was written by an older schema version."""
        by_channel: dict[str, list[Blob]] = {}
        for blob in blobs:
            by_channel.setdefault(blob.channel, []).append(blob)
        steps: dict[str, list[int]] = {}
        for name, found in by_channel.items():
            found.sort(key=lambda b: b.step)
            steps[name] = [b.step for b in found]
        decoded: dict[tuple[str, int], Any] = {}
        cache: dict[str, tuple[int, int, Any]] = {}
        out: list[dict[str, Any]] = [{} for _ in items]
        for i in sorted(range(len(items)), key=lambda i: items[i][0].step):
            cp, body = items[i]
            stored: dict[str, Any] = {name: self._loads(cp, data) for name, data in body.inline.items()}
            unfoldable: list[str] = []  # fields the schema dropped, with deltas after their snapshot
            uppers = _segment_ends(body.lineage)
            for name, (base, _) in body.channels.items():
                found, at = by_channel.get(name, []), steps.get(name, [])
                cached = cache.get(name)
                if cached is not None and cached[0] == base and cached[1] <= cp.step:
                    value, done = cached[2], cached[1]
                else:
                    j = bisect.bisect_left(at, base)
                    if j == len(at) or at[j] != base or found[j].kind != "snapshot":
                        raise self._corrupt(cp, f"channel {name!r} has no snapshot at step {base}")
                    value, done = self._blob(cp, found[j], decoded), base
                channel = self.state.channels.get(name)
                first = bisect.bisect_right(at, done)
                if first and found[first - 1].kind == "chunk":  # a chunk begun before ``done`` may reach past it
                    first -= 1
                pending = found[first : bisect.bisect_right(at, cp.step)]
                if pending and channel is None:  # its reducer is gone with it: its value cannot be known
                    unfoldable.append(name)
                    continue
                if pending and channel is not None:
                    writes: list[Any] = []
                    for blob in pending:
                        delta = self._blob(cp, blob, decoded)
                        if blob.kind == "delta" and isinstance(delta, list):
                            writes += delta
                        elif blob.kind == "chunk" and _is_chunk(delta):
                            # steps past the checkpoint, or past the end of the thread's segment of its lineage
                            # (the source's later steps, for a fork), belong to other checkpoints
                            until = min(cp.step, uppers.get(blob.thread_id, cp.step))
                            for k in range(0, len(delta), 2):
                                if done < delta[k] <= until:
                                    writes += delta[k + 1]
                        else:
                            raise self._corrupt(cp, f"channel {name!r} has an unexpected blob at step {blob.step}")
                    try:
                        value = channel.fold(value, writes)  # one fold for all the deltas: one copy of the value
                    except GraphckptError:
                        raise
                    except Exception as exc:  # stored values the reducer cannot fold: a snapshot of the wrong type
                        raise self._corrupt(
                            cp,
                            f"channel {name!r}: its stored value and deltas do not fold "
                            f"({type(exc).__name__}: {brief(str(exc))})",
                        ) from None
                cache[name] = (base, cp.step, value)
                stored[name] = value
            out[i] = self.upgrade(cp, body, stored, unfoldable)
        return out

    async def step_update(self, saver: Saver, cp: StoredCheckpoint, keys: Sequence[str]) -> dict[str, Any] | None:
        """What the one task of ``cp``'s step wrote to ``keys``, read back from ``cp`` itself: a plain channel's value
        there, a reducer channel's one write of that step (its delta row, or its part of the chunk that packed it).
        For a ``task.finished`` event whose update the commit did not copy (see :func:`referable_update`); ``None``
        when ``cp`` does not hold it (the schema changed since)."""
        body = self.decode_body(cp)
        out: dict[str, Any] = {}
        for key in keys:
            channel = self.state.channels.get(key)
            if channel is None:
                return None
            if key in body.inline:
                out[key] = self._loads(cp, body.inline[key])
                continue
            if key not in body.channels:
                return None
            if channel.reducer is None:  # written this step: its snapshot row is at this step
                blobs = await saver.get_blobs([BlobRange(cp.thread_id, key, cp.step, cp.step)])
                if not blobs or blobs[0].kind != "snapshot":
                    return None
                out[key] = self._loads(cp, blobs[0].data)
                continue
            data = await self._step_delta(saver, cp, key, body.channels[key][0])
            writes = None if data is None else self._loads(cp, data)
            if not isinstance(writes, list) or len(writes) != 1:
                return None
            out[key] = writes[0]
        return out

    async def _step_delta(self, saver: Saver, cp: StoredCheckpoint, key: str, base: int) -> bytes | None:
        """The stored delta of reducer channel ``key`` at ``cp.step``: its own row, or its part of the chunk that
        packed it (the newest chunk begun at or before the step), undecoded. Looked for in widening ranges that
        never overlap (the step; the ``CHUNK`` steps before it, where the chunk of a channel written every step
        begins; back to its snapshot at ``base``), so reading one step's write stays a small read however many
        deltas the channel has."""
        upper = cp.step
        for first in (cp.step, max(base, cp.step - CHUNK + 1), base):
            if first > upper:
                continue
            for blob in reversed(await saver.get_blobs([BlobRange(cp.thread_id, key, first, upper)])):
                if blob.kind == "delta" and blob.step == cp.step:
                    return blob.data
                if blob.kind != "chunk":  # a delta or snapshot before the step: the step's write is not packed
                    return None
                try:
                    return next((data for step, data in split_chunk(blob.data) if step == cp.step), None)
                except ValueError:
                    return None
            upper = first - 1
        return None

    def _blob(self, cp: StoredCheckpoint, blob: Blob, decoded: dict[tuple[str, int], Any]) -> Any:
        key = (blob.channel, blob.step)
        if key not in decoded:
            decoded[key] = self._loads(cp, blob.data)
        return decoded[key]

    def upgrade(
        self, cp: StoredCheckpoint, body: Body, stored: dict[str, Any], unfoldable: Sequence[str] = ()
    ) -> dict[str, Any]:
        """Run migrations from ``body.schema_version``, drop unknown fields, fill defaults, validate if migrated.

        ``unfoldable``: reducer fields the schema no longer declares whose deltas could not be folded (their reducer
        went with them). They are not in ``stored``: a migration that reads one gets a :class:`GraphSetupError`
        saying to keep declaring the field, instead of the stale value of its last snapshot."""
        migrations = self.migrations
        version = body.schema_version
        if version > self.version:
            raise CorruptCheckpointError(
                f"checkpoint {brief(cp.checkpoint_id)} of thread {brief(cp.thread_id)!r} was written by schema version "
                f"{version}, newer than this graph's version {self.version}",
                thread_id=cp.thread_id,
                checkpoint_id=cp.checkpoint_id,
            )
        while version < self.version:
            migrate = migrations.get(version)
            if migrate is not None:
                stored = dict(migrate(_MigrationInput(stored, unfoldable, cp, version)))
            version += 1
        unknown = sorted([*(k for k in stored if k not in self.state.channels), *unfoldable])
        if unknown:
            logger.warning(
                "checkpoint %s of thread %r has field(s) the schema no longer has: %s; they were dropped",
                cp.checkpoint_id,
                cp.thread_id,
                ", ".join(unknown),
            )
            for k in unknown:
                stored.pop(k, None)
        if body.schema_version != self.version:
            for name, value in stored.items():
                try:
                    stored[name] = self.state.channels[name].validate(value, node="migration")
                except InvalidUpdateError as exc:
                    raise CorruptCheckpointError(
                        f"checkpoint {brief(cp.checkpoint_id)} of thread {brief(cp.thread_id)!r} (schema version "
                        f"{body.schema_version}): {exc}",
                        thread_id=cp.thread_id,
                        checkpoint_id=cp.checkpoint_id,
                    ) from None
        return {**self.state.defaults(), **stored}

    def decode_value(self, cp: StoredCheckpoint, data: bytes) -> Any:
        return self._loads(cp, data)

    def _loads(self, cp: StoredCheckpoint, data: bytes) -> Any:
        try:
            return self.serde.loads(data)
        except CorruptCheckpointError as exc:
            raise self._corrupt(cp, str(exc)) from None

    @staticmethod
    def _corrupt(cp: StoredCheckpoint, message: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(
            f"checkpoint {brief(cp.checkpoint_id)} of thread {brief(cp.thread_id)!r}: {message}",
            thread_id=cp.thread_id,
            checkpoint_id=cp.checkpoint_id,
        )


def _pend(pending: list[tuple[int, bytes]], step: int, data: bytes) -> bool:
    """The packing rule, shared by the writer and by a resumed run rebuilding its state from storage: ``data``, the
    delta stored at ``step``, joins the deltas waiting to be packed, unless it is larger than ``CHUNK_DELTA_MAX``:
    then it keeps its own row and the ones waiting stay unpacked (a chunk only ever replaces consecutive rows).
    True when ``CHUNK`` deltas wait: the caller packs them."""
    if len(data) > CHUNK_DELTA_MAX:
        pending.clear()
        return False
    pending.append((step, data))
    return len(pending) >= CHUNK


def referable_update(
    codec: Codec, update: Mapping[str, Any], blobs: Sequence[Blob], inline: Mapping[str, bytes]
) -> bool:
    """Whether :meth:`Codec.step_update` can read ``update`` (the step's only task's) back from the checkpoint these
    ``blobs`` and ``inline`` values make: every key is a channel, and a reducer channel stored this step's write as
    a delta (or a chunk holding it), not a snapshot with the write folded in. Then its ``task.finished`` event need
    not store the update a second time."""
    kinds = {b.channel: b.kind for b in blobs}
    for key in update:
        channel = codec.state.channels.get(key)
        if channel is None:
            return False
        if channel.reducer is None:
            if key not in inline and kinds.get(key) != "snapshot":
                return False
        elif kinds.get(key) not in ("delta", "chunk"):
            return False
    return True


def _pack_chunk(deltas: Sequence[tuple[int, bytes]]) -> bytes:
    """The ``data`` of a chunk: a msgpack array ``[step, writes, step, writes, ...]``, put together from the deltas'
    encoded bytes without decoding them."""
    parts = [msgpack.Packer().pack_array_header(2 * len(deltas))]  # the shortest header, as msgpack writes it
    for step, data in deltas:
        parts += (msgpack.packb(step), data)
    return b"".join(parts)


def split_chunk(data: bytes) -> list[tuple[int, bytes]]:
    """The ``(step, data)`` of each delta a chunk packs, each one's bytes as they were stored (see
    :func:`_pack_chunk`). Raises ``ValueError`` when ``data`` is not a chunk."""
    unpacker = msgpack.Unpacker(raw=False, ext_hook=msgpack.ExtType, max_buffer_size=max(len(data), 1))
    out: list[tuple[int, bytes]] = []
    try:
        unpacker.feed(data)
        for _ in range(unpacker.read_array_header() // 2):
            step = unpacker.unpack()
            start = unpacker.tell()
            unpacker.skip()
            if type(step) is not int:
                raise ValueError("a step is not an integer")
            out.append((step, data[start : unpacker.tell()]))
    except ValueError:
        raise
    except Exception as exc:
        raise ValueError(f"not a chunk ({type(exc).__name__})") from None
    return out


def replace_lineage(data: bytes, lineage: Sequence[tuple[str, int]]) -> bytes:
    """The encoded body ``data`` with its lineage replaced by ``lineage`` and every other byte kept: the other
    entries' raw encodings are copied, not decoded and encoded again, so a body whose threads were renamed (an export
    or import, see :mod:`graphckpt.transfer`) stays what was stored. ``data`` is a body :meth:`Codec.decode_body`
    reads."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max(len(data), 1))
    unpacker.feed(data)
    size = unpacker.read_map_header()
    parts = [data[: unpacker.tell()]]
    for _ in range(size):
        start = unpacker.tell()
        key = unpacker.unpack()
        middle = unpacker.tell()
        unpacker.skip()
        end = unpacker.tell()
        parts.append(data[start:middle])
        parts.append(
            msgpack.packb([[t, s] for t, s in lineage], use_bin_type=True) if key == _LINEAGE else data[middle:end]
        )
    return b"".join(parts)


def _is_chunk(data: Any) -> bool:
    """``data`` has the shape :func:`_pack_chunk` gives: steps (integers) alternating with lists of writes."""
    return (
        isinstance(data, list)
        and len(data) % 2 == 0
        and all(type(step) is int and type(writes) is list for step, writes in zip(data[::2], data[1::2], strict=True))
    )


class _MigrationInput(dict[str, Any]):
    """The values a migration gets. Reading a reducer field the schema dropped and whose deltas could not be folded
    (``unfoldable``), by ``values[k]``, ``get``, ``in``, ``pop`` or ``setdefault``, raises :class:`GraphSetupError`:
    never a ``KeyError`` a migration might catch, a default or ``False`` that would silently lose the field's value."""

    def __init__(self, values: Mapping[str, Any], unfoldable: Sequence[str], cp: StoredCheckpoint, version: int):
        super().__init__(values)
        self._unfoldable = frozenset(unfoldable)
        self._cp = cp
        self._version = version

    def _check(self, key: object) -> None:
        if key in self._unfoldable and not super().__contains__(key):
            cp = self._cp
            raise GraphSetupError(
                f"the migration from schema version {self._version} reads field {brief(key)!r} of checkpoint "
                f"{cp.checkpoint_id} of thread {brief(cp.thread_id)!r}, a reducer field this schema no longer "
                f"declares: without its reducer its stored deltas cannot be folded into its value. Keep "
                f"declaring it (with its reducer) in the new schema; the migration can then move its value"
            )

    def __missing__(self, key: str) -> Any:
        self._check(key)
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        self._check(key)
        return super().__contains__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self._check(key)
        return super().get(key, default)

    def pop(self, key: str, *default: Any) -> Any:
        self._check(key)
        return super().pop(key, *default)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self._check(key)
        return super().setdefault(key, default)


def _segment_ends(lineage: Sequence[tuple[str, int]]) -> dict[str, int]:
    """For each thread of a lineage but the newest, the last step the lineage takes from it."""
    return {thread_id: lineage[k - 1][1] - 1 for k, (thread_id, _) in enumerate(lineage) if k}
