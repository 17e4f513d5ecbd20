"""Reading an export into checked records, before the target is touched: an import's phases 1 and 2.

Phase 1 (:func:`parse_export`) reads every line, every field with its exact type, and decodes every body, blob and
pending write once (schema-free, bounded by its own length: :mod:`graphckpt.transfer.checks`). Phase 2
(:func:`check_export`) checks the file on its own: each thread's checkpoints form a chain, and each pending-writes line
is for its thread's last checkpoint. Both raise :class:`CorruptCheckpointError` naming the line or the checkpoint.
"""

from __future__ import annotations

import base64
import json
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from graphckpt.codec import Body, Codec
from graphckpt.compat._lgread import CompatBody
from graphckpt.errors import CorruptCheckpointError
from graphckpt.reader import RawCodec
from graphckpt.savers.base import Blob, Status, StoredCheckpoint, StoredWrite, WriteKind
from graphckpt.transfer import checks as check
from graphckpt.transfer.checks import cut
from graphckpt.transfer.lines import FORMAT, VERSION, Rename, renamed

__all__ = ["ExportFile", "WritesLine", "check_export", "corrupt", "parse_export"]

_STATUSES = ("running", "interrupted", "failed", "done", "partial")
_WRITE_KINDS = typing.get_args(WriteKind)  # the audit record's kinds too: a failed thread's attempts travel with it
_BLOB_KINDS = ("snapshot", "delta")  # an export carries a chunk as the deltas it packs


@dataclass(frozen=True, slots=True)
class WritesLine:
    """A ``writes`` line: the status, error and pending writes of a thread's last exported checkpoint."""

    checkpoint_id: str
    writes: list[StoredWrite]
    status: Status
    error: str | None


@dataclass(slots=True)
class ExportFile:
    """An export, parsed (phase 1): its checkpoints in file order, with their decoded bodies."""

    thread_id: str
    checkpoints: list[StoredCheckpoint]
    writes: dict[str, WritesLine]
    lines: dict[str, int]  # checkpoint id -> its line number, for messages
    bodies: dict[str, Body]  # checkpoint id -> decoded body
    kept: dict[str, list[StoredWrite]] = field(default_factory=dict)  # checkpoint id -> its kept writes


def corrupt(message: str) -> CorruptCheckpointError:
    """The error of a file that fails a check, its message on one line."""
    return CorruptCheckpointError(" ".join(message.split()))


# -- 1. parse ----------------------------------------------------------------------------------------------------------


def parse_export(lines: Iterable[str], rename: Rename | None = None) -> ExportFile:
    """Phase 1: the export's ``lines`` read into records, every field and byte checked, each thread id renamed by
    ``rename`` (a refusal makes the file corrupt). Raises :class:`CorruptCheckpointError` naming the line."""
    thread_id: str | None = None
    checkpoints: list[StoredCheckpoint] = []
    writes: dict[str, WritesLine] = {}
    numbers: dict[str, int] = {}
    bodies: dict[str, Body] = {}
    kept: dict[str, list[StoredWrite]] = {}
    codec = RawCodec()
    ended = False
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        if ended:
            raise corrupt(f"export line {number} comes after the end line")
        item, kind = _record(raw, number)
        if thread_id is None:
            _check_header(item, kind)
        try:
            if kind == "header":
                if thread_id is not None:
                    raise ValueError("a second header")
                thread_id = check.text(item["thread_id"], "thread_id")
                thread_id = rename(thread_id) if rename is not None else thread_id
            elif kind == "checkpoint":
                cp, body = _checkpoint_from(item, codec)
                if rename is not None:
                    cp, body = renamed(cp, body, rename)
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
            elif kind == "kept":  # after its checkpoint's line: the writes LangGraph keeps with every checkpoint
                _fields(item, ("thread_id", "checkpoint_id", "writes"))
                cid = check.text(item["checkpoint_id"], "checkpoint_id")
                if not checkpoints or checkpoints[-1].checkpoint_id != cid or cid in kept:
                    raise ValueError(f"kept writes of checkpoint {cut(cid)} do not follow its line")
                kept[cid] = _entries(item["writes"], codec)
            elif kind == "end":
                count = item["checkpoints"]
                if type(count) is not int or count != len(checkpoints):
                    raise ValueError(f"it counts {cut(count)} checkpoints, the file holds {len(checkpoints)}")
                ended = True
            else:
                raise ValueError(f"unknown record kind {cut(kind)}")
        except (KeyError, TypeError, ValueError) as exc:
            detail = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise corrupt(f"export line {number} has the wrong shape ({detail})") from None
    if thread_id is None:  # no line at all (a non-blank line before the header is refused above)
        raise corrupt("not a graphckpt thread export (it is empty)")
    if not ended:
        raise corrupt("the export is truncated (no end line)")
    if not checkpoints or checkpoints[-1].thread_id != thread_id:
        raise corrupt(f"the export does not end with a checkpoint of thread {cut(thread_id)}")
    return ExportFile(thread_id, checkpoints, writes, numbers, bodies, kept)


