"""LangGraph's pending writes as stored rows, and storing an appended item once.

LangGraph keeps every checkpoint's writes (history shows each task's result). A write that appends to a list channel
(``{"messages": [msg]}``) would store its items twice: in the write, and in the next checkpoint's delta blob of that
channel. When the next checkpoint's delta holds the write's items (byte for byte, in one run), the write row is
replaced by a reference to that slice of the blob (``ref``); reading it back takes the items from the blob. A write
whose items do not appear there as they are (a reducer changed them) stays whole.

Rows. One ``put_writes`` call is one row at index 0, ``["p", task_path, entries]`` (a write's LangGraph index is its
place in ``entries``), and one row per write to a special channel (error, interrupt, resume, scheduled) at LangGraph's
fixed negative index, ``[*entry, task_path]``. An entry is ``["w", channel, value]``, ``["r", channel, member, step,
start, end, single]``, or for an exception (a task's error) ``["e", channel, its type's name, its message]``: never
the class itself; it reads back as the text ``TypeName('message')``, as LangGraph's SqliteSaver returns it. (Rows of
one write, ``[*entry, task_path]`` at the write's index, as an earlier version stored all writes, read the same.)
A row's bytes are compressed as a blob's are (:func:`graphckpt.compat._lgvalues.pack`; rows stored plain still read).

On a saver that keeps dead rows (:attr:`graphckpt.savers.base.Saver.keeps_dead_rows`: PostgreSQL) a write is never
replaced by a reference: the UPDATE would leave the whole old row behind until VACUUM, so the row stays as it was
stored (one row instead of a dead one and a live reference).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from graphckpt.compat._lgvalues import pack, unpack
from graphckpt.errors import CorruptCheckpointError, SerializationError
from graphckpt.savers.base import Blob, BlobRange, Saver, StoredWrite
from graphckpt.serde import Serializer

__all__ = ["SPECIAL_INDEX", "Packed", "encode_writes", "read_task_writes", "read_writes", "ref_rows"]


SPECIAL_INDEX = {"__error__": -1, "__scheduled__": -2, "__interrupt__": -3, "__resume__": -4}
"""LangGraph's indexes of its special write channels (a task's error, interrupt, resume: one per task, replaced)."""


@dataclass(slots=True)
class Packed:
    """The writes one ``put_writes`` call stored in one row: what is needed to replace some by references."""

    task_id: str
    index: int
    path: str
    entries: list[list[Any]]  # the row's entries, as stored
    appends: list[tuple[int, str, list[bytes], bool]]  # (entry, channel, items encoded one by one, single item)


def encode_writes(
    ser: Serializer, task_id: str, writes: Sequence[tuple[str, Any]], path: str
) -> tuple[list[StoredWrite], Packed | None]:
    """The rows of one ``put_writes`` call: one row per write of LangGraph's special channels (each replaces its
    predecessor, at its fixed index), and one row at index 0 packing the other writes (the index of each is its
    place in the row); and, for that row, its writes that append items (a list, or a lone LangChain message)."""
    rows: list[StoredWrite] = []
    entries: list[list[Any]] = []
    appends: list[tuple[int, str, list[bytes], bool]] = []
    for channel, value in writes:
        try:
            entry = _entry(channel, value)
            if channel in SPECIAL_INDEX:
                rows.append(StoredWrite(task_id, "result", SPECIAL_INDEX[channel], pack(ser.dumps([*entry, path]))))
                continue
            if type(value) is list and value:
                appends.append((len(entries), channel, [ser.dumps(v) for v in value], False))
            elif type(value).__module__.startswith("langchain_core.messages"):
                appends.append((len(entries), channel, [ser.dumps(value)], True))
            entries.append(entry)
        except SerializationError as exc:
            raise SerializationError(f"write to channel {channel!r} of task {task_id!r}: {exc}") from None
    if not entries:
        return rows, None
    try:
        rows.append(StoredWrite(task_id, "result", 0, pack(ser.dumps(["p", path, entries]))))
    except SerializationError:
        for channel, value in writes:  # name the write that cannot be stored
            if isinstance(value, BaseException):
                continue
            try:
                ser.dumps(value)
            except SerializationError as exc:
                raise SerializationError(f"write to channel {channel!r} of task {task_id!r}: {exc}") from None
        raise
    return rows, Packed(task_id, 0, path, entries, appends) if appends else None


def _entry(channel: str, value: Any) -> list[Any]:
    if isinstance(value, BaseException):
        return ["e", channel, type(value).__qualname__, str(value)]
    return ["w", channel, value]


def ref_rows(
    ser: Serializer, packed: Sequence[Packed], blobs: Sequence[tuple[Blob, Sequence[bytes]]]
) -> list[StoredWrite]:
    """The rows of ``packed`` with each appending write whose items appear, in order, among the items a delta blob
    of ``blobs`` appends to its channel replaced by a reference to them (rows with nothing replaced are left out)."""
    out: list[StoredWrite] = []
    at: dict[str, int] = {}
    for row in packed:
        changed = False
        for pos, channel, items, single in row.appends:
            for blob, new_items in blobs:
                if blob.channel != channel:
                    continue
                start = _find(new_items, items, at.get(channel, 0))
                if start is None:
                    continue
                at[channel] = start + len(items)
                row.entries[pos] = ["r", channel, blob.thread_id, blob.step, start, start + len(items), single]
                changed = True
                break
        if changed:
            out.append(StoredWrite(row.task_id, "result", row.index, pack(ser.dumps(["p", row.path, row.entries]))))
    return out


def _find(haystack: Sequence[bytes], needle: Sequence[bytes], start: int) -> int | None:
    n = len(needle)
    for i in range(start, len(haystack) - n + 1):
        if haystack[i] == needle[0] and list(haystack[i : i + n]) == list(needle):
            return i
    return None


async def read_writes(ser: Serializer, saver: Saver, rows: Sequence[StoredWrite]) -> list[tuple[str, str, Any]]:
    """LangGraph's ``(task_id, channel, value)`` for stored rows, resolving references with one blob query."""
    return [(task_id, channel, value) for task_id, channel, value, _path in await read_task_writes(ser, saver, rows)]


