"""How a LangGraph checkpoint is laid out in graphckpt rows: member thread names, the body, and channel blobs.

Names. A LangGraph thread ``T`` is the graphckpt thread family ``F = q(T)`` (``q`` escapes ``%`` and ``~``, so no
thread id is a prefix-with-separator of another; see :data:`graphckpt.savers.base.FAMILY_SEP`). Each branch of each
checkpoint namespace is one member thread: ``F`` for the first root of the root namespace, ``F~q(ns)`` for the first
root of namespace ``ns``, and ``F~q(ns)~SUFFIX`` for every other branch (``SUFFIX`` is the id of the branch's first
checkpoint, made unique if needed). A branch that starts from a stored checkpoint (``update_state`` on a past
checkpoint, a second run from an earlier point) is a graphckpt fork of the member holding that checkpoint; another
root (a checkpoint put with no parent) is a member with no parent.

Steps. graphckpt's ``step`` counts along a member's lineage (parent's step + 1, 0 at a root); LangGraph's own
``metadata["step"]`` (from -1, repeating across branches) is kept as it is in the metadata.

Channels. Each channel value a checkpoint stores is one blob at ``(member, channel, step)``. A list that extends the
previous version of the same channel (``add_messages``, ``operator.add``: the usual LangGraph state) is stored as a
``delta`` holding only the new items; anything else as a ``snapshot``. Items are encoded one by one, so the check
"extends the previous version" compares bytes and is right even if a node mutated an old item in place. Along one
lineage every version of a channel between its last snapshot and a delta belongs to that delta's chain, so a value is
read with one :meth:`~graphckpt.savers.base.Saver.get_blobs` call covering that span.
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from graphckpt.errors import CorruptCheckpointError
from graphckpt.savers.base import FAMILY_SEP, Blob, BlobRange, StoredCheckpoint
from graphckpt.serde import Serializer

__all__ = ["Body", "ValueCache", "decode_body", "encode_body", "family_of", "member_name", "parse_member"]

FORMAT = "langgraph/2"
"""Marks a body written by the compat saver (an engine body has no such key)."""
_FORMAT_1 = "langgraph/1"  # pointers were [member, step, version] and the parent id always there: still read


def _q(text: str) -> str:
    return text.replace("%", "%25").replace(FAMILY_SEP, "%7E")


def family_of(thread_id: str) -> str:
    """The graphckpt family of a LangGraph thread id."""
    return _q(thread_id)


def member_name(family: str, ns: str, suffix: str = "") -> str:
    """The member thread of ``family`` for namespace ``ns``: its first root without ``suffix``, a branch with it."""
    if not ns and not suffix:
        return family
    return f"{family}{FAMILY_SEP}{_q(ns)}" + (f"{FAMILY_SEP}{suffix}" if suffix else "")


def parse_member(family: str, member: str) -> str | None:
    """The namespace of member thread ``member`` of ``family`` (``None`` when it is not one)."""
    if member == family:
        return ""
    prefix = family + FAMILY_SEP
    if not member.startswith(prefix):
        return None
    quoted = member[len(prefix) :].split(FAMILY_SEP, 1)[0]
    return quoted.replace("%7E", FAMILY_SEP).replace("%25", "%")


INLINE_MAX = 64
"""A channel value that is not a list and is encoded in at most this many bytes is carried in the body (no blob row:
LangGraph's trigger channels, counters, flags)."""


@dataclass(slots=True)
class Body:
    """The decoded body of a compat checkpoint."""

    checkpoint: dict[str, Any]
    """LangGraph's checkpoint without ``id`` and ``channel_values``: ``v``, ``ts``, ``channel_versions``,
    ``versions_seen``, ``updated_channels`` and any key a newer LangGraph adds."""
    parent_id: str | None
    """LangGraph's parent checkpoint id (kept even when that checkpoint was pruned)."""
    pointers: dict[str, tuple[str, int]]
    """channel -> (member thread, step) of the blob holding its value at this checkpoint."""
    lineage: list[tuple[str, int]]
    """Newest first: (member thread, first step of the lineage stored under it)."""
    inline: dict[str, bytes] = field(default_factory=dict)
    """channel -> its value, encoded: the small values carried in the body (see :data:`INLINE_MAX`)."""


def encode_body(plain: Serializer, body: Body, member: str, parent_column: str | None) -> bytes:
    """The body of a checkpoint of ``member`` whose ``parent_checkpoint_id`` column is ``parent_column``: a pointer
    into ``member`` is its step alone, another one ``[member, step]``, an inline value its bytes; the parent id is left
    out when the column holds it."""
    ch: dict[str, Any] = {k: at if m == member else [m, at] for k, (m, at) in body.pointers.items()}
    ch.update(body.inline)
    raw: dict[str, Any] = {"f": FORMAT, "c": body.checkpoint, "ch": ch, "lin": [list(seg) for seg in body.lineage]}
    if body.parent_id != parent_column:
        raw["p"] = body.parent_id
    return plain.dumps(raw)


def decode_body(plain: Serializer, cp: StoredCheckpoint) -> Body | None:
    """``cp``'s body, or ``None`` when it is not a compat body (a thread the engine wrote)."""
    try:
        raw = plain.loads(cp.body)
    except CorruptCheckpointError:
        return None
    if not isinstance(raw, dict) or raw.get("f") not in (FORMAT, _FORMAT_1):
        return None
    pointers: dict[str, tuple[str, int]] = {}
    inline: dict[str, bytes] = {}
    for k, v in raw["ch"].items():
        if type(v) is int:
            pointers[k] = (cp.thread_id, v)
        elif type(v) is bytes:
            inline[k] = v
        else:
            pointers[k] = (v[0], int(v[1]))
    parent = raw.get("p", cp.parent_checkpoint_id)
    return Body(raw["c"], parent, pointers, [(t, int(s)) for t, s in raw["lin"]], inline)


_PACK_MIN = 256
_ZLIB = b"\x78"  # a zlib stream's first byte; a stored value starts with a msgpack array's (0x9N)


def pack(data: bytes) -> bytes:
    """A blob's ``data``: zlib-compressed when that saves at least a sixteenth (values of a few hundred bytes and
    up: a 1 KiB message takes about 900 bytes, so a SQLite page holds four rows instead of three)."""
    if len(data) >= _PACK_MIN:
        packed = zlib.compress(data, 6)
        if len(packed) <= len(data) - (len(data) >> 4):
            return packed
    return data


def unpack(data: bytes) -> bytes:
    """What :func:`pack` packed, inflating at most ~1032 bytes per stored byte (deflate's own limit): stored data
    is untrusted; :class:`CorruptCheckpointError` when it is not one complete stream."""
    if not data.startswith(_ZLIB):
        return data
    stream = zlib.decompressobj()
    try:
        out = stream.decompress(data, len(data) * 1032 + 1024)
    except zlib.error as exc:
        raise CorruptCheckpointError(f"a compressed value does not inflate ({exc})") from None
    if not stream.eof or stream.unconsumed_tail:
        raise CorruptCheckpointError("a compressed value is truncated or inflates past its bound")
    return out


@dataclass(slots=True)
class _Known:
    items: list[bytes] | None  # a list's items encoded one by one; None for any other value
    whole: bytes | None  # a non-list value, encoded
    snap: tuple[str, int]  # where the chain of this version starts
    objs: list[Any] | None = None  # the list's items themselves (what ``items`` encodes)
    sigs: list[Any] | None = None  # for each, what :func:`_signature` saw when it was encoded


_IMMUTABLE = (str, bytes, int, float, bool, type(None))
_ALWAYS = object()  # the signature of an item that is encoded again every time


def _signature(item: Any) -> Any:
    """What tells that an item was not changed in place since it was encoded: nothing for an immutable value,
    a shallow copy of its attributes for an object with a ``__dict__`` (a LangChain message, a pydantic model, a
    dataclass: a field reassigned is seen; a nested dict or list changed in place is not, as LangGraph asks nodes
    not to mutate state), and :data:`_ALWAYS` otherwise."""
    if type(item) in _IMMUTABLE:
        return None
    attrs = getattr(item, "__dict__", None)
    return dict(attrs) if type(attrs) is dict else _ALWAYS


def _encode_items(ser: Serializer, value: list[Any], base: _Known | None) -> tuple[list[bytes], list[Any]]:
    """``value``'s items encoded one by one, reusing the bytes of ``base`` for the leading items that are the
    very objects ``base`` encoded, unchanged (so a step appending one message encodes one message, not all)."""
    sigs = [_signature(item) for item in value]
    reused = 0
    if base is not None and base.items is not None and base.objs is not None and base.sigs is not None:
        for old, was, item, sig in zip(base.objs, base.sigs, value, sigs, strict=False):
            if old is not item or was is _ALWAYS or sig != was:
                break
            reused += 1
    head = base.items[:reused] if base is not None and base.items is not None else []
    return head + [ser.dumps(item) for item in value[reused:]], sigs


class ValueCache:
    """The encoded form of recently written channel versions, by ``(member, channel, step)``: what a new version
    is compared with to store only what it appends. Bounded (least recently used go first)."""

    def __init__(self, size: int = 512) -> None:
        self._size = size
        self._known: OrderedDict[tuple[str, str, int], _Known] = OrderedDict()

    def get(self, key: tuple[str, str, int]) -> _Known | None:
        found = self._known.get(key)
        if found is not None:
            self._known.move_to_end(key)
        return found

    def put(self, key: tuple[str, str, int], known: _Known) -> None:
        self._known[key] = known
        self._known.move_to_end(key)
        while len(self._known) > self._size:
            self._known.popitem(last=False)

    def forget(self, member: str) -> None:
        for key in [k for k in self._known if k[0] == member]:
            del self._known[key]


def channel_blob(
    ser: Serializer,
    cache: ValueCache,
    member: str,
    step: int,
    channel: str,
    value: Any,
    previous: tuple[str, int] | None,
) -> tuple[Blob, list[bytes] | None]:
    """The blob storing ``value`` of ``channel`` at ``(member, step)``: a delta when it is a list extending the
    version at ``previous`` (as far as the cache knows it), else a snapshot; and, for a list, the encoded items the
    blob holds."""
    base = cache.get((previous[0], channel, previous[1])) if previous is not None else None
    if type(value) is list:
        items, sigs = _encode_items(ser, value, base)
        old = base.items if base is not None else None
        if old is not None and previous is not None and len(items) >= len(old) and items[: len(old)] == old:
            assert base is not None
            data = pack(ser.dumps(["d", list(previous), list(base.snap), items[len(old) :]]))
            cache.put((member, channel, step), _Known(items, None, base.snap, list(value), sigs))
            return Blob(member, channel, step, "delta", data), items[len(old) :]
        cache.put((member, channel, step), _Known(items, None, (member, step), list(value), sigs))
        return Blob(member, channel, step, "snapshot", pack(ser.dumps(["l", items]))), items
    whole = ser.dumps(value)
    cache.put((member, channel, step), _Known(None, whole, (member, step)))
    return Blob(member, channel, step, "snapshot", pack(ser.dumps(["v", whole]))), None


def value_ranges(
    ser: Serializer, body: Body, step: int, heads: Mapping[str, Blob]
) -> tuple[dict[str, Any], list[BlobRange]]:
    """From the blobs each pointer names (``heads``): the values that are whole (snapshots), and the ranges
    holding the chains of the others."""
    values: dict[str, Any] = {}
    ranges: list[BlobRange] = []
    for channel, data in body.inline.items():
        values[channel] = ser.loads(data)
    for channel, (member, at) in body.pointers.items():
        blob = heads.get(channel)
        if blob is None:
            raise CorruptCheckpointError(f"channel {channel!r} has no stored value at step {at} of {member!r}")
        raw = ser.loads(unpack(blob.data))
        if raw[0] == "v":
            values[channel] = ser.loads(raw[1])
        elif raw[0] == "l":
            values[channel] = [ser.loads(item) for item in raw[1]]
        else:
            snap_member, snap_step = raw[2]
            ranges.extend(_chain_ranges(body, step, channel, (member, at), (snap_member, int(snap_step))))
    return values, ranges


def _chain_ranges(body: Body, step: int, channel: str, end: tuple[str, int], start: tuple[str, int]) -> list[BlobRange]:
    ranges = []
    upper = step + 1
    for member, first in body.lineage:  # newest first
        lo, hi = max(first, start[1]), min(upper - 1, end[1])
        if lo <= hi:
            ranges.append(BlobRange(member, channel, lo, hi))
        upper = first
    return ranges


def fold_chains(ser: Serializer, blobs: Sequence[Blob]) -> dict[str, list[Any]]:
    """The list values the chains in ``blobs`` (snapshot then deltas of each channel, in step order) add up to."""
    by_channel: dict[str, list[Blob]] = {}
    for blob in blobs:
        by_channel.setdefault(blob.channel, []).append(blob)
    out: dict[str, list[Any]] = {}
    for channel, chain in by_channel.items():
        chain.sort(key=lambda b: b.step)
        items: list[bytes] = []
        for blob in chain:
            raw = ser.loads(unpack(blob.data))
            if raw[0] == "l":
                items = list(raw[1])
            elif raw[0] == "d":
                items.extend(raw[3])
            else:
                raise CorruptCheckpointError(f"channel {channel!r}: a chain holds a value that is not a list")
        out[channel] = [ser.loads(item) for item in items]
    return out
