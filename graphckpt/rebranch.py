"""Branching a thread in place: a new head of the same thread whose state is a past checkpoint's (with an optional
update), so the thread continues from there while everything after that checkpoint stays in its history.

This is LangGraph's time travel (a run from ``checkpoint_id``, ``update_state`` on a past checkpoint) on a graphckpt
thread, which is a line: the new head follows the old head (its parent) and records the checkpoint it branches from
in its metadata (``branched_from``). Its values do not follow from its parent's, so every channel is stored in full
(one snapshot per channel, not a delta). The frontier is the past checkpoint's, or, with ``as_node``, what that
node's edges pick on the new state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from graphckpt import ids
from graphckpt.checkpoint import Snapshot
from graphckpt.compiled import CompiledGraph
from graphckpt.fork import check_as_node, update_record
from graphckpt.store import ThreadStore, partial_thread_error

__all__ = ["rebranch"]


async def rebranch(
    graph: CompiledGraph,
    store: ThreadStore,
    thread_id: str,
    checkpoint_id: str,
    update: Mapping[str, Any] | None,
    as_node: str | None,
    tags: Mapping[str, Any] | None,
) -> Snapshot:
    """A new head of ``thread_id`` with the state of its checkpoint ``checkpoint_id`` (of its lineage) and
    ``update`` applied through the reducers; the thread is taken over for the edit (a run still going on it fails
    its next write)."""
    check_as_node(graph, as_node, None)
    codec, state = store.codec, store.codec.state
    record = await store.thread(thread_id)
    if record.status == "partial":
        raise partial_thread_error(record, "branch")
    head, _ = await store.load_head(record)
    src_cp, _ = await store.find(thread_id, checkpoint_id)
    src_body = codec.decode_body(src_cp)
    src_values = await codec.load_values(store.saver, src_cp, src_body)
    validated = state.validate_update(update, node=as_node or "update") if update else {}
    values, writes = (
        state.apply(src_values, [validated], sources=[as_node or "update"])
        if validated
        else (
            dict(src_values),
            {},
        )
    )
    cid, step = update_record(
        graph,
        as_node,
        src_values,
        src_body,
        values,
        validated,
        writes,
        tags=tags if tags is not None else head.cp.metadata.get("tags"),
        extra={"branched_from": {"thread_id": src_cp.thread_id, "checkpoint_id": src_cp.checkpoint_id}},
    )
    new = await store.write_checkpoint(
        head,
        step,
        run_id=ids.new_id(),
        checkpoint_id=cid,
        expected_head=record.head_checkpoint_id,
        claim=record,
        rewrite=True,
    )
    return store.snapshot(new, step.status, None)
