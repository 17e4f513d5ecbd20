"""Forking: a new thread whose first checkpoint has a checkpoint of another thread's lineage as parent, with an
optional update (through the reducers) and an optional ``goto`` that re-routes the frontier. The source never changes.

The fork stores O(1) bytes. When the update touches only plain fields and the source was written by this schema
version, the new checkpoint is built without the source's values; the returned snapshot still needs them for its
``values``, so they are fetched concurrently with the commit and folded on first access, or, for the sync facade
(``load_later``), fetched on first access.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from graphckpt import ids
from graphckpt.checkpoint import Snapshot, Task
from graphckpt.codec import Body, Codec
from graphckpt.compiled import CompiledGraph
from graphckpt.control import Send
from graphckpt.errors import InvalidUpdateError, ThreadConflictError
from graphckpt.records import Head, StepRecord
from graphckpt.savers.base import Blob, BlobRange, StoredCheckpoint
from graphckpt.store import ThreadStore
from graphckpt.views import make_snapshot

__all__ = ["LoadLater", "Goto", "fork"]

Goto = str | Send | Sequence[str | Send]

LoadLater = Callable[[StoredCheckpoint, Body, list[BlobRange], str], Callable[[], list[dict[str, Any]]]]
"""Given the source checkpoint, its body, the blob ranges holding its values and the new thread's id: a loader that
fetches and folds the source's values when first called (the sync facade's way: no fetch at fork time)."""


async def fork(
    graph: CompiledGraph,
    store: ThreadStore,
    thread_id: str,
    checkpoint_id: str | None,
    step: int | None,
    update: Mapping[str, Any] | None,
    new_thread_id: str | None,
    goto: Goto | None,
    tags: Mapping[str, Any] | None,
    *,
    load_later: LoadLater | None = None,
) -> Snapshot:
    """See ``App.afork``."""
    codec, state = store.codec, store.codec.state
    src_cp, _ = await store.find(thread_id, checkpoint_id, step)
    new_thread_id = new_thread_id or ids.new_id()
    validated = state.validate_update(update, node="fork")
    src_body = codec.decode_body(src_cp)
    ranges = codec.ranges(src_cp.step, src_body)
    fetch_ranges: list[BlobRange] = []  # fetched beside the commit
    load_source: Callable[[], list[dict[str, Any]]]
    if src_body.schema_version != graph.version or any(state.channels[k].reducer for k in validated):
        # the source's values are needed now: to fold the update, or to store them again in this version
        src_blobs = await store.saver.get_blobs(ranges) if ranges else []
        values, writes = state.apply(codec.fold_many([(src_cp, src_body)], src_blobs)[0], [validated], sources=["fork"])
        fork_values: Callable[[], dict[str, Any]] = lambda: values  # noqa: E731
    else:  # plain fields only: the branch's values are the source's with the update on top, folded on demand
        values, writes = dict(validated), {k: [v] for k, v in validated.items()}
        if not ranges:  # every field rides in the body: nothing to fetch
            load_source = functools.partial(codec.fold_many, [(src_cp, src_body)], [])
        elif load_later is not None:
            load_source = load_later(src_cp, src_body, ranges, new_thread_id)
        else:
            fetch_ranges = ranges
        fork_values = functools.cache(lambda: {**load_source()[0], **validated})
    cid = ids.new_id()
    if goto is None:
        tasks = [Task(f"{cid}.{i}", t.node, t.payload, t.has_payload) for i, t in enumerate(src_body.tasks)]
    else:
        try:
            tasks = graph.goto_tasks(goto, cid)
        except InvalidUpdateError as exc:
            raise InvalidUpdateError(f"fork of thread {thread_id!r}: goto {goto!r}: {exc}") from None
    status, interrupts = graph.frontier_status(tasks)
    record = StepRecord(
        "fork", values, writes, tasks, src_body.barriers, status, interrupts, tags=tags,
        wrote={"fork": list(validated)},
        extra={"forked_from": {"thread_id": src_cp.thread_id, "checkpoint_id": src_cp.checkpoint_id}},
    )  # fmt: skip
    fetch = asyncio.ensure_future(store.saver.get_blobs(fetch_ranges)) if fetch_ranges else None
    if fetch is not None:
        fetch.add_done_callback(_retrieved)  # its error is raised by reading the values, or not at all
    try:
        head = await store.write_checkpoint(
            Head(src_cp, src_body, values), record, run_id=ids.new_id(), checkpoint_id=cid,
            fork_into=new_thread_id, expected_head=None,
        )  # fmt: skip
    except BaseException as exc:
        if fetch is not None:
            fetch.cancel()
        if isinstance(exc, ThreadConflictError):
            raise ThreadConflictError(f"cannot fork into {new_thread_id!r}: that thread already exists") from None
        raise
    if fetch is not None:
        try:
            await asyncio.wait([fetch])
        except BaseException:
            fetch.cancel()
            raise
        load_source = functools.partial(_fold_fetched, codec, src_cp, src_body, fetch)
    make, body = state.make, head.body
    return make_snapshot(
        head.cp, status, lambda: (body.tasks, interrupts, body.schema_version), lambda: make(fork_values())
    )


def _fold_fetched(
    codec: Codec, cp: StoredCheckpoint, body: Body, fetch: asyncio.Future[list[Blob]]
) -> list[dict[str, Any]]:
    return codec.fold_many([(cp, body)], fetch.result())


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Mark a background read's error as seen: it is raised where the result is read, if anywhere (e.g. a fork's
    values), instead of being logged as never retrieved."""
    if not future.cancelled():
        future.exception()
