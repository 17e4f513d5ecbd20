"""LangGraph's pending writes as stored rows, and storing an appended item once.

LangGraph keeps every checkpoint's writes (history shows each task's result). A write that appends to a list channel
(``{"messages": [msg]}``) would store its items twice: in the write, and in the next checkpoint's delta blob of that
channel. When the next checkpoint's delta holds the write's items (byte for byte, in one run), the write row is
replaced by a reference to that slice of the blob (``ref``); reading it back takes the items from the blob. A write
whose items do not appear there as they are (a reducer changed them) stays whole.

Row data: ``["w", channel, value, task_path]``, ``["r", channel, member, step, start, end, single, task_path]``, or
for an exception (a task's error) ``["e", channel, its type's name, its message, task_path]``: never the class
itself; it reads back as the text ``TypeName('message')``, as LangGraph's SqliteSaver returns it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from graphckpt.errors import CorruptCheckpointError, SerializationError
from graphckpt.savers.base import Blob, BlobRange, Saver, StoredWrite
from graphckpt.serde import Serializer

__all__ = ["Appended", "encode_write", "find_refs", "read_writes"]


@dataclass(slots=True)
class Appended:
    """A write that appends items: what is needed to replace it by a reference."""

    task_id: str
    index: int
    channel: str
    items: list[bytes]
    single: bool  # the write's value was one item, not a list
    path: str


def encode_write(
    ser: Serializer, task_id: str, index: int, channel: str, value: Any, path: str
) -> tuple[StoredWrite, Appended | None]:
    """The row of one write, and, for a list (or a lone LangChain message), its items encoded one by one."""
    if isinstance(value, BaseException):
        data = ["e", channel, type(value).__qualname__, str(value), path]
        return StoredWrite(task_id, "result", index, ser.dumps(data)), None
    try:
        row = StoredWrite(task_id, "result", index, ser.dumps(["w", channel, value, path]))
        appended = None
        if type(value) is list and value:
            appended = Appended(task_id, index, channel, [ser.dumps(v) for v in value], False, path)
        elif type(value).__module__.startswith("langchain_core.messages"):
            appended = Appended(task_id, index, channel, [ser.dumps(value)], True, path)
    except SerializationError as exc:
        raise SerializationError(f"write to channel {channel!r} of task {task_id!r}: {exc}") from None
    return row, appended


def find_refs(
    ser: Serializer, writes: Sequence[Appended], delta: Blob, new_items: Sequence[bytes]
) -> list[StoredWrite]:
    """Reference rows for the ``writes`` whose items appear, in order, in ``new_items`` (the items the delta blob
    ``delta`` appends to its channel)."""
    out: list[StoredWrite] = []
    at = 0
    for w in writes:
        if w.channel != delta.channel:
            continue
        n = len(w.items)
        start = _find(new_items, w.items, at)
        if start is None:
            continue
        at = start + n
        data = ["r", w.channel, delta.thread_id, delta.step, start, start + n, w.single, w.path]
        out.append(StoredWrite(w.task_id, "result", w.index, ser.dumps(data)))
    return out


def _find(haystack: Sequence[bytes], needle: Sequence[bytes], start: int) -> int | None:
    n = len(needle)
    for i in range(start, len(haystack) - n + 1):
        if haystack[i] == needle[0] and list(haystack[i : i + n]) == list(needle):
            return i
    return None


async def read_writes(ser: Serializer, saver: Saver, rows: Sequence[StoredWrite]) -> list[tuple[str, str, Any]]:
    """LangGraph's ``(task_id, channel, value)`` for stored rows, resolving references with one blob query."""
    decoded = [ser.loads(w.data) for w in rows]
    wanted = {(d[2], d[1], d[3]) for d in decoded if d[0] == "r"}
    blobs: dict[tuple[str, str, int], list[bytes]] = {}
    if wanted:
        found = await saver.get_blobs([BlobRange(m, ch, s, s) for m, ch, s in wanted])
        for blob in found:
            raw = ser.loads(blob.data)
            blobs[(blob.thread_id, blob.channel, blob.step)] = list(raw[3] if raw[0] == "d" else raw[1])
    out = []
    for w, d in zip(rows, decoded, strict=True):
        if d[0] == "w":
            out.append((w.task_id, d[1], d[2]))
            continue
        if d[0] == "e":  # as LangGraph's own savers read an error back: its repr, as text
            out.append((w.task_id, d[1], f"{d[2]}({d[3]!r})"))
            continue
        _r, channel, member, step, start, end, single, _path = d
        items = blobs.get((member, channel, step))
        if items is None or end > len(items):
            raise CorruptCheckpointError(f"a write of task {w.task_id!r} refers to a missing value of {channel!r}")
        values = [ser.loads(item) for item in items[start:end]]
        out.append((w.task_id, channel, values[0] if single else values))
    return out
