"""Moving a thread, with its whole lineage, between savers as JSON lines.

The export is raw: stored bytes travel base64-encoded and unchanged, so no state schema is needed on either side and
a thread imported elsewhere resumes exactly where it was. (A chunk travels as the deltas it packs, each with the
checkpoint of its step.) Lines, in order::

    {"kind": "header", "format": "graphckpt-thread", "version": 1, "thread_id": ...}
    {"kind": "checkpoint", ...}   one per checkpoint, oldest first: ancestors' (up to each fork point) then the thread's
    {"kind": "writes", ...}       the pending writes of each thread's head, with its status and error
    {"kind": "end", "checkpoints": N}

An export is untrusted input. Import checks all of it before it writes anything (see :func:`import_thread` and
:mod:`graphckpt.importcheck`), then commits the new checkpoints in order through the normal compare-and-set path.
A checkpoint the target already has is skipped only when it is identical there, every field and every blob (so two
forks of one thread can be imported one after the other); anything else at that place is a
:class:`ThreadConflictError`, as is a file that would change an existing thread's status or pending writes.

**Thread ids.** A file names threads as its writer chose to (``rename`` on export: a server writes the ids a token
sees, not its namespace-prefixed stored ones) and the importer maps them into its own naming (``rename`` on import).
A thread id appears in: the header; each checkpoint's ``thread_id`` and ``parent_thread_id``; the lineage in each
checkpoint's body (which thread stores which steps); the links of its metadata (:data:`RENAMED_LINKS`: a subgraph
child's parent, a fork's source); each ``writes`` line. A child thread of a subgraph is named after its parent
(``parent|node:task``), so a prefix mapping keeps it one. Nothing else in a file names a thread.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import typing
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgpack

from graphckpt import ids
from graphckpt import importcheck as check
from graphckpt.codec import Body, Codec, split_chunk
from graphckpt.errors import CorruptCheckpointError, GraphckptError, ThreadConflictError, ThreadNotFoundError
from graphckpt.importcheck import cut
from graphckpt.reader import RawCodec
from graphckpt.savers.base import (
    Blob,
    BlobRange,
    Saver,
    Status,
    StoredCheckpoint,
    StoredWrite,
    WriteKind,
    json_equal,
)
from graphckpt.store import lineage_segments

__all__ = ["RENAMED_LINKS", "Rename", "export_thread", "import_thread"]

_FORMAT, _VERSION = "graphckpt-thread", 1

_BODIES = RawCodec()
"""Reads a stored body's structure (lineage, channel table) without the schema: nothing it names is looked up."""

Rename = Callable[[str], str]
"""Maps a thread id from one naming to another (stored ids to a file's, a file's to stored ones); raises
``ValueError`` (saying why) for an id that has no name on the other side."""

RENAMED_LINKS = ("subgraph", "forked_from")
"""The checkpoint metadata keys whose ``thread_id`` names another thread (a subgraph child's parent, a fork's
source): renamed with the checkpoint's own ids."""


async def export_thread(saver: Saver, thread_id: str, *, rename: Rename | None = None) -> AsyncIterator[str]:
    """Yield the JSON lines of ``thread_id`` and every ancestor checkpoint its lineage needs, each thread id
    written as ``rename`` names it (default: as stored). A ``rename`` refusal is a :class:`GraphckptError`."""

    def named(stored: str) -> str:
        if rename is None:
            return stored
        try:
            return rename(stored)
        except ValueError as exc:
            raise GraphckptError(f"cannot export thread {cut(thread_id)}: {exc}") from None

    record = await saver.get_thread(thread_id)
    if record is None:
        raise ThreadNotFoundError(f"no thread {thread_id!r}")
    head = await saver.get_checkpoint(thread_id, record.head_checkpoint_id)
    if head is None:
        raise ThreadNotFoundError(f"thread {thread_id!r} has no head checkpoint")
    body = _BODIES.decode_body(head)
    yield _line({"kind": "header", "format": _FORMAT, "version": _VERSION, "thread_id": named(thread_id)})
    segments = list(lineage_segments(body.lineage, head.step + 1))
    count = 0
    for tid, first, upper in reversed(segments):
        last = upper - 1
        cps = sorted(await saver.list_checkpoints(tid, before_step=upper), key=lambda c: c.step)
        cps = [cp for cp in cps if cp.step >= first]
        channels = sorted({name for cp in cps for name in _channels(cp)})
        blobs = await saver.get_blobs([BlobRange(tid, ch, first, last) for ch in channels]) if channels else []
        by_step: dict[int, list[Blob]] = {}
        for blob in blobs:
            for part in _unpacked(blob, last) if blob.kind == "chunk" else (blob,):
                by_step.setdefault(part.step, []).append(part)
        for cp in cps:
            count += 1
            if rename is not None:
                cp, _ = _renamed(cp, _BODIES.decode_body(cp), named)
            yield _line(_checkpoint_json(cp, by_step.get(cp.step, [])))
        if cps and tid == thread_id:
            writes = await saver.get_writes(tid, cps[-1].checkpoint_id)
            line = {"status": record.status, "error": record.error, "writes": [_write_json(w) for w in writes]}
        elif cps:  # an ancestor, up to the fork point: its own run stays here
            line = {"status": "partial", "error": None, "writes": []}
        else:
            continue
        yield _line({"kind": "writes", "thread_id": named(tid), "checkpoint_id": cps[-1].checkpoint_id, **line})
    yield _line({"kind": "end", "checkpoints": count})


