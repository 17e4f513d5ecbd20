"""Moving a thread, with its whole lineage, between savers as JSON lines.

The export is raw: stored bytes travel base64-encoded and unchanged, so no state schema is needed on either side and
a thread imported elsewhere resumes exactly where it was. (A chunk travels as the deltas it packs, each with the
checkpoint of its step.) Lines, in order::

    {"kind": "header", "format": "graphckpt-thread", "version": 1, "thread_id": ...}
    {"kind": "checkpoint", ...}   one per checkpoint, oldest first: ancestors' (up to each fork point) then the thread's
    {"kind": "writes", ...}       the pending writes of each thread's head, with its status and error
    {"kind": "end", "checkpoints": N}

Import commits the checkpoints in order through the normal compare-and-set path. Checkpoints that already exist in
the target with the same id are skipped (so two forks of one thread can be imported one after the other); a
different checkpoint at the same place is a :class:`ThreadConflictError`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

import msgpack

from graphckpt import ids
from graphckpt.codec import split_chunk
from graphckpt.errors import CorruptCheckpointError, GraphckptError, ThreadConflictError, ThreadNotFoundError
from graphckpt.savers.base import Blob, BlobRange, Saver, Status, StoredCheckpoint, StoredWrite

__all__ = ["export_thread", "import_thread"]

_FORMAT, _VERSION = "graphckpt-thread", 1


async def export_thread(saver: Saver, thread_id: str) -> AsyncIterator[str]:
    """Yield the JSON lines of ``thread_id`` and every ancestor checkpoint its lineage needs."""
    record = await saver.get_thread(thread_id)
    if record is None:
        raise ThreadNotFoundError(f"no thread {thread_id!r}")
    head = await saver.get_checkpoint(thread_id, record.head_checkpoint_id)
    if head is None:
        raise ThreadNotFoundError(f"thread {thread_id!r} has no head checkpoint")
    lineage = _lineage(head)
    yield _line({"kind": "header", "format": _FORMAT, "version": _VERSION, "thread_id": thread_id})
    segments: list[tuple[str, int, int]] = []
    upper = head.step
    for tid, first in lineage:
        segments.append((tid, first, upper))
        upper = first - 1
    count = 0
    for tid, first, last in reversed(segments):
        cps = sorted(await saver.list_checkpoints(tid, before_step=last + 1), key=lambda c: c.step)
        cps = [cp for cp in cps if cp.step >= first]
        channels = sorted({name for cp in cps for name in _channels(cp)})
        blobs = await saver.get_blobs([BlobRange(tid, ch, first, last) for ch in channels]) if channels else []
        by_step: dict[int, list[Blob]] = {}
        for blob in blobs:
            for part in _unpacked(blob, last) if blob.kind == "chunk" else (blob,):
                by_step.setdefault(part.step, []).append(part)
        for cp in cps:
            count += 1
            yield _line(_checkpoint_json(cp, by_step.get(cp.step, [])))
        if cps:
            writes = await saver.get_writes(tid, cps[-1].checkpoint_id)
            owner = await saver.get_thread(tid)
            yield _line(
                {
                    "kind": "writes",
                    "thread_id": tid,
                    "checkpoint_id": cps[-1].checkpoint_id,
                    "status": owner.status if owner is not None and tid == thread_id else cps[-1].status,
                    "error": owner.error if owner is not None and tid == thread_id else None,
                    "writes": [[w.task_id, w.kind, w.index, _b64(w.data)] for w in writes] if tid == thread_id else [],
                }
            )
    yield _line({"kind": "end", "checkpoints": count})


async def import_thread(saver: Saver, lines: Iterable[str]) -> str:
    """Store the exported thread in ``saver``; returns its thread id. Nothing is overwritten.

    The whole export is read and checked first (header, every field, base64, statuses, each checkpoint's parent and
    step against the one before it in its thread, the end line's count); only then is anything written, so a
    truncated or tampered export changes nothing. Checkpoints the target already has are skipped; each thread's
    status, error and pending writes are restored when the target's head is the exported one."""
    thread_id, checkpoints, writes_lines = _parse_export(lines)
    steps: dict[tuple[str, str], int] = {}
    last: dict[str, StoredCheckpoint] = {}
    for cp in checkpoints:
        await _check_parent(saver, cp, last.get(cp.thread_id), steps)
        steps[(cp.thread_id, cp.checkpoint_id)] = cp.step
        last[cp.thread_id] = cp
    for tid, (cid, _writes, _status, _error) in writes_lines.items():
        if tid not in last or last[tid].checkpoint_id != cid:
            raise CorruptCheckpointError(
                f"the export's pending writes of thread {tid!r} are not for its last checkpoint"
            )
    await _check_targets(saver, checkpoints)
    heads: dict[str, str] = {}
    run_ids: dict[str, str] = {}
    for cp in checkpoints:
        await _import_checkpoint(saver, cp, heads, run_ids)
    for tid, (cid, writes, status, error) in writes_lines.items():
        record = await saver.get_thread(tid)
        if record is None or record.head_checkpoint_id != cid:
            continue  # the target moved on (or never had it): its own status stands
        run_id = run_ids.get(tid)
        if run_id is None:  # the checkpoints were there already (an earlier, interrupted import): take it over
            run_id = ids.new_id()
            await saver.claim(tid, expected_head=cid, expected_run_id=record.run_id, run_id=run_id)
        await saver.put_writes(tid, cid, writes, run_id=run_id, status=status, error=error)
    return thread_id


_STATUSES = ("running", "interrupted", "failed", "done")
_WRITE_KINDS = ("result", "effect", "interrupt", "resume", "error")


def _parse_export(
    lines: Iterable[str],
) -> tuple[str, list[StoredCheckpoint], dict[str, tuple[str, list[StoredWrite], Status, str | None]]]:
    thread_id: str | None = None
    checkpoints: list[StoredCheckpoint] = []
    writes: dict[str, tuple[str, list[StoredWrite], Status, str | None]] = {}
    ended = False
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        if ended:
            raise CorruptCheckpointError(f"export line {number} comes after the end line")
        try:
            item = json.loads(raw)
            kind = item["kind"]
        except (ValueError, TypeError, KeyError) as exc:
            raise CorruptCheckpointError(f"export line {number} is not a graphckpt record ({exc})") from None
        if thread_id is None and (kind != "header" or item.get("format") != _FORMAT):
            raise CorruptCheckpointError("not a graphckpt thread export (bad header line)")
        if thread_id is None and (type(item.get("version")) is not int or item["version"] != _VERSION):
            version = item.get("version")
            newer = type(version) is int and version > _VERSION
            raise CorruptCheckpointError(
                f"the export is {_FORMAT} format version {json.dumps(version)}; this graphckpt reads version "
                f"{_VERSION}" + (" (it was written by a newer graphckpt: upgrade to import it)" if newer else "")
            )
        try:
            if kind == "header":
                if thread_id is not None:
                    raise ValueError("a second header")
                thread_id = _text(item["thread_id"])
            elif kind == "checkpoint":
                checkpoints.append(_checkpoint_from(item))
            elif kind == "writes":
                status = item["status"]
                if status not in _STATUSES:
                    raise ValueError(f"unknown status {status!r}")
                error = item["error"]
                if error is not None and not isinstance(error, str):
                    raise ValueError("error is not text")
                stored = []
                for task_id, write_kind, index, data in item["writes"]:
                    if write_kind not in _WRITE_KINDS:
                        raise ValueError(f"unknown pending write kind {write_kind!r}")
                    stored.append(StoredWrite(_text(task_id), write_kind, int(index), _unb64(data)))
                writes[_text(item["thread_id"])] = (_text(item["checkpoint_id"]), stored, status, error)
            elif kind == "end":
                if int(item["checkpoints"]) != len(checkpoints):
                    raise ValueError(f"it counts {item['checkpoints']} checkpoints, the file holds {len(checkpoints)}")
                ended = True
            else:
                raise ValueError(f"unknown record kind {kind!r}")
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptCheckpointError(f"export line {number} has the wrong shape ({exc})") from None
    if thread_id is None:  # no line at all (a non-blank line before the header is refused above)
        raise CorruptCheckpointError("not a graphckpt thread export (it is empty)")
    if not ended:
        raise CorruptCheckpointError("the export is truncated (no end line)")
    if not checkpoints or checkpoints[-1].thread_id != thread_id:
        raise CorruptCheckpointError(f"the export does not end with a checkpoint of thread {thread_id!r}")
    return thread_id, checkpoints, writes


async def _check_parent(
    saver: Saver, cp: StoredCheckpoint, previous: StoredCheckpoint | None, steps: dict[tuple[str, str], int]
) -> None:
    """``cp`` continues its thread (or starts it from a parent the export or the target holds), one step on."""
    where = f"checkpoint {cp.checkpoint_id} of thread {cp.thread_id!r}"
    if previous is not None:
        ok = cp.parent_thread_id == cp.thread_id and cp.parent_checkpoint_id == previous.checkpoint_id
        if not ok or cp.step != previous.step + 1:
            raise CorruptCheckpointError(f"the export's {where} does not follow checkpoint {previous.checkpoint_id}")
        return
    if cp.parent_checkpoint_id is None:
        if cp.step != 0 or cp.parent_thread_id is not None:
            raise CorruptCheckpointError(f"the export's {where} has no parent but is not a first step")
        return
    parent_thread = cp.parent_thread_id or cp.thread_id
    parent_step = steps.get((parent_thread, cp.parent_checkpoint_id))
    if parent_step is None:
        parent = await saver.get_checkpoint(parent_thread, cp.parent_checkpoint_id)
        parent_step = parent.step if parent is not None else None
    if parent_step is None:
        raise CorruptCheckpointError(
            f"the export's {where} has a parent ({parent_thread!r}, {cp.parent_checkpoint_id}) that neither the "
            "export nor the target holds"
        )
    if cp.step != parent_step + 1:
        raise CorruptCheckpointError(f"the export's {where} is not one step after its parent")


async def _check_targets(saver: Saver, checkpoints: list[StoredCheckpoint]) -> None:
    """Every thread of the export that the target already has continues from its head there (the check
    :func:`_import_checkpoint` makes), found before anything is written: a conflict in a later thread of the lineage
    must not leave the earlier ones imported."""
    checked: set[str] = set()
    for cp in checkpoints:
        if cp.thread_id in checked or await saver.get_checkpoint(cp.thread_id, cp.checkpoint_id) is not None:
            continue
        checked.add(cp.thread_id)  # its first checkpoint the target lacks: the import commits from here
        record = await saver.get_thread(cp.thread_id)
        if record is not None and record.head_checkpoint_id != cp.parent_checkpoint_id:
            raise ThreadConflictError(
                f"thread {cp.thread_id!r} exists in the target and has moved past the exported lineage "
                "(nothing was imported)"
            )


async def _import_checkpoint(
    saver: Saver, cp: StoredCheckpoint, heads: dict[str, str], run_ids: dict[str, str]
) -> bool:
    existing = await saver.get_checkpoint(cp.thread_id, cp.checkpoint_id)
    if existing is not None:
        return False
    record = await saver.get_thread(cp.thread_id)
    if record is not None and cp.thread_id not in run_ids:
        if record.head_checkpoint_id != cp.parent_checkpoint_id:
            raise ThreadConflictError(
                f"thread {cp.thread_id!r} exists in the target and has moved past the exported lineage"
            )
        run_id = ids.new_id()
        await saver.claim(
            cp.thread_id, expected_head=record.head_checkpoint_id, expected_run_id=record.run_id, run_id=run_id
        )
        run_ids[cp.thread_id], heads[cp.thread_id] = run_id, record.head_checkpoint_id
    run_id = run_ids.setdefault(cp.thread_id, ids.new_id())
    await saver.commit(cp, expected_head=heads.get(cp.thread_id), run_id=run_id)
    heads[cp.thread_id] = cp.checkpoint_id
    return True


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


def _lineage(cp: StoredCheckpoint) -> list[tuple[str, int]]:
    body = _raw_body(cp)
    try:
        return [(str(t), int(s)) for t, s in body["lin"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptCheckpointError(f"checkpoint {cp.checkpoint_id} has no readable lineage ({exc})") from None


def _channels(cp: StoredCheckpoint) -> list[str]:
    return [str(name) for name in _raw_body(cp).get("ch", {})]


def _raw_body(cp: StoredCheckpoint) -> dict[str, Any]:
    """The body's structure without decoding any extension type (so no schema is needed)."""
    try:
        body = msgpack.unpackb(cp.body, ext_hook=msgpack.ExtType, raw=False, strict_map_key=False)
    except Exception as exc:
        raise CorruptCheckpointError(
            f"checkpoint {cp.checkpoint_id} of thread {cp.thread_id!r} has a corrupt body ({type(exc).__name__})",
            thread_id=cp.thread_id,
            checkpoint_id=cp.checkpoint_id,
        ) from None
    if not isinstance(body, dict):
        raise CorruptCheckpointError(f"checkpoint {cp.checkpoint_id} has a corrupt body")
    return body


def _checkpoint_json(cp: StoredCheckpoint, blobs: list[Blob]) -> dict[str, Any]:
    return {
        "kind": "checkpoint",
        "thread_id": cp.thread_id,
        "checkpoint_id": cp.checkpoint_id,
        "parent_thread_id": cp.parent_thread_id,
        "parent_checkpoint_id": cp.parent_checkpoint_id,
        "step": cp.step,
        "created_at": cp.created_at,
        "status": cp.status,
        "metadata": dict(cp.metadata),
        "body": _b64(cp.body),
        "blobs": [[b.channel, b.kind, _b64(b.data)] for b in blobs],
    }


def _checkpoint_from(item: dict[str, Any]) -> StoredCheckpoint:
    thread_id, step = _text(item["thread_id"]), int(item["step"])
    blobs = [Blob(thread_id, _text(ch), step, kind, _unb64(data)) for ch, kind, data in item["blobs"]]
    if any(b.kind not in ("snapshot", "delta", "chunk") for b in blobs):
        raise ValueError("unknown blob kind")
    if item["status"] not in ("running", "interrupted", "failed", "done"):
        raise ValueError(f"unknown status {item['status']!r}")
    return StoredCheckpoint(
        thread_id=thread_id,
        checkpoint_id=_text(item["checkpoint_id"]),
        parent_thread_id=None if item["parent_thread_id"] is None else _text(item["parent_thread_id"]),
        parent_checkpoint_id=None if item["parent_checkpoint_id"] is None else _text(item["parent_checkpoint_id"]),
        step=step,
        created_at=float(item["created_at"]),
        status=item["status"],
        metadata=dict(item["metadata"]),
        body=_unb64(item["body"]),
        blobs=blobs,
    )


def _unb64(data: Any) -> bytes:
    if not isinstance(data, str):
        raise ValueError("bytes must be base64 text")
    return base64.b64decode(data, validate=True)


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected non-empty text, got {value!r}")
    return value


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _line(item: dict[str, Any]) -> str:
    try:
        return json.dumps(item, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise GraphckptError(f"cannot export: {exc}") from None
