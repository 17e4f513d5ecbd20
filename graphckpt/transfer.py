"""Moving a thread, with its whole lineage, between savers as JSON lines.

The export is raw: stored bytes travel base64-encoded and unchanged, so no state schema is needed on either side and
a thread imported elsewhere resumes exactly where it was. Lines, in order::

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
from graphckpt.errors import CorruptCheckpointError, GraphckptError, ThreadConflictError, ThreadNotFoundError
from graphckpt.savers.base import Blob, BlobRange, Saver, StoredCheckpoint, StoredWrite

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
            by_step.setdefault(blob.step, []).append(blob)
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
    """Store the exported thread in ``saver``; returns its thread id. Nothing is overwritten."""
    thread_id: str | None = None
    imported = 0
    finished = False
    heads: dict[str, str] = {}
    run_ids: dict[str, str] = {}
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            item = json.loads(raw)
            kind = item["kind"]
        except (ValueError, TypeError, KeyError) as exc:
            raise CorruptCheckpointError(f"export line {number} is not a graphckpt record ({exc})") from None
        if number == 1 and (kind != "header" or item.get("format") != _FORMAT or item.get("version") != _VERSION):
            raise CorruptCheckpointError("not a graphckpt thread export (bad header line)")
        try:
            if kind == "header":
                thread_id = str(item["thread_id"])
            elif kind == "checkpoint":
                cp = _checkpoint_from(item)
                if await _import_checkpoint(saver, cp, heads, run_ids):
                    imported += 1
            elif kind == "writes":
                tid, cid = str(item["thread_id"]), str(item["checkpoint_id"])
                writes = [StoredWrite(str(t), k, int(i), base64.b64decode(d)) for t, k, i, d in item["writes"]]
                if tid in run_ids and heads.get(tid) == cid:
                    status = item["status"] if item["status"] != "running" or writes else None
                    await saver.put_writes(tid, cid, writes, run_id=run_ids[tid], status=status, error=item["error"])
            elif kind == "end":
                finished = True
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptCheckpointError(f"export line {number} has the wrong shape ({exc})") from None
    if thread_id is None or not finished:
        raise CorruptCheckpointError("the export is truncated (no end line)")
    return thread_id


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
    thread_id, step = str(item["thread_id"]), int(item["step"])
    blobs = [Blob(thread_id, str(ch), step, kind, base64.b64decode(data)) for ch, kind, data in item["blobs"]]
    if any(b.kind not in ("snapshot", "delta") for b in blobs):
        raise ValueError("unknown blob kind")
    if item["status"] not in ("running", "interrupted", "failed", "done"):
        raise ValueError(f"unknown status {item['status']!r}")
    return StoredCheckpoint(
        thread_id=thread_id,
        checkpoint_id=str(item["checkpoint_id"]),
        parent_thread_id=item["parent_thread_id"],
        parent_checkpoint_id=item["parent_checkpoint_id"],
        step=step,
        created_at=float(item["created_at"]),
        status=item["status"],
        metadata=dict(item["metadata"]),
        body=base64.b64decode(item["body"]),
        blobs=blobs,
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _line(item: dict[str, Any]) -> str:
    try:
        return json.dumps(item, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise GraphckptError(f"cannot export: {exc}") from None
