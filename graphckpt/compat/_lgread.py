"""A LangGraph checkpoint stored by the compat saver, read as graphckpt's tools read an engine checkpoint.

graphckpt's tools (``threads``, ``history``, ``show``, ``diff``, ``export``, the UI, ``serve``) read through
:class:`~graphckpt.reader.RawCodec`, which hands a body in the compat format (see :mod:`graphckpt.compat._lgvalues`)
to this module: the body becomes an engine :class:`~graphckpt.codec.Body` (:class:`CompatBody`) whose lineage is the
member threads' lineage and whose frontier is the nodes LangGraph would run next, and the state's channel values (not
LangGraph's own trigger and input channels) are folded from the compat blobs (a snapshot, then the deltas appended
after it). Values are decoded by the caller's raw serializer (models and registered types as their plain fields):
nothing is imported by a name found in stored data, and LangGraph need not be installed.

The next nodes are found from LangGraph's own data in the checkpoint: a node ``X`` is due when the version of its
trigger channel (``branch:to:X``, or ``__start__`` for the input node) is newer than the version ``X`` last saw.
Pending ``Send`` tasks are not listed (their payloads sit in a channel value, which the frontier does not read).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from graphckpt.checkpoint import Task
from graphckpt.codec import Body
from graphckpt.compat._lgvalues import Body as LgBody
from graphckpt.compat._lgvalues import decode_body, unpack
from graphckpt.compat._lgwrites import read_task_writes
from graphckpt.errors import CorruptCheckpointError
from graphckpt.savers.base import Blob, BlobRange, Saver, StoredCheckpoint, ThreadRecord
from graphckpt.serde import Serializer

__all__ = [
    "COMPAT_RUN_ID",
    "CompatBody",
    "compat_body",
    "compat_history_ranges",
    "compat_ranges",
    "compat_updates",
    "fold_compat",
    "is_compat",
    "is_compat_body",
]

COMPAT_RUN_ID = "langgraph"
"""The ``run_id`` the compat saver creates every member thread with (see :mod:`graphckpt.compat._lgstore`)."""

_MARK = b"\xablanggraph/"  # msgpack's fixstr of the compat body's format tag, near the start of every compat body
_TRIGGER = "branch:to:"
_HIDDEN = ("__", "branch:")  # LangGraph's own channels (triggers, sends, input): not state values
_START = "__start__"

Loads = Callable[[bytes], Any]


@dataclass(slots=True)
class CompatBody(Body):
    """An engine body standing for a compat one (``lg``): lineage and frontier filled in; every stored channel in the
    channel table as if snapshotted at step 0 (its blobs are read from the lineage's start, see
    :func:`compat_ranges`)."""

    lg: LgBody | None = None

    def points_at(self, channel: str, step: int) -> bool:
        """This checkpoint's value of ``channel`` is the blob at ``step`` of its own member."""
        found = self.lg.pointers.get(channel) if self.lg is not None else None
        return found is not None and found[1] == step


def is_compat_body(cp: StoredCheckpoint) -> bool:
    """``cp`` was written by the compat saver (its body carries the compat format's tag)."""
    return cp.body.find(_MARK, 0, 32) >= 0


def compat_body(plain: Serializer, cp: StoredCheckpoint) -> CompatBody | None:
    """``cp``'s body as an engine body, or ``None`` when it is not a compat body."""
    if cp.body.find(_MARK, 0, 32) < 0:
        return None
    lg = decode_body(plain, cp)
    if lg is None:
        return None
    tasks = [
        Task(f"{cp.checkpoint_id}.{i}", node)
        for i, node in enumerate(next_nodes(lg.checkpoint, {**lg.pointers, **lg.inline}))
    ]
    # the channel table says "read from the lineage's start" for every stored channel: what an export copies
    channels = {name: (0, 0) for name in lg.pointers}
    return CompatBody(tasks=tasks, channels=channels, lineage=list(lg.lineage), lg=lg)


class ThreadSource(Protocol):
    """What reads a thread's record: a saver, or a :class:`~graphckpt.store.ThreadStore`."""

    async def get_thread(self, thread_id: str) -> ThreadRecord | None: ...


def is_compat(record: ThreadRecord) -> bool:
    """``record`` is a member thread the compat saver wrote (and no graphckpt run claimed since)."""
    return record.run_id == COMPAT_RUN_ID


async def written_by_langgraph(saver: ThreadSource, thread_id: str) -> bool:
    """A LangGraph graph wrote the thread (GraphckptSaver): no served graph reads it, the raw reader does."""
    record = await saver.get_thread(thread_id)
    return record is not None and is_compat(record)


def next_nodes(checkpoint: Mapping[str, Any], available: Mapping[str, Any]) -> list[str]:
    """The nodes whose trigger channel holds a value (is in ``available``) newer than the version they last saw,
    in name order (a node consumes its trigger when it runs: the channel is then empty)."""
    versions = checkpoint.get("channel_versions")
    seen = checkpoint.get("versions_seen")
    if not isinstance(versions, Mapping) or not isinstance(seen, Mapping):
        return []
    due = []
    for channel, version in versions.items():
        if not isinstance(channel, str) or channel not in available:
            continue
        node = _START if channel == _START else channel[len(_TRIGGER) :] if channel.startswith(_TRIGGER) else None
        if node is None:
            continue
        last = seen.get(node)
        before = last.get(channel) if isinstance(last, Mapping) else None
        try:
            newer = before is None or version > before
        except TypeError:  # versions of different types: not comparable, so not known to be due
            newer = False
        if newer:
            due.append(node)
    return sorted(due)