def _renamed(cp: StoredCheckpoint, body: Body, rename: Rename) -> tuple[StoredCheckpoint, Body]:
    """``cp`` (with its decoded ``body``) with every thread id it names renamed: its own, its parent's, its body's
    lineage (the body's other bytes unchanged) and the links of its metadata."""
    thread_id = rename(cp.thread_id)
    lineage = [(rename(tid), first) for tid, first in body.lineage]
    metadata = dict(cp.metadata)
    for key in RENAMED_LINKS:
        link = metadata.get(key)
        if isinstance(link, Mapping) and isinstance(link.get("thread_id"), str):
            metadata[key] = {**link, "thread_id": rename(link["thread_id"])}
    renamed = dataclasses.replace(
        cp,
        thread_id=thread_id,
        parent_thread_id=None if cp.parent_thread_id is None else rename(cp.parent_thread_id),
        metadata=metadata,
        body=cp.body if lineage == body.lineage else _with_lineage(cp.body, lineage),
        blobs=[dataclasses.replace(b, thread_id=thread_id) for b in cp.blobs],
    )
    return renamed, dataclasses.replace(body, lineage=lineage)


def _with_lineage(data: bytes, lineage: list[tuple[str, int]]) -> bytes:
    """The encoded body ``data`` with its lineage entry replaced and every other byte kept (the entries' raw
    encodings are copied, not decoded and encoded again: what the file carries stays what was stored)."""
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
            msgpack.packb([[t, s] for t, s in lineage], use_bin_type=True) if key == "lin" else data[middle:end]
        )
    return b"".join(parts)


def _write_json(write: StoredWrite) -> list[Any]:
    return [write.task_id, write.kind, write.index, _b64(write.data)]


async def import_thread(saver: Saver, lines: Iterable[str], *, rename: Rename | None = None) -> str:
    """Store the exported thread in ``saver``; returns its thread id. Nothing that exists is changed. ``rename``
    maps the file's thread ids to the ones stored (default: as written); an id it refuses makes the file corrupt.

    Four phases; only the last one writes, so a file that fails any check changes nothing:

    1. :func:`_parse_export`: every line, every field with its exact type, every body, blob and pending write
       decoded once (schema-free, bounded by its own length: :mod:`graphckpt.importcheck`);
    2. :func:`_check_export`: the file on its own: unique checkpoint ids, each thread's chain (parent, step + 1),
       each body's channel table and lineage against the chain, the pending writes against the thread's last
       checkpoint;
    3. :func:`_check_target` (reads only): parents the file does not hold exist in the target; a checkpoint the
       target already has is identical there (every field, every blob) or the import is a conflict; a thread that
       exists continues from its head; an existing thread's status and pending writes are never replaced;
    4. :func:`_apply`: commit the new checkpoints in order, then restore the status and pending writes of the
       threads whose head the import wrote.
    """
    export = _parse_export(lines, rename)
    _check_export(export)
    plan = await _check_target(saver, export)
    await _apply(saver, plan)
    return export.thread_id


_STATUSES = ("running", "interrupted", "failed", "done", "partial")
_WRITE_KINDS = typing.get_args(WriteKind)  # the audit record's kinds too: a failed thread's attempts travel with it
_BLOB_KINDS = ("snapshot", "delta")  # an export carries a chunk as the deltas it packs


