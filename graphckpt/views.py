"""User-facing records built from stored rows: snapshots (decoded lazily), thread infos, plain value dicts."""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from graphckpt.checkpoint import CheckpointRef, Interrupt, Snapshot, Status, Task, TaskError, ThreadInfo
from graphckpt.codec import Body, Codec
from graphckpt.errors import CorruptCheckpointError
from graphckpt.savers._thread_pages import encode_cursor
from graphckpt.savers.base import Blob, StoredCheckpoint, ThreadRecord

__all__ = ["LazyFold", "as_dict", "bulk", "make_snapshot", "thread_info"]


@contextlib.contextmanager
def bulk() -> Iterator[None]:
    """No garbage collection while the block builds many objects that all live on (a history page's snapshots, a
    thousand at a time): each of them counts towards the collector's next pass, and the full pass they set off walks
    every object of the process (after a long run in the same process, 12 of a first history read's 22 ms, W4 in
    bench/RESULTS.md). The block must not await. The collector runs again as it was after it (a caller that turned
    it off keeps it off)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def make_snapshot(
    cp: StoredCheckpoint,
    status: Status,
    frontier: Callable[[], tuple[Sequence[Task], Sequence[Interrupt], int]],
    values: Callable[[], Any],
    errors: tuple[TaskError, ...] = (),
) -> Snapshot:
    return Snapshot(cp, status, frontier, values, errors)


class LazyFold:
    """The values of a history page, decoded on the first access to any of them (the blobs are already fetched);
    each checkpoint's frontier is decoded on its own first access."""

    def __init__(self, codec: Codec, cps: list[StoredCheckpoint], blobs: list[Blob]) -> None:
        self.codec, self.cps, self.blobs = codec, cps, blobs
        self.bodies: list[Body | None] = [None] * len(cps)
        self.folded: list[dict[str, Any]] | None = None

    def body(self, i: int) -> Body:
        body = self.bodies[i]
        if body is None:
            body = self.bodies[i] = self.codec.decode_body(self.cps[i])
        return body

    def frontier(self, i: int) -> tuple[Sequence[Task], Sequence[Interrupt], int]:
        body = self.body(i)
        return body.tasks, body.interrupts, body.schema_version

    def values(self, i: int) -> Any:
        if self.folded is None:
            items = [(cp, self.body(j)) for j, cp in enumerate(self.cps)]
            self.folded = self.codec.fold_many(items, self.blobs)
        return self.codec.state.make(self.folded[i])


def thread_info(r: ThreadRecord, wake_at: float | None = None) -> ThreadInfo:
    """``r`` as a user reads it; ``wake_at``: when a durable wait wakes it (see ``savers.waits.wake_times``)."""
    return ThreadInfo(
        thread_id=r.thread_id,
        status=r.status,
        head=CheckpointRef(r.thread_id, r.head_checkpoint_id),
        step=r.head_step,
        created_at=_when(r, r.created_at),
        updated_at=_when(r, r.updated_at),
        forked_from=CheckpointRef(r.parent_thread_id, r.parent_checkpoint_id)
        if r.parent_thread_id and r.parent_checkpoint_id
        else None,
        error=r.error,
        metadata=r.metadata,
        lease=r.lease,
        cursor=encode_cursor(r.created_at, r.thread_id),
        wake_at=_when(r, wake_at) if wake_at is not None else None,
    )


def _when(r: ThreadRecord, seconds: float) -> dt.datetime:
    """A stored time as a date; a tampered row's time that is no date is :class:`CorruptCheckpointError`."""
    try:
        return dt.datetime.fromtimestamp(seconds, dt.UTC)
    except (OverflowError, OSError, ValueError, TypeError):
        raise CorruptCheckpointError(
            f"thread {r.thread_id!r} has a stored time that is not a date ({seconds!r})", thread_id=r.thread_id
        ) from None


def as_dict(values: Any) -> dict[str, Any]:
    if isinstance(values, Mapping):
        return dict(values)
    return {k: getattr(values, k) for k in type(values).model_fields}
