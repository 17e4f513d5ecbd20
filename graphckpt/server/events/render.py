"""How one durable event of the log looks on a stream: as itself (its kind, its payload with thread ids as the
caller's namespace names them) and in each LangGraph stream mode that renders it (``checkpoint`` -> ``values``,
``checkpoints``, ``debug``; ``task.finished`` -> ``updates``, ``tasks``, ``debug``; ``run.interrupted`` ->
``{"__interrupt__": [...]}`` in ``values`` and ``updates``, where LangGraph's clients read interrupts). Encodings
are cached on the event log (:class:`~graphckpt.server.events.log.EventLog`): an event never changes, so the
subscribers of one thread encode it once."""

from __future__ import annotations

import json
from typing import Any

from sse_starlette import ServerSentEvent

from graphckpt.checkpoint import Snapshot
from graphckpt.compat._lgread import compat_updates, written_by_langgraph
from graphckpt.engine import debug_event
from graphckpt.errors import CheckpointNotFoundError
from graphckpt.savers.base import StoredEvent
from graphckpt.serde import Serializer
from graphckpt.server import queries
from graphckpt.server.auth import api_id
from graphckpt.server.events.log import Feed

__all__ = ["DURABLE_MODES", "dump", "mode_data", "render_event"]

DURABLE_MODES = {
    "checkpoint": ("values", "checkpoints", "debug"),
    "task.finished": ("updates", "tasks", "debug"),
    "run.interrupted": ("values", "updates"),
}
"""Which durable events each mode renders (and ``checkpoint`` -> ``updates`` for a thread a LangGraph graph wrote
through GraphckptSaver, whose steps have no ``task.finished`` events: its kept writes tell them)."""

_RAW = Serializer(raw=True)  # a LangGraph thread's writes: models as their fields, nothing imported by name


async def render_event(
    feed: Feed, ns: str, thread_id: str, e: StoredEvent, modes: frozenset[str], kinds: set[str] | None
) -> bytes:
    """The SSE encodings of ``e`` for this stream: its own kind (``kinds``: ``None`` all, else those named) and
    each of ``modes`` that renders it; cached (an event never changes: subscribers of one thread encode it once)."""
    wanted = [""] if kinds is None or e.kind in kinds else []
    wanted += [mode for mode in DURABLE_MODES.get(e.kind, ()) if mode in modes]
    langgraph = e.kind == "checkpoint" and "updates" in modes and e.payload.get("parent_checkpoint_id")
    if langgraph and await _written_by_langgraph(feed, e.thread_id):  # no task.finished events: from its writes
        wanted.append("updates")
    out = bytearray()
    payload: dict[str, Any] | None = None
    for mode in wanted:
        key = (ns, e.thread_id, e.step, e.seq, mode)
        encoded = feed.log.rendered.get(key)
        if encoded is None:
            if payload is None:
                payload = _payload(ns, e)
            data = await _data(feed, ns, thread_id, e, payload, mode)
            eid = f"{api_id(ns, e.thread_id)}:{e.step}:{e.seq}"
            sent = ServerSentEvent(id=eid, event=mode or e.kind, data=dump(data)).encode()
            empty = data == {} and mode == "updates" and e.kind == "checkpoint"  # a LangGraph input step's
            encoded = feed.log.remember(key, b"" if empty else sent)
        out += encoded
    return bytes(out)


async def mode_data(feed: Feed, ns: str, thread_id: str, e: StoredEvent, mode: str) -> Any:
    """What ``e`` shows in the stream mode ``mode`` (one of :data:`DURABLE_MODES`' for its kind; ``""``: itself)."""
    return await _data(feed, ns, thread_id, e, _payload(ns, e), mode)


def _payload(ns: str, e: StoredEvent) -> dict[str, Any]:
    """``e``'s payload with thread ids as ``ns`` names them (a ``task.finished``'s update is filled in already, see
    :meth:`EventLog.events`)."""
    payload = dict(e.payload)
    if payload.get("parent_thread_id"):
        payload["parent_thread_id"] = api_id(ns, payload["parent_thread_id"])
    return payload


async def _data(feed: Feed, ns: str, thread_id: str, e: StoredEvent, payload: dict[str, Any], mode: str) -> Any:
    """What ``e`` shows in ``mode`` (``""``: itself)."""
    if not mode:
        return payload
    if e.kind == "task.finished":
        node, update = payload.get("node"), payload.get("update")
        if mode == "updates":
            return {node: update or None}
        result = {"id": payload.get("task_id"), "name": node, "result": update}
        if mode == "tasks":
            return result
        pairs = list(update.items()) if isinstance(update, dict) else []
        return debug_event(
            "task_result", e.step, id=payload.get("task_id"), name=node, error=None, result=pairs, interrupts=[]
        )
    if e.kind == "checkpoint" and mode == "updates":  # a LangGraph graph's step (see render_event)
        parent = (e.payload.get("parent_thread_id") or e.thread_id, str(e.payload["parent_checkpoint_id"]))
        return await compat_updates(_RAW, feed.log.saver, *parent)
    if e.kind == "run.interrupted":  # LangGraph's ``{"__interrupt__": [...]}`` chunk of both modes
        try:  # ended by a commit (interrupt_before/after): that step; by ctx.interrupt: the head before the step
            snap = await feed.state(ns, thread_id, None, e.step)
        except CheckpointNotFoundError:
            snap = await feed.state(ns, thread_id, None, e.step - 1)
        return {"__interrupt__": [queries.interrupt_view(i) for i in snap.interrupts]}
    snap = await feed.state(ns, thread_id, str(e.payload["checkpoint_id"]), None)
    view = queries.state_view(ns, snap)
    if mode == "values":
        return view["values"]
    if mode == "checkpoints":
        return _checkpoint_view(view)
    return debug_event(
        "checkpoint",
        e.step,
        **_checkpoint_view(view),
        thread_id=view["checkpoint"]["thread_id"],
        checkpoint_id=snap.checkpoint_id,
        parent=_parent(snap),
    )


async def _written_by_langgraph(feed: Feed, thread_id: str) -> bool:
    found = feed.log.compat.get(thread_id)
    if found is None:
        found = feed.log.compat[thread_id] = await written_by_langgraph(feed.log.saver, thread_id)
    return found


def _checkpoint_view(view: dict[str, Any]) -> dict[str, Any]:
    """A state as LangGraph's ``checkpoints`` stream shows it."""
    parent = view["parent_checkpoint"]
    return {
        "config": {"configurable": view["checkpoint"]},
        "parent_config": {"configurable": parent} if parent else None,
        "values": view["values"],
        "metadata": view["metadata"],
        "next": view["next"],
        "tasks": [{"id": t["id"], "name": t["name"], "interrupts": t["interrupts"]} for t in view["tasks"]],
    }


def _parent(snap: Snapshot) -> list[str] | None:
    return list(snap.parent) if snap.parent else None


def dump(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, default=repr)
