"""The events a checkpoint commit adds to the durable log, computed in Python from what the commit writes.

Every saver inserts exactly these rows in the commit's own transaction, after the checkpoint row, so a reader sees
the checkpoint and its events together or neither. They used to be derived by a trigger that parsed the stored
metadata back out of its JSON text on every commit (a third of a fast step's CPU on SQLite); the commit already has
that metadata as a Python mapping, and the step's tasks one by one (:attr:`StoredCheckpoint.tasks`), so it builds
them here instead and the trigger is gone (SQLite migration 5, PostgreSQL migration 7). The other events (a claim's
``run.started``, a stop's ``run.failed``, a pending write's ``effect.recorded``...) stay with the triggers on the
rows that make them: those fire rarely and need no parsing.

Kinds and payloads: :data:`graphckpt.savers.base.EventKind`.

A step's only task (the usual case) wrote an update the checkpoint holds as it is (plain fields' values, a
reducer field's delta): its event points there (``update_in``) instead of copying it, so a thread whose steps
append messages does not store them twice. Each step still adds two rows (its ``task.finished`` and ``checkpoint``,
about 360 bytes in all): W2 in bench/RESULTS.md stores 2.1 bytes per message byte on SQLite with the event log, 1.6
without. Every saver takes ``events=True`` (the default); ``events=False`` is for an app that never serves its
threads: its commits write no step events (a claim, a stop and a pending write still record theirs), so a server
streaming those threads later shows their runs' starts and ends but not their steps.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from pydantic_core import PydanticSerializationError, to_json, to_jsonable_python

from graphckpt.savers.base import EventKind, Saver, StoredCheckpoint

__all__ = ["UPDATE_MAX", "changed", "checkpoint_events", "encode_payload", "watch"]


UPDATE_MAX = 64 * 1024
"""The largest ``task.finished`` payload (its JSON, in bytes) that carries the task's update; above it the update is
left out (``"update": null, "update_omitted": <the payload's size>``) so that a node returning a big document does
not store it a second time: a reader takes the written keys' values from the checkpoint instead."""

_RUN_SOURCES = frozenset({"input", "loop", "update"})


def checkpoint_events(cp: StoredCheckpoint) -> list[tuple[EventKind, str]]:
    """The events of committing ``cp`` in log order, each with its payload as JSON text: one ``task.finished`` per
    task of a ``loop`` step (from ``cp.tasks``; a checkpoint committed without them, such as an import, gets one per
    node that wrote, from its metadata), then ``checkpoint``, then ``run.done`` / ``run.interrupted`` when the commit
    ends a run."""
    meta = cp.metadata
    source = meta.get("source")
    writes = meta.get("writes") or {}
    events: list[tuple[EventKind, str]] = []
    if source == "loop":
        if cp.tasks:
            for t in cp.tasks:
                payload: dict[str, Any] = {
                    "task_id": t.task_id,
                    "node": t.node,
                    "writes": list(t.update),
                    "update": None if t.update_in_checkpoint else t.update,
                    "duration_ms": round(t.duration_ms, 3),
                    "usage": dict(t.usage) if t.usage else None,
                }
                if t.update_in_checkpoint:
                    payload["update_in"] = cp.checkpoint_id
                text = encode_payload(payload)
                if len(text) > UPDATE_MAX:
                    payload["update"], payload["update_omitted"] = None, len(text)
                    text = encode_payload(payload)
                events.append(("task.finished", text))
        else:
            durations, usage = meta.get("durations_ms") or {}, meta.get("usage") or {}
            for node, keys in writes.items():
                payload = {
                    "task_id": None,
                    "node": node,
                    "writes": keys,
                    "update": None,
                    "duration_ms": durations.get(node),
                    "usage": usage.get(node),
                }
                events.append(("task.finished", encode_payload(payload)))
    checkpoint = {
        "checkpoint_id": cp.checkpoint_id,
        "parent_thread_id": cp.parent_thread_id,
        "parent_checkpoint_id": cp.parent_checkpoint_id,
        "step": cp.step,
        "source": source,
        "status": cp.status,
        "writes": dict(writes),
    }
    events.append(("checkpoint", encode_payload(checkpoint)))
    if cp.status in ("done", "interrupted") and source in _RUN_SOURCES:
        end: EventKind = "run.done" if cp.status == "done" else "run.interrupted"
        events.append((end, encode_payload({"status": cp.status, "error": None})))
    return events


def encode_payload(payload: Mapping[str, Any]) -> str:
    """``payload`` as compact JSON text that every store accepts: models and dataclasses as objects, anything unknown
    as its ``repr``, NaN and infinities as ``null``, and a lone surrogate (which UTF-8 and PostgreSQL refuse) as
    ``?``."""
    try:
        return to_json(payload, fallback=repr, inf_nan_mode="null").decode()
    except PydanticSerializationError:  # a lone surrogate somewhere
        values = to_jsonable_python(payload, fallback=repr, inf_nan_mode="null")
        return json.dumps(values, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "replace").decode()


_WATCHERS: weakref.WeakKeyDictionary[Saver, list[Callable[[], None]]] = weakref.WeakKeyDictionary()


def watch(saver: Saver, callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback()`` after each write this process makes through ``saver`` that may have added events (a
    checkpoint commit, pending writes, a claim), on the writer's event loop, right after the write returned; returns
    what stops it. The server's :class:`~graphckpt.server.events.hub.Hub` uses it to wake its streams at once for
    the runs its own workers execute, instead of at its next poll of the log (writes of other processes are still
    found by that poll, or by PostgreSQL's ``NOTIFY``). A callback must be quick and must not raise. A saver class
    that is not hashable (it defines ``__eq__`` without ``__hash__``) cannot be watched: ``TypeError``."""
    try:
        callbacks = _WATCHERS.setdefault(saver, [])
    except TypeError:
        raise TypeError(f"{type(saver).__name__} is not hashable, so its writes cannot be watched") from None
    callbacks.append(callback)

    def stop() -> None:
        if callback in callbacks:
            callbacks.remove(callback)

    return stop


def changed(saver: Saver) -> None:
    """Tell the watchers of ``saver`` (:func:`watch`) that a write of this process has returned."""
    try:
        callbacks = _WATCHERS.get(saver)
    except TypeError:  # not hashable: nobody can be watching it
        return
    if callbacks:
        for callback in tuple(callbacks):
            callback()