@dataclass(frozen=True, slots=True)
class _Writes:
    """A ``writes`` line: the status, error and pending writes of a thread's last exported checkpoint."""

    checkpoint_id: str
    writes: list[StoredWrite]
    status: Status
    error: str | None


@dataclass(slots=True)
class _Export:
    thread_id: str
    checkpoints: list[StoredCheckpoint]
    writes: dict[str, _Writes]
    lines: dict[str, int]  # checkpoint id -> its line number, for messages
    bodies: dict[str, Body]  # checkpoint id -> decoded body


@dataclass(slots=True)
class _Plan:
    new: list[StoredCheckpoint] = field(default_factory=list)
    restore: dict[str, _Writes] = field(default_factory=dict)


def _corrupt(message: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(" ".join(message.split()))


# -- 1. parse ----------------------------------------------------------------------------------------------------------


def _parse_export(lines: Iterable[str], rename: Rename | None = None) -> _Export:
    thread_id: str | None = None
    checkpoints: list[StoredCheckpoint] = []
    writes: dict[str, _Writes] = {}
    numbers: dict[str, int] = {}
    bodies: dict[str, Body] = {}
    codec = RawCodec()
    ended = False
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        if ended:
            raise _corrupt(f"export line {number} comes after the end line")
        try:
            item = json.loads(raw)
            kind = item["kind"]
        except RecursionError:
            raise _corrupt(f"export line {number} is not a graphckpt record (it nests too deeply)") from None
        except (ValueError, TypeError, KeyError) as exc:
            raise _corrupt(f"export line {number} is not a graphckpt record ({check.clip(str(exc), 120)})") from None
        if thread_id is None and (kind != "header" or item.get("format") != _FORMAT):
            raise _corrupt("not a graphckpt thread export (bad header line)")
        if thread_id is None and (type(item.get("version")) is not int or item["version"] != _VERSION):
            version = item.get("version")
            newer = type(version) is int and version > _VERSION
            raise _corrupt(
                f"the export is {_FORMAT} format version {check.clip(json.dumps(version))}; this graphckpt reads "
                f"version {_VERSION}"
                + (" (it was written by a newer graphckpt: upgrade to import it)" if newer else "")
            )
        try:
            if kind == "header":
                if thread_id is not None:
                    raise ValueError("a second header")
                thread_id = check.text(item["thread_id"], "thread_id")
                thread_id = rename(thread_id) if rename is not None else thread_id
            elif kind == "checkpoint":
                cp, body = _checkpoint_from(item, codec)
                if rename is not None:
                    cp, body = _renamed(cp, body, rename)
                if cp.checkpoint_id in numbers:
                    raise ValueError(
                        f"checkpoint {cut(cp.checkpoint_id)} is also on line {numbers[cp.checkpoint_id]}: an export "
                        "holds each checkpoint once"
                    )
                numbers[cp.checkpoint_id], bodies[cp.checkpoint_id] = number, body
                checkpoints.append(cp)
            elif kind == "writes":
                tid = check.text(item["thread_id"], "thread_id")
                tid = rename(tid) if rename is not None else tid
                if tid in writes:
                    raise ValueError(f"a second writes line for thread {cut(tid)}")
                writes[tid] = _writes_from(item, codec)
            elif kind == "end":
                count = item["checkpoints"]
                if type(count) is not int or count != len(checkpoints):
                    raise ValueError(f"it counts {cut(count)} checkpoints, the file holds {len(checkpoints)}")
                ended = True
            else:
                raise ValueError(f"unknown record kind {cut(kind)}")
        except (KeyError, TypeError, ValueError) as exc:
            detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise _corrupt(f"export line {number} has the wrong shape ({detail})") from None
    if thread_id is None:  # no line at all (a non-blank line before the header is refused above)
        raise _corrupt("not a graphckpt thread export (it is empty)")
    if not ended:
        raise _corrupt("the export is truncated (no end line)")
    if not checkpoints or checkpoints[-1].thread_id != thread_id:
        raise _corrupt(f"the export does not end with a checkpoint of thread {cut(thread_id)}")
    return _Export(thread_id, checkpoints, writes, numbers, bodies)


def _fields(item: dict[str, Any], names: tuple[str, ...]) -> None:
    extra = sorted(set(item) - {"kind", *names})
    if extra:
        raise ValueError(f"unknown field {cut(extra[0])}")


_CHECKPOINT_FIELDS = (
    "thread_id", "checkpoint_id", "parent_thread_id", "parent_checkpoint_id", "step", "created_at", "status",
    "metadata", "body", "blobs",
)  # fmt: skip


def _checkpoint_from(item: dict[str, Any], codec: Codec) -> tuple[StoredCheckpoint, Body]:
    """A checkpoint line, every field checked and every byte decoded (see :mod:`graphckpt.importcheck`)."""
    _fields(item, _CHECKPOINT_FIELDS)
    thread_id = check.text(item["thread_id"], "thread_id")
    checkpoint_id = check.text(item["checkpoint_id"], "checkpoint_id")
    parent_thread = item["parent_thread_id"]
    parent_thread = None if parent_thread is None else check.text(parent_thread, "parent_thread_id")
    parent_id = item["parent_checkpoint_id"]
    parent_id = None if parent_id is None else check.text(parent_id, "parent_checkpoint_id")
    step = check.step(item["step"])
    status = item["status"]
    if status not in _STATUSES:
        raise ValueError(f"unknown status {cut(status)}")
    where = f"checkpoint {cut(checkpoint_id)}"
    body_bytes = _unb64(item["body"], f"the body of {where}")
    blobs: list[Blob] = []
    seen: set[str] = set()
    if type(item["blobs"]) is not list:
        raise ValueError(f"the blobs of {where} are not a list")
    for entry in item["blobs"]:
        if type(entry) is not list or len(entry) != 3:
            raise ValueError(f"a blob of {where} is not [channel, kind, data]")
        channel = check.text(entry[0], "a blob's channel")
        if entry[1] not in _BLOB_KINDS:
            raise ValueError(f"blob {cut(channel)} of {where} has an unknown kind {cut(entry[1])}")
        if channel in seen:
            raise ValueError(f"{where} has two blobs of channel {cut(channel)}")
        seen.add(channel)
        blobs.append(Blob(thread_id, channel, step, entry[1], _unb64(entry[2], f"blob {cut(channel)} of {where}")))
    cp = StoredCheckpoint(
        thread_id=thread_id,
        checkpoint_id=checkpoint_id,
        parent_thread_id=parent_thread,
        parent_checkpoint_id=parent_id,
        step=step,
        created_at=check.timestamp(item["created_at"]),
        status=status,
        metadata=check.metadata(item["metadata"]),
        body=body_bytes,
        blobs=blobs,
    )
    loads = codec.serde.loads
    check.decode(body_bytes, f"the body of {where}", loads)
    try:
        body = codec.decode_body(cp)
    except CorruptCheckpointError as exc:
        raise ValueError(str(exc)) from None
    for name, data in body.inline.items():
        check.text(name, f"a channel name in the body of {where}")
        check.decode(data, f"field {cut(name)} in the body of {where}", loads)
    for name, (base, deltas) in body.channels.items():
        check.text(name, f"a channel name in the body of {where}")
        if not 0 <= base <= step or deltas < 0:
            raise ValueError(f"the body of {where} has channel {cut(name)} at step {base} (+{deltas})")
    for blob in blobs:
        value = check.decode(blob.data, f"blob {cut(blob.channel)} of {where}", loads)
        entry_ = body.channels.get(blob.channel)
        if blob.kind == "snapshot" and (entry_ is None or entry_[0] != step):
            raise ValueError(f"snapshot blob {cut(blob.channel)} of {where} is not in its body's channel table")
        if blob.kind == "delta" and (entry_ is None or entry_[0] >= step or not isinstance(value, list)):
            raise ValueError(f"delta blob {cut(blob.channel)} of {where} does not fit its body's channel table")
    return cp, body


def _writes_from(item: dict[str, Any], codec: Codec) -> _Writes:
    _fields(item, ("thread_id", "checkpoint_id", "status", "error", "writes"))
    status = item["status"]
    if status not in _STATUSES:
        raise ValueError(f"unknown status {cut(status)}")
    error = check.optional_text(item["error"], "error")
    if type(item["writes"]) is not list:
        raise ValueError("writes is not a list")
    stored: list[StoredWrite] = []
    keys: set[tuple[str, str, int]] = set()
    for entry in item["writes"]:
        if type(entry) is not list or len(entry) != 4:
            raise ValueError("a pending write is not [task_id, kind, index, data]")
        task_id, kind, index = check.text(entry[0], "a pending write's task_id"), entry[1], check.index(entry[2])
        if kind not in _WRITE_KINDS:
            raise ValueError(f"unknown pending write kind {cut(kind)}")
        if (task_id, kind, index) in keys:
            raise ValueError(f"pending write ({cut(task_id)}, {kind}, {index}) appears twice")
        keys.add((task_id, kind, index))
        what = f"pending write ({cut(task_id)}, {kind}, {index})"
        data = _unb64(entry[3], what)
        if data or kind != "result":  # an empty result: a withdrawn one (a reducer refused it; the task runs again)
            check.decode(data, what, codec.serde.loads)
        stored.append(StoredWrite(task_id, kind, index, data))
    return _Writes(check.text(item["checkpoint_id"], "checkpoint_id"), stored, status, error)


def _unb64(data: Any, what: str) -> bytes:
    if type(data) is not str:
        raise ValueError(f"{what} must be base64 text")
    try:
        return base64.b64decode(data, validate=True)
    except ValueError:
        raise ValueError(f"{what} is not valid base64") from None


# -- 2. the export on its own ------------------------------------------------------------------------------------------


def _check_export(export: _Export) -> None:
    """Each thread's checkpoints form a chain in the file (parent = the one before, step + 1); a thread's first one
    starts the thread (step 0, no parent) or names a parent (checked in phase 3); every pending-writes line is for
    the last exported checkpoint of its thread."""
    last: dict[str, StoredCheckpoint] = {}
    for cp in export.checkpoints:
        where = f"the export's checkpoint {cut(cp.checkpoint_id)} of thread {cut(cp.thread_id)}"
        previous = last.get(cp.thread_id)
        if previous is not None:
            ok = cp.parent_thread_id == cp.thread_id and cp.parent_checkpoint_id == previous.checkpoint_id
            if not ok or cp.step != previous.step + 1:
                raise _corrupt(f"{where} does not follow checkpoint {cut(previous.checkpoint_id)}")
        elif cp.parent_checkpoint_id is None and (cp.step != 0 or cp.parent_thread_id is not None):
            raise _corrupt(f"{where} has no parent but is not a first step")
        elif cp.parent_checkpoint_id is not None and cp.parent_thread_id is None:
            raise _corrupt(f"{where} names a parent checkpoint but not its thread")
        last[cp.thread_id] = cp
    for tid, line in export.writes.items():
        if tid not in last or last[tid].checkpoint_id != line.checkpoint_id:
            raise _corrupt(f"the export's pending writes of thread {cut(tid)} are not for its last checkpoint")


# -- 3. against the target (reads only) --------------------------------------------------------------------------------


async def _check_target(saver: Saver, export: _Export) -> _Plan:
    """What to write, found by reading the target only; raises before anything is written."""
    plan = _Plan()
    steps: dict[tuple[str, str], int] = {}
    lineages: dict[tuple[str, str], list[tuple[str, int]]] = {}
    existing: dict[str, list[tuple[StoredCheckpoint, StoredCheckpoint]]] = {}  # thread -> (exported, stored)
    created: set[str] = set()  # threads the import creates or moves the head of
    checked_heads: set[str] = set()
    codec = RawCodec()
    for cp in export.checkpoints:
        where = f"checkpoint {cut(cp.checkpoint_id)} of thread {cut(cp.thread_id)}"
        body = export.bodies[cp.checkpoint_id]
        parent_key = (cp.parent_thread_id or cp.thread_id, cp.parent_checkpoint_id or "")
        if cp.parent_checkpoint_id is None:
            expected = [(cp.thread_id, 0)]
        else:
            if parent_key not in steps:  # not in the file: the target must hold it
                parent = await saver.get_checkpoint(*parent_key)
                if parent is None:
                    raise _corrupt(
                        f"the export's {where} has a parent ({cut(parent_key[0])}, {cut(parent_key[1])}) that "
                        "neither the export nor the target holds"
                    )
                steps[parent_key] = parent.step
                lineages[parent_key] = codec.decode_body(parent).lineage
            if cp.step != steps[parent_key] + 1:
                raise _corrupt(f"the export's {where} is not one step after its parent")
            above = lineages[parent_key]
            expected = above if parent_key[0] == cp.thread_id else [(cp.thread_id, cp.step), *above]
        if body.lineage != expected:
            raise _corrupt(f"the export's {where} records a lineage that is not its chain of parents")
        steps[(cp.thread_id, cp.checkpoint_id)], lineages[(cp.thread_id, cp.checkpoint_id)] = cp.step, expected
        stored = await saver.get_checkpoint(cp.thread_id, cp.checkpoint_id)
        if stored is not None:
            if cp.thread_id in created:
                raise _corrupt(f"the target already has {where}, which follows checkpoints it does not have")
            _same_checkpoint(cp, stored)
            existing.setdefault(cp.thread_id, []).append((cp, stored))
            continue
        if cp.thread_id not in checked_heads:  # its first checkpoint the target lacks: the import commits from here
            checked_heads.add(cp.thread_id)
            record = await saver.get_thread(cp.thread_id)
            if record is not None and record.head_checkpoint_id != cp.parent_checkpoint_id:
                raise ThreadConflictError(
                    f"thread {cut(cp.thread_id)} exists in the target and has moved past the exported lineage "
                    "(nothing was imported)"
                )
        created.add(cp.thread_id)
        plan.new.append(cp)
    for thread_id, pairs in existing.items():
        await _same_blobs(saver, thread_id, pairs)
    for tid, line in export.writes.items():
        if tid != export.thread_id:  # an ancestor is partial whatever the file says (older exports said running)
            line = dataclasses.replace(line, status="partial", error=None, writes=[])
        if tid in created or (tid == export.thread_id and await _completes_partial(saver, tid, line)):
            plan.restore[tid] = line
        elif tid == export.thread_id:
            await _same_status(saver, tid, line)
        # else: an ancestor thread the target already has: its own status and pending writes stand
    return plan


def _same_checkpoint(cp: StoredCheckpoint, stored: StoredCheckpoint) -> None:
    """Every stored field of a checkpoint the target already has equals the export's (the blobs: see
    :func:`_same_blobs`)."""
    same = (
        stored.parent_thread_id == cp.parent_thread_id
        and stored.parent_checkpoint_id == cp.parent_checkpoint_id
        and stored.step == cp.step
        and stored.created_at == cp.created_at
        and stored.status == cp.status
        and stored.body == cp.body
        and json_equal(dict(stored.metadata), dict(cp.metadata))
    )
    if not same:
        raise _conflict(cp, "with other content")


def _conflict(cp: StoredCheckpoint, how: str) -> ThreadConflictError:
    return ThreadConflictError(
        f"thread {cut(cp.thread_id)} in the target already has checkpoint {cut(cp.checkpoint_id)} {how} than the "
        "export's (nothing was imported)"
    )


async def _same_blobs(saver: Saver, thread_id: str, pairs: list[tuple[StoredCheckpoint, StoredCheckpoint]]) -> None:
    """The blobs the target stores at each of these checkpoints' steps (chunks split into their deltas, as export
    does) are exactly the export's."""
    top = max(cp.step for cp, _ in pairs)
    channels = sorted({b.channel for cp, _ in pairs for b in cp.blobs} | {n for cp, _ in pairs for n in _channels(cp)})
    found: dict[int, set[tuple[str, str, bytes]]] = {}
    if channels:
        for blob in await saver.get_blobs([BlobRange(thread_id, ch, 0, top) for ch in channels]):
            for part in _unpacked(blob, top) if blob.kind == "chunk" else (blob,):
                found.setdefault(part.step, set()).add((part.channel, part.kind, part.data))
    for cp, _stored in pairs:
        if found.get(cp.step, set()) != {(b.channel, b.kind, b.data) for b in cp.blobs}:
            raise _conflict(cp, "with other stored values")


async def _completes_partial(saver: Saver, thread_id: str, line: _Writes) -> bool:
    """The target holds ``thread_id`` as a ``partial`` ancestor ending at the exported head: the file brings the
    thread itself, whose status and pending writes then replace the placeholder's (a partial thread has none)."""
    record = await saver.get_thread(thread_id)
    return (
        record is not None
        and record.status == "partial"
        and record.head_checkpoint_id == line.checkpoint_id
        and line.status != "partial"
        and not await saver.get_writes(thread_id, line.checkpoint_id)
    )


async def _same_status(saver: Saver, thread_id: str, line: _Writes) -> None:
    """An existing thread (every checkpoint of it already in the target) keeps its status and pending writes: the
    import goes through only when they are the export's, or when the target moved on past the exported head."""
    record = await saver.get_thread(thread_id)
    if record is None or record.head_checkpoint_id != line.checkpoint_id:
        return
    stored = sorted((w.task_id, w.kind, w.index, w.data) for w in await saver.get_writes(thread_id, line.checkpoint_id))
    wanted = sorted((w.task_id, w.kind, w.index, w.data) for w in line.writes)
    if record.status != line.status or record.error != line.error or stored != wanted:
        raise ThreadConflictError(
            f"thread {cut(thread_id)} exists in the target at checkpoint {cut(line.checkpoint_id)} with another "
            f"status or other pending writes ({record.status} there, {line.status} in the export); an import never "
            "changes an existing thread (nothing was imported; delete the thread first to replace it)"
        )


# -- 4. write ----------------------------------------------------------------------------------------------------------


async def _apply(saver: Saver, plan: _Plan) -> None:
    heads: dict[str, str] = {}
    run_ids: dict[str, str] = {}
    for cp in plan.new:
        record = await saver.get_thread(cp.thread_id) if cp.thread_id not in run_ids else None
        if record is not None:  # an existing thread the import continues (its head is this checkpoint's parent)
            run_id = ids.new_id()
            await saver.claim(
                cp.thread_id, expected_head=record.head_checkpoint_id, expected_run_id=record.run_id, run_id=run_id
            )
            run_ids[cp.thread_id], heads[cp.thread_id] = run_id, record.head_checkpoint_id
        run_id = run_ids.setdefault(cp.thread_id, ids.new_id())
        await saver.commit(cp, expected_head=heads.get(cp.thread_id), run_id=run_id)
        heads[cp.thread_id] = cp.checkpoint_id
    for tid, line in plan.restore.items():
        if tid not in run_ids:  # a partial thread the file completes: its run id is the one it was imported with
            record = await saver.get_thread(tid)
            assert record is not None
            run_ids[tid] = record.run_id
        await saver.put_writes(
            tid, line.checkpoint_id, line.writes, run_id=run_ids[tid], status=line.status, error=line.error
        )


def _unpacked(chunk: Blob, last: int) -> list[Blob]:
    """The deltas a chunk packs (each one's bytes unchanged), up to step ``last``. Each travels with the checkpoint
    of its own step: a chunk can reach past the end of the exported segment (a fork point), and the target may
    already hold the checkpoint at the chunk's first step (an earlier import), which the import skips."""
    try:
        deltas = split_chunk(chunk.data)
    except ValueError as exc:
        raise CorruptCheckpointError(
            f"thread {chunk.thread_id!r} has a corrupt chunk of {chunk.channel!r} at step {chunk.step} ({exc})",
            thread_id=chunk.thread_id,
        ) from None
    return [Blob(chunk.thread_id, chunk.channel, step, "delta", data) for step, data in deltas if step <= last]


def _channels(cp: StoredCheckpoint) -> list[str]:
    return list(_BODIES.decode_body(cp).channels)


def _checkpoint_json(cp: StoredCheckpoint, blobs: list[Blob]) -> dict[str, Any]:
    try:
        metadata = dict(cp.metadata)
    except CorruptCheckpointError as exc:  # a tampered row
        raise CorruptCheckpointError(
            f"checkpoint {cut(cp.checkpoint_id)} of thread {cut(cp.thread_id)}: {exc}",
            thread_id=cp.thread_id,
            checkpoint_id=cp.checkpoint_id,
        ) from None
    return {
        "kind": "checkpoint",
        "thread_id": cp.thread_id,
        "checkpoint_id": cp.checkpoint_id,
        "parent_thread_id": cp.parent_thread_id,
        "parent_checkpoint_id": cp.parent_checkpoint_id,
        "step": cp.step,
        "created_at": cp.created_at,
        "status": cp.status,
        "metadata": metadata,
        "body": _b64(cp.body),
        "blobs": [[b.channel, b.kind, _b64(b.data)] for b in blobs],
    }


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _line(item: dict[str, Any]) -> str:
    try:
        return json.dumps(item, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise GraphckptError(f"cannot export: {exc}") from None