def _record(raw: str, number: int) -> tuple[Any, Any]:
    """Line ``number``'s JSON value and its ``kind``."""
    try:
        item = json.loads(raw)
        return item, item["kind"]
    except RecursionError:
        raise corrupt(f"export line {number} is not a graphckpt record (it nests too deeply)") from None
    except (ValueError, TypeError, KeyError) as exc:
        raise corrupt(f"export line {number} is not a graphckpt record ({check.clip(str(exc), 120)})") from None


def _check_header(item: dict[str, Any], kind: Any) -> None:
    """The first line is a header naming this format, in a version this graphckpt reads."""
    if kind != "header" or item.get("format") != FORMAT:
        raise corrupt("not a graphckpt thread export (bad header line)")
    version = item.get("version")
    if type(version) is not int or version != VERSION:
        newer = type(version) is int and version > VERSION
        raise corrupt(
            f"the export is {FORMAT} format version {check.clip(json.dumps(version))}; this graphckpt reads "
            f"version {VERSION}" + (" (it was written by a newer graphckpt: upgrade to import it)" if newer else "")
        )


def _fields(item: dict[str, Any], names: tuple[str, ...]) -> None:
    extra = sorted(set(item) - {"kind", *names})
    if extra:
        raise ValueError(f"unknown field {cut(extra[0])}")


_CHECKPOINT_FIELDS = (
    "thread_id",
    "checkpoint_id",
    "parent_thread_id",
    "parent_checkpoint_id",
    "step",
    "created_at",
    "status",
    "metadata",
    "body",
    "blobs",
)


def _checkpoint_from(item: dict[str, Any], codec: Codec) -> tuple[StoredCheckpoint, Body]:
    """A checkpoint line, every field checked and every byte decoded (see :mod:`graphckpt.transfer.checks`)."""
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
    blobs = _blobs_from(item["blobs"], thread_id, step, where)
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
    return cp, _checked_body(cp, codec, where)


def _blobs_from(entries: Any, thread_id: str, step: int, where: str) -> list[Blob]:
    """A checkpoint line's ``blobs``: ``[channel, kind, data]`` each, one per channel."""
    blobs: list[Blob] = []
    seen: set[str] = set()
    if type(entries) is not list:
        raise ValueError(f"the blobs of {where} are not a list")
    for entry in entries:
        if type(entry) is not list or len(entry) != 3:
            raise ValueError(f"a blob of {where} is not [channel, kind, data]")
        channel = check.text(entry[0], "a blob's channel")
        if entry[1] not in _BLOB_KINDS:
            raise ValueError(f"blob {cut(channel)} of {where} has an unknown kind {cut(entry[1])}")
        if channel in seen:
            raise ValueError(f"{where} has two blobs of channel {cut(channel)}")
        seen.add(channel)
        blobs.append(Blob(thread_id, channel, step, entry[1], _unb64(entry[2], f"blob {cut(channel)} of {where}")))
    return blobs


