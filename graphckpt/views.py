"""User-facing records built from stored rows: snapshots (decoded lazily), thread infos, plain value dicts."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from graphckpt.checkpoint import CheckpointRef, Interrupt, Snapshot, Status, Task, TaskError, ThreadInfo
from graphckpt.codec import Body, Codec
from graphckpt.savers.base import Blob, StoredCheckpoint, ThreadRecord

__all__ = ["LazyFold", "as_dict", "make_snapshot", "thread_info"]


def make_snapshot(
    cp: StoredCheckpoint,
    status: Status,
    loader: Callable[[], tuple[Any, Sequence[Task], Sequence[Interrupt], int]],
    errors: tuple[TaskError, ...] = (),
) -> Snapshot:
    return Snapshot(cp, status, loader, errors)


class LazyFold:
    """The values of a history page, decoded on the first access to any of them (the blobs are already fetched)."""

    def __init__(self, codec: Codec, cps: list[StoredCheckpoint], blobs: list[Blob]) -> None:
        self.codec, self.cps, self.blobs = codec, cps, blobs
        self.bodies: list[Body] | None = None
        self.values: list[dict[str, Any]] | None = None

    def load(self, i: int) -> tuple[Any, Sequence[Task], Sequence[Interrupt], int]:
        if self.values is None:
            self.bodies = [self.codec.decode_body(cp) for cp in self.cps]
            self.values = self.codec.fold_many(list(zip(self.cps, self.bodies, strict=True)), self.blobs)
        assert self.bodies is not None
        body = self.bodies[i]
        return self.codec.state.make(self.values[i]), body.tasks, body.interrupts, body.schema_version


def thread_info(r: ThreadRecord) -> ThreadInfo:
    return ThreadInfo(
        thread_id=r.thread_id,
        status=r.status,
        head=CheckpointRef(r.thread_id, r.head_checkpoint_id),
        step=r.head_step,
        created_at=dt.datetime.fromtimestamp(r.created_at, dt.UTC),
        updated_at=dt.datetime.fromtimestamp(r.updated_at, dt.UTC),
        forked_from=CheckpointRef(r.parent_thread_id, r.parent_checkpoint_id)
        if r.parent_thread_id and r.parent_checkpoint_id
        else None,
        error=r.error,
        metadata=r.metadata,
    )


def as_dict(values: Any) -> dict[str, Any]:
    if isinstance(values, Mapping):
        return dict(values)
    return {k: getattr(values, k) for k in type(values).model_fields}