def _segments(lineage: Sequence[tuple[str, int]], step: int) -> list[tuple[str, int, int]]:
    """``(member, first, upper)``: the member's steps ``first <= s < upper`` belong to the lineage up to ``step``."""
    out, upper = [], step + 1
    for member, first in lineage:
        if upper > first:
            out.append((member, first, upper))
        upper = min(upper, first)
    return out


def compat_ranges(step: int, body: CompatBody) -> list[BlobRange]:
    """Ranges holding every channel's chain at ``step``: each channel along the lineage up to its pointer (from the
    lineage's start: the chain's snapshot is found when folding)."""
    assert body.lg is not None
    out = []
    for channel, (_member, at) in body.lg.pointers.items():
        if channel.startswith(_HIDDEN):
            continue
        for member, first, upper in _segments(body.lineage, min(step, at)):
            out.append(BlobRange(member, channel, first, upper - 1))
    return out


def compat_history_ranges(newest: StoredCheckpoint, old: CompatBody, new: CompatBody) -> list[BlobRange]:
    """Ranges covering every checkpoint of one lineage up to ``newest``, for every channel either end has."""
    assert old.lg is not None and new.lg is not None
    out = []
    for channel in {**old.lg.pointers, **new.lg.pointers}:
        if channel.startswith(_HIDDEN):
            continue
        for member, first, upper in _segments(new.lineage, newest.step):
            out.append(BlobRange(member, channel, first, upper - 1))
    return out


def fold_compat(loads: Loads, cp: StoredCheckpoint, body: CompatBody, blobs: Sequence[Blob]) -> dict[str, Any]:
    """The channel values at ``cp`` from blobs covering its chains (others are ignored). ``loads`` decodes bytes
    (raising :class:`CorruptCheckpointError` naming the checkpoint)."""
    assert body.lg is not None
    segments = _segments(body.lineage, cp.step)
    by_channel: dict[str, list[Blob]] = {}
    for blob in blobs:
        if any(blob.thread_id == m and first <= blob.step < upper for m, first, upper in segments):
            by_channel.setdefault(blob.channel, []).append(blob)
    values: dict[str, Any] = {}
    for channel, data in body.lg.inline.items():
        if not channel.startswith(_HIDDEN):
            values[channel] = loads(data)
    for channel, (member, at) in body.lg.pointers.items():
        if channel.startswith(_HIDDEN):
            continue
        chain = sorted((b for b in by_channel.get(channel, ()) if b.step <= at), key=lambda b: b.step)
        if not chain or chain[-1].step != at or chain[-1].thread_id != member:
            raise CorruptCheckpointError(f"channel {channel!r} has no stored value at step {at} of {member!r}")
        start = next((k for k in range(len(chain) - 1, -1, -1) if chain[k].kind == "snapshot"), None)
        if start is None:
            raise CorruptCheckpointError(f"channel {channel!r}: its deltas have no snapshot before them")
        raw = _shape(loads(unpack(chain[start].data)), channel)
        if raw[0] == "v":
            if start != len(chain) - 1:
                raise CorruptCheckpointError(f"channel {channel!r}: deltas follow a value that is not a list")
            values[channel] = loads(raw[1])
            continue
        items = list(raw[1])
        for blob in chain[start + 1 :]:
            delta = _shape(loads(unpack(blob.data)), channel)
            if delta[0] != "d":
                raise CorruptCheckpointError(f"channel {channel!r}: a chain holds a value that is not a delta")
            items.extend(delta[3])
        values[channel] = [loads(item) for item in items]
    return values


_SIZES = {"v": 2, "l": 2, "d": 4}


def _shape(raw: Any, channel: str) -> list[Any]:
    ok = isinstance(raw, list) and raw and len(raw) == _SIZES.get(raw[0], -1)
    if ok:
        parts = raw[1] if raw[0] == "l" else raw[3] if raw[0] == "d" else [raw[1]]
        ok = isinstance(parts, list) and all(isinstance(x, bytes) for x in parts)
    if not ok:
        raise CorruptCheckpointError(f"channel {channel!r} has a stored value of the wrong shape")
    return list(raw)


_PULL = "~__pregel_pull, "  # the start of a node's task path (LangGraph's task_path_str of ("__pregel_pull", node))


async def compat_updates(ser: Serializer, saver: Saver, thread_id: str, checkpoint_id: str) -> dict[str, Any]:
    """LangGraph's ``updates`` of the step that ended at a checkpoint: ``{node: {channel: value}}`` from the writes
    the compat saver keeps with its parent (``thread_id``, ``checkpoint_id``), LangGraph's own channels left out."""
    rows = await saver.get_kept_writes(thread_id, checkpoint_id)
    out: dict[str, dict[str, Any]] = {}
    for _task, channel, value, path in await read_task_writes(ser, saver, rows):
        node = path.removeprefix(_PULL)
        if not channel.startswith(_HIDDEN) and node != _START:  # the input is no node's update (as in LangGraph)
            out.setdefault(node, {})[channel] = value
    return out