def _checked_body(cp: StoredCheckpoint, codec: Codec, where: str) -> Body:
    """``cp``'s body, decoded; its bytes, its carried fields and its blobs decode, and its channel table holds every
    blob at the place its kind says."""
    body_bytes, step, blobs = cp.body, cp.step, cp.blobs
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
    if isinstance(body, CompatBody):  # a LangGraph checkpoint (compat saver): each blob is one its body points at
        for blob in blobs:
            check.decode(blob.data, f"blob {cut(blob.channel)} of {where}", loads)
            if not body.points_at(blob.channel, step):
                raise ValueError(f"blob {cut(blob.channel)} of {where} is not one its body points at")
        return body
    for blob in blobs:
        value = check.decode(blob.data, f"blob {cut(blob.channel)} of {where}", loads)
        entry_ = body.channels.get(blob.channel)
        if blob.kind == "snapshot" and (entry_ is None or entry_[0] != step):
            raise ValueError(f"snapshot blob {cut(blob.channel)} of {where} is not in its body's channel table")
        if blob.kind == "delta" and (entry_ is None or entry_[0] >= step or not isinstance(value, list)):
            raise ValueError(f"delta blob {cut(blob.channel)} of {where} does not fit its body's channel table")
    return body


def _writes_from(item: dict[str, Any], codec: Codec) -> WritesLine:
    """A ``writes`` line, every pending write decoded."""
    _fields(item, ("thread_id", "checkpoint_id", "status", "error", "writes"))
    status = item["status"]
    if status not in _STATUSES:
        raise ValueError(f"unknown status {cut(status)}")
    error = check.optional_text(item["error"], "error")
    stored = _entries(item["writes"], codec)
    failed = {w.task_id for w in stored if w.kind == "error"}
    for w in stored:  # an empty result withdraws a failed task's early one (it runs again): nothing else is empty
        if not w.data and (w.index != 0 or w.task_id not in failed):
            raise ValueError(
                f"pending write ({cut(w.task_id)}, result, {w.index}) is empty, and only the result 0 of a task that "
                "failed (an error write) may be"
            )
    return WritesLine(check.text(item["checkpoint_id"], "checkpoint_id"), stored, status, error)


def _entries(entries: Any, codec: Codec) -> list[StoredWrite]:
    """Writes as a line carries them: ``[task_id, kind, index, data]`` each, data decoded as a check."""
    if type(entries) is not list:
        raise ValueError("writes is not a list")
    stored: list[StoredWrite] = []
    keys: set[tuple[str, str, int]] = set()
    for entry in entries:
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
        if data or kind != "result":
            check.decode(data, what, codec.serde.loads)
        stored.append(StoredWrite(task_id, kind, index, data))
    return stored


def _unb64(data: Any, what: str) -> bytes:
    """Bytes as the file carries them (strict base64)."""
    if type(data) is not str:
        raise ValueError(f"{what} must be base64 text")
    try:
        return base64.b64decode(data, validate=True)
    except ValueError:
        raise ValueError(f"{what} is not valid base64") from None


# -- 2. the export on its own ------------------------------------------------------------------------------------------


def check_export(export: ExportFile) -> None:
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
                raise corrupt(f"{where} does not follow checkpoint {cut(previous.checkpoint_id)}")
        elif cp.parent_checkpoint_id is None and (cp.step != 0 or cp.parent_thread_id is not None):
            raise corrupt(f"{where} has no parent but is not a first step")
        elif cp.parent_checkpoint_id is not None and cp.parent_thread_id is None:
            raise corrupt(f"{where} names a parent checkpoint but not its thread")
        last[cp.thread_id] = cp
    for tid, line in export.writes.items():
        if tid not in last or last[tid].checkpoint_id != line.checkpoint_id:
            raise corrupt(f"the export's pending writes of thread {cut(tid)} are not for its last checkpoint")
