"""Record builders and assertions shared by the conformance cases: checkpoints, chains, ids, stored-equal checks."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from graphckpt.ids import new_id
from graphckpt.savers.base import (
    Blob,
    BlobRange,
    Saver,
    Status,
    StoredCheckpoint,
    ThreadRecord,
)

HOSTILE_KEY = "a') OR 1=1 --"
HOSTILE_VALUE = '"; DROP TABLE checkpoints; --'


def make_checkpoint(
    thread_id: str,
    step: int,
    *,
    parent: StoredCheckpoint | None = None,
    status: Status = "running",
    metadata: Mapping[str, Any] | None = None,
    channels: Mapping[str, bytes] | None = None,
) -> StoredCheckpoint:
    """A checkpoint with a fresh id, child of ``parent`` (which may be in another thread: a fork). ``channels`` become
    snapshot blobs written at ``step``. The body is arbitrary bytes, including NUL and non-UTF-8."""
    return StoredCheckpoint(
        thread_id=thread_id,
        checkpoint_id=new_id(),
        parent_thread_id=parent.thread_id if parent is not None else None,
        parent_checkpoint_id=parent.checkpoint_id if parent is not None else None,
        step=step,
        created_at=1_700_000_000.25 + step,
        status=status,
        metadata={"source": "loop", "step": step} if metadata is None else metadata,
        body=b"\x00\xff body " + f"{thread_id}/{step}".encode(errors="backslashreplace"),
        blobs=[Blob(thread_id, ch, step, "snapshot", data) for ch, data in (channels or {}).items()],
    )


def new_thread_id(name: str) -> str:
    """A thread id unique to this test run."""
    return f"{name}-{new_id()}"


async def tick() -> None:
    """Let the wall clock move, so ``updated_at`` values differ even on a coarse clock."""
    await asyncio.sleep(0.02)


async def commit_chain(
    saver: Saver, thread_id: str, n: int, *, run_id: str, fork_from: StoredCheckpoint | None = None
) -> list[StoredCheckpoint]:
    """Commit ``n`` checkpoints to a new thread (a fork of ``fork_from`` when given), each writing blob ``x``."""
    out: list[StoredCheckpoint] = []
    parent, first = fork_from, 0 if fork_from is None else fork_from.step + 1
    for step in range(first, first + n):
        cp = make_checkpoint(thread_id, step, parent=parent, channels={"x": f"x{step}".encode()})
        await saver.commit(cp, expected_head=out[-1].checkpoint_id if out else None, run_id=run_id)
        out.append(cp)
        parent = cp
    return out


def assert_stored(got: StoredCheckpoint | None, expected: StoredCheckpoint) -> None:
    """``got`` is ``expected`` as read back: every field equal, ``blobs`` empty."""
    assert got is not None, f"checkpoint {expected.checkpoint_id} of {expected.thread_id} not found"
    assert not got.blobs, "reads return blobs=()"
    assert got.created_at == pytest.approx(expected.created_at, abs=1e-6)
    assert dataclasses.replace(got, blobs=(), created_at=expected.created_at) == dataclasses.replace(expected, blobs=())


async def thread_row(saver: Saver, thread_id: str) -> ThreadRecord:
    """The thread's row, which must exist."""
    record = await saver.get_thread(thread_id)
    assert record is not None, f"thread {thread_id} not found"
    return record


def checkpoint_ids(checkpoints: list[StoredCheckpoint]) -> list[str]:
    return [cp.checkpoint_id for cp in checkpoints]


def thread_ids(records: list[ThreadRecord], mine: list[str]) -> list[str]:
    """The ids of ``records`` that belong to this test, in the saver's order."""
    return [r.thread_id for r in records if r.thread_id in mine]


def blob_keys(blobs: list[Blob]) -> list[tuple[str, str, int]]:
    return [(b.thread_id, b.channel, b.step) for b in blobs]


async def assert_unchanged(saver: Saver, thread_id: str, head: StoredCheckpoint, rejected: StoredCheckpoint) -> None:
    """After a refused commit: the head did not move and nothing of ``rejected`` (row, blobs) was stored."""
    assert (await thread_row(saver, thread_id)).head_checkpoint_id == head.checkpoint_id
    assert_stored(await saver.get_checkpoint(thread_id), head)
    assert await saver.get_checkpoint(thread_id, rejected.checkpoint_id) is None
    assert rejected.checkpoint_id not in checkpoint_ids(await saver.list_checkpoints(thread_id))
    if rejected.step != head.step:
        assert await saver.get_checkpoint(thread_id, step=rejected.step) is None
        assert await saver.get_blobs([BlobRange(thread_id, "x", rejected.step, rejected.step)]) == []


async def filter_thread(saver: Saver, metadatas: list[dict[str, Any]]) -> list[StoredCheckpoint]:
    """A new thread of checkpoints with these metadatas, in order."""
    t, run = new_thread_id("filter"), new_id()
    out: list[StoredCheckpoint] = []
    for step, meta in enumerate(metadatas):
        cp = make_checkpoint(t, step, parent=out[-1] if out else None, metadata=meta)
        await saver.commit(cp, expected_head=out[-1].checkpoint_id if out else None, run_id=run)
        out.append(cp)
    return out
