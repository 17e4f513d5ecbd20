"""Writing a thread, with every ancestor checkpoint its lineage needs, as the lines of an export (format 1)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from graphckpt.encryption import Keyring
from graphckpt.errors import CorruptCheckpointError, GraphckptError, ThreadNotFoundError
from graphckpt.savers.base import Blob, BlobRange, Saver, StoredCheckpoint, StoredWrite
from graphckpt.store import lineage_segments
from graphckpt.transfer.checks import cut
from graphckpt.transfer.lines import BODIES, FORMAT, VERSION, Rename, b64, channels_of, renamed, unpacked
from graphckpt.transfer.sealed import sealed_item, sealer_of

__all__ = ["export_thread"]


async def export_thread(
    saver: Saver, thread_id: str, *, rename: Rename | None = None, decrypt: bool = False
) -> AsyncIterator[str]:
    """Yield the JSON lines of ``thread_id`` and every ancestor checkpoint its lineage needs, each thread id
    written as ``rename`` names it (default: as stored). A ``rename`` refusal is a :class:`GraphckptError`.

    From a saver that encrypts (see :mod:`graphckpt.savers._sealing`) the export stays encrypted: its values are
    sealed under the saver's current key, bound to the file's ids (see :mod:`graphckpt.transfer.sealed`), and it
    imports into a store holding that key. ``decrypt`` (``graphckpt export --decrypt``) writes them in plaintext."""
    ring = None if decrypt else sealer_of(saver).keyring

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
    body = BODIES.decode_body(head)
    yield _line({"kind": "header", "format": FORMAT, "version": VERSION, "thread_id": named(thread_id)})
    segments = list(lineage_segments(body.lineage, head.step + 1))
    count = 0
    for tid, first, upper in reversed(segments):
        last = upper - 1
        cps = sorted(await saver.list_checkpoints(tid, before_step=upper), key=lambda c: c.step)
        cps = [cp for cp in cps if cp.step >= first]
        channels = sorted({name for cp in cps for name in channels_of(cp)})
        blobs = await saver.get_blobs([BlobRange(tid, ch, first, last) for ch in channels]) if channels else []
        by_step: dict[int, list[Blob]] = {}
        for blob in blobs:
            for part in unpacked(blob, last) if blob.kind == "chunk" else (blob,):
                by_step.setdefault(part.step, []).append(part)
        for cp in cps:
            count += 1
            if rename is not None:
                cp, _ = renamed(cp, BODIES.decode_body(cp), named)
            yield _line(_checkpoint_json(cp, by_step.get(cp.step, [])), ring)
            kept = await saver.get_kept_writes(tid, cp.checkpoint_id)  # a LangGraph thread's (the compat saver's)
            if kept:
                where = {"thread_id": named(tid), "checkpoint_id": cp.checkpoint_id}
                yield _line({"kind": "kept", **where, "writes": [_write_json(w) for w in kept]}, ring)
        if cps and tid == thread_id:
            writes = await saver.get_writes(tid, cps[-1].checkpoint_id)
            line = {"status": record.status, "error": record.error, "writes": [_write_json(w) for w in writes]}
        elif cps:  # an ancestor, up to the fork point: its own run stays here
            line = {"status": "partial", "error": None, "writes": []}
        else:
            continue
        yield _line({"kind": "writes", "thread_id": named(tid), "checkpoint_id": cps[-1].checkpoint_id, **line}, ring)
    yield _line({"kind": "end", "checkpoints": count})


def _write_json(write: StoredWrite) -> list[Any]:
    return [write.task_id, write.kind, write.index, b64(write.data)]


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
        "body": b64(cp.body),
        "blobs": [[b.channel, b.kind, b64(b.data)] for b in blobs],
    }


def _line(item: dict[str, Any], ring: Keyring | None = None) -> str:
    if ring is not None:
        item = sealed_item(item, ring)
    try:
        return json.dumps(item, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise GraphckptError(f"cannot export: {exc}") from None
