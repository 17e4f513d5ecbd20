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
from graphckpt.audit import step_audit
from graphckpt.checkpoint import Snapshot, Task
from graphckpt.codec import Body, Codec
from graphckpt.compiled import CompiledGraph, RouteError
from graphckpt.control import START
from graphckpt.errors import InvalidUpdateError, ThreadConflictError
from graphckpt.records import Goto, Head, LoadLater, Recorded, StepRecord, TaskResult
from graphckpt.savers.base import Blob, BlobRange, StoredCheckpoint
from graphckpt.store import ThreadStore, partial_thread_error
from graphckpt.views import make_snapshot

__all__ = ["Goto", "LoadLater", "check_as_node", "fork", "route_as", "update_state"]


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
    as_node: str | None = None,
    load_later: LoadLater | None = None,
) -> Snapshot:
    """See ``App.afork``."""
    codec, state = store.codec, store.codec.state
    check_as_node(graph, as_node, goto)
    src_cp, _ = await store.find(thread_id, checkpoint_id, step)
    new_thread_id = new_thread_id or ids.new_id()
    validated = state.validate_update(update, node="fork")
    src_body = codec.decode_body(src_cp)
    ranges = codec.ranges(src_cp.step, src_body)
    fetch_ranges: list[BlobRange] = []  # fetched beside the commit
    load_source: Callable[[], list[dict[str, Any]]]
    src_values: dict[str, Any] = {}
    reducers = any(state.channels[k].reducer for k in validated)
    if src_body.schema_version != graph.version or reducers or as_node is not None:
        # the source's values are needed now: to fold the update, to route from as_node, or to store them again
        src_blobs = await store.saver.get_blobs(ranges) if ranges else []
        src_values = codec.fold_many([(src_cp, src_body)], src_blobs)[0]
        values, writes = state.apply(src_values, [validated], sources=[as_node or "fork"])
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
    barriers = src_body.barriers
    if as_node is not None:
        tasks, barriers = route_as(graph, as_node, src_values, values, validated, barriers, cid)
    elif goto is None:
        tasks = [Task(f"{cid}.{i}", t.node, t.payload, t.has_payload) for i, t in enumerate(src_body.tasks)]
    else:
        try:
            tasks = graph.goto_tasks(goto, cid)
        except InvalidUpdateError as exc:
            raise InvalidUpdateError(f"fork of thread {thread_id!r}: goto {goto!r}: {exc}") from None
    status, interrupts = graph.frontier_status(tasks)
    record = StepRecord(
        "fork",
        values,
        writes,
        tasks,
        barriers,
        status,
        interrupts,
        tags=tags,
        wrote={as_node or "fork": list(validated)},
        extra={"forked_from": {"thread_id": src_cp.thread_id, "checkpoint_id": src_cp.checkpoint_id}},
    )
    fetch = asyncio.ensure_future(store.saver.get_blobs(fetch_ranges)) if fetch_ranges else None
    if fetch is not None:
        fetch.add_done_callback(_retrieved)  # its error is raised by reading the values, or not at all
    try:
        head = await store.write_checkpoint(
            Head(src_cp, src_body, values),
            record,
            run_id=ids.new_id(),
            checkpoint_id=cid,
            fork_into=new_thread_id,
            expected_head=None,
        )
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