async def read_task_writes(
    ser: Serializer, saver: Saver, rows: Sequence[StoredWrite]
) -> list[tuple[str, str, Any, str]]:
    """:func:`read_writes` with each write's task path (LangGraph's ``~__pregel_pull, NODE`` for a node's task)."""
    flat: list[tuple[str, list[Any], str]] = []
    for w in rows:
        raw = ser.loads(unpack(w.data))
        if raw[0] == "p":  # a packed row: its entries, then the path
            flat.extend((w.task_id, entry, raw[1]) for entry in raw[2])
        else:  # a row of one write, its path last
            flat.append((w.task_id, raw[:-1], raw[-1]))
    wanted = {(d[2], d[1], d[3]) for _t, d, _p in flat if d[0] == "r"}
    blobs: dict[tuple[str, str, int], list[bytes]] = {}
    if wanted:
        found = await saver.get_blobs([BlobRange(m, ch, s, s) for m, ch, s in wanted])
        for blob in found:
            raw = ser.loads(unpack(blob.data))
            blobs[(blob.thread_id, blob.channel, blob.step)] = list(raw[3] if raw[0] == "d" else raw[1])
    out = []
    for task_id, d, path in flat:
        if d[0] == "w":
            out.append((task_id, d[1], d[2], path))
            continue
        if d[0] == "e":  # as LangGraph's own savers read an error back: its repr, as text
            out.append((task_id, d[1], f"{d[2]}({d[3]!r})", path))
            continue
        _r, channel, member, step, start, end, single = d[:7]
        items = blobs.get((member, channel, step))
        if items is None or end > len(items):
            raise CorruptCheckpointError(f"a write of task {task_id!r} refers to a missing value of {channel!r}")
        values = [ser.loads(item) for item in items[start:end]]
        out.append((task_id, channel, values[0] if single else values, path))
    return out
