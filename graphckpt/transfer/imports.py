"""Importing an export into a saver: checked against the target (reads only), then written.

:func:`import_thread` runs the phases: :mod:`graphckpt.transfer.parse` reads and checks the file on its own, then
:func:`_check_target` decides what to write by reading the target only, and :func:`_apply` writes it. Only the last
phase writes, so a file that fails any check changes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

from graphckpt import ids
from graphckpt.compat._lgread import COMPAT_RUN_ID, is_compat_body
from graphckpt.errors import ThreadConflictError
from graphckpt.reader import RawCodec
from graphckpt.savers.base import BlobRange, Saver, StoredCheckpoint, StoredWrite, json_equal
from graphckpt.transfer.checks import cut
from graphckpt.transfer.lines import Rename, channels_of, unpacked
from graphckpt.transfer.parse import ExportFile, WritesLine, check_export, corrupt, parse_export
from graphckpt.transfer.sealed import opened_lines, sealer_of

__all__ = ["import_thread"]


async def import_thread(saver: Saver, lines: Iterable[str], *, rename: Rename | None = None) -> str:
    """Store the exported thread in ``saver``; returns its thread id. Nothing that exists is changed. ``rename``
    maps the file's thread ids to the ones stored (default: as written); an id it refuses makes the file corrupt.

    Sealed values (an export of an encrypted store, see :mod:`graphckpt.transfer.sealed`) are opened with the
    saver's keyring first. Four phases; only the last one writes, so a file that fails any check changes nothing:

    1. :func:`~graphckpt.transfer.parse.parse_export`: every line, every field with its exact type, every body,
       blob and pending write decoded once (schema-free, bounded by its own length: :mod:`graphckpt.transfer.checks`);
    2. :func:`~graphckpt.transfer.parse.check_export`: the file on its own: unique checkpoint ids, each thread's
       chain (parent, step + 1), each body's channel table and lineage against the chain, the pending writes against
       the thread's last checkpoint;
    3. :func:`_check_target` (reads only): parents the file does not hold exist in the target; a checkpoint the
       target already has is identical there (every field, every blob) or the import is a conflict; a thread that
       exists continues from its head; an existing thread's status and pending writes are never replaced;
    4. :func:`_apply`: commit the new checkpoints in order, then restore the status and pending writes of the
       threads whose head the import wrote.
    """
    export = parse_export(opened_lines(lines, sealer_of(saver)), rename)
    check_export(export)
    plan = await _check_target(saver, export)
    await _apply(saver, plan)
    return export.thread_id


@dataclass(slots=True)
class _Plan:
    """What phase 4 writes: the new checkpoints in order, and the threads whose status and writes it restores."""

    new: list[StoredCheckpoint] = field(default_factory=list)
    restore: dict[str, WritesLine] = field(default_factory=dict)
    kept: dict[str, list[StoredWrite]] = field(default_factory=dict)  # of the new checkpoints


# -- 3. against the target (reads only) --------------------------------------------------------------------------------


async def _check_target(saver: Saver, export: ExportFile) -> _Plan:
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
                    raise corrupt(
                        f"the export's {where} has a parent ({cut(parent_key[0])}, {cut(parent_key[1])}) that "
                        "neither the export nor the target holds"
                    )
                steps[parent_key] = parent.step
                lineages[parent_key] = codec.decode_body(parent).lineage
            if cp.step != steps[parent_key] + 1:
                raise corrupt(f"the export's {where} is not one step after its parent")
            above = lineages[parent_key]
            expected = above if parent_key[0] == cp.thread_id else [(cp.thread_id, cp.step), *above]
        if body.lineage != expected:
            raise corrupt(f"the export's {where} records a lineage that is not its chain of parents")
        steps[(cp.thread_id, cp.checkpoint_id)], lineages[(cp.thread_id, cp.checkpoint_id)] = cp.step, expected
        stored = await saver.get_checkpoint(cp.thread_id, cp.checkpoint_id)
        if stored is not None:
            if cp.thread_id in created:
                raise corrupt(f"the target already has {where}, which follows checkpoints it does not have")
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
        if cp.checkpoint_id in export.kept:
            plan.kept[cp.checkpoint_id] = export.kept[cp.checkpoint_id]
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
    channels = sorted(
        {b.channel for cp, _ in pairs for b in cp.blobs} | {n for cp, _ in pairs for n in channels_of(cp)}
    )
    found: dict[int, set[tuple[str, str, bytes]]] = {}
    if channels:
        for blob in await saver.get_blobs([BlobRange(thread_id, ch, 0, top) for ch in channels]):
            for part in unpacked(blob, top) if blob.kind == "chunk" else (blob,):
                found.setdefault(part.step, set()).add((part.channel, part.kind, part.data))
    for cp, _stored in pairs:
        if found.get(cp.step, set()) != {(b.channel, b.kind, b.data) for b in cp.blobs}:
            raise _conflict(cp, "with other stored values")


async def _completes_partial(saver: Saver, thread_id: str, line: WritesLine) -> bool:
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


async def _same_status(saver: Saver, thread_id: str, line: WritesLine) -> None:
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
        # a LangGraph thread (the compat saver's) stays writable by the compat saver: its fence is COMPAT_RUN_ID
        run_id = run_ids.setdefault(cp.thread_id, COMPAT_RUN_ID if is_compat_body(cp) else ids.new_id())
        kept = {cp.checkpoint_id: plan.kept[cp.checkpoint_id]} if cp.checkpoint_id in plan.kept else None
        await saver.commit(cp, expected_head=heads.get(cp.thread_id), run_id=run_id, kept_writes=kept)
        heads[cp.thread_id] = cp.checkpoint_id
    for tid, line in plan.restore.items():
        if tid not in run_ids:  # a partial thread the file completes: its run id is the one it was imported with
            record = await saver.get_thread(tid)
            assert record is not None
            run_ids[tid] = record.run_id
        await saver.put_writes(
            tid, line.checkpoint_id, line.writes, run_id=run_ids[tid], status=line.status, error=line.error
        )