async def update_state(
    graph: CompiledGraph,
    store: ThreadStore,
    thread_id: str,
    update: Mapping[str, Any] | None,
    as_node: str | None,
    tags: Mapping[str, Any] | None,
    goto: Goto | None = None,
) -> Snapshot:
    """See ``App.aupdate_state``: a new head of the same thread, never a rewrite of history. ``goto``: the new head's
    frontier is these tasks (LangGraph's ``Command(goto=...)`` as a run's input) instead of the old head's."""
    check_as_node(graph, as_node, goto)
    state = store.codec.state
    record = await store.thread(thread_id)
    if record.status == "partial":
        raise partial_thread_error(record, "take an update")
    head, recorded = await store.load_head(record)
    validated = state.validate_update(update, node=as_node or "update")
    values, writes = state.apply(head.values, [validated], sources=[as_node or "update"])
    cid, step = update_record(
        graph,
        as_node,
        head.values,
        head.body,
        values,
        validated,
        writes,
        tags=tags if tags is not None else head.cp.metadata.get("tags"),
        extra=_kept_audit(recorded, head.body.tasks),
        goto=goto,
    )
    run_id = ids.new_id()
    new = await store.write_checkpoint(
        head, step, run_id=run_id, checkpoint_id=cid, expected_head=record.head_checkpoint_id, claim=record
    )
    return store.snapshot(new, step.status, None)


def update_record(
    graph: CompiledGraph,
    as_node: str | None,
    src_values: dict[str, Any],
    src_body: Body,
    values: dict[str, Any],
    validated: dict[str, Any],
    writes: Any,
    *,
    tags: Any,
    extra: dict[str, Any],
    goto: Goto | None = None,
) -> tuple[str, StepRecord]:
    """The new checkpoint's id and the record of an ``update`` step on top of ``src_body``: the frontier routed as
    ``as_node`` would, or the tasks ``goto`` names, else the stored frontier run next as the tasks of the new
    checkpoint."""
    cid = ids.new_id()
    if as_node is not None:
        tasks, barriers = route_as(graph, as_node, src_values, values, validated, src_body.barriers, cid)
    elif goto is not None:
        tasks, barriers = graph.goto_tasks(goto, cid), src_body.barriers
    else:
        tasks = [Task(f"{cid}.{i}", t.node, t.payload, t.has_payload) for i, t in enumerate(src_body.tasks)]
        barriers = src_body.barriers
    status, interrupts = graph.frontier_status(tasks)
    wrote = {as_node or "update": list(validated)}
    step = StepRecord(
        "update", values, writes, tasks, barriers, status, interrupts, tags=tags, wrote=wrote, extra=extra
    )
    return cid, step


def _kept_audit(recorded: Recorded, tasks: Sequence[Task]) -> dict[str, Any]:
    """The old head's uncommitted audit record (a failed step's attempts, its calls), kept in the edit's checkpoint:
    the edit drops the pending writes, not what they tell."""
    audit = step_audit(recorded, tasks)
    return {"audit": audit} if audit else {}


def check_as_node(graph: CompiledGraph, as_node: str | None, goto: Goto | None) -> None:
    if as_node is None:
        return
    if goto is not None:
        raise InvalidUpdateError("give as_node (route from that node) or goto (these tasks next), not both")
    if as_node not in graph.nodes and as_node != START:
        raise InvalidUpdateError(f"as_node {as_node!r} is not a node of this graph")


def route_as(
    graph: CompiledGraph,
    as_node: str,
    before: dict[str, Any],
    values: dict[str, Any],
    update: dict[str, Any],
    barriers: Mapping[str, list[str]],
    checkpoint_id: str,
) -> tuple[list[Task], dict[str, list[str]]]:
    """The frontier after ``update`` is applied as if ``as_node`` had written it: that node's edges, routers and
    joins, evaluated on the new state."""
    try:
        return graph.next_tasks(
            before, values, [TaskResult(Task(f"{checkpoint_id}.as", as_node), update)], barriers, checkpoint_id
        )
    except RouteError as exc:
        raise InvalidUpdateError(
            f"routing as node {as_node!r} failed: {type(exc.cause).__name__}: {exc.cause}"
        ) from None


def _fold_fetched(
    codec: Codec, cp: StoredCheckpoint, body: Body, fetch: asyncio.Future[list[Blob]]
) -> list[dict[str, Any]]:
    return codec.fold_many([(cp, body)], fetch.result())


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Mark a background read's error as seen: it is raised where the result is read, if anywhere (e.g. a fork's
    values), instead of being logged as never retrieved."""
    if not future.cancelled():
        future.exception()
