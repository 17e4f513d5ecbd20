"""JSON views of threads, checkpoints, runs and diffs, as the API returns them (and the web UI can reuse).

Shapes follow the LangGraph Agent Server where it has them (``Thread``, ``ThreadState``, ``Run``, ``Assistant``),
with graphckpt's own fields added (``graphckpt_status``, ``step``, ``parent``). Ids are the API ids of the caller's
namespace. Values are made JSON with pydantic's encoder (models as dicts, datetimes as ISO text).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, cast

from pydantic_core import to_jsonable_python

from graphckpt.checkpoint import Interrupt, Snapshot
from graphckpt.diff import Diff
from graphckpt.savers.base import Status, ThreadRecord
from graphckpt.server.auth import api_id
from graphckpt.server.records import PendingThread, RunInfo, user_metadata
from graphckpt.views import as_dict

__all__ = [
    "LANGGRAPH_STATUS",
    "diff_view",
    "jsonable",
    "run_view",
    "state_view",
    "thread_view",
    "to_store_status",
]

LANGGRAPH_STATUS: dict[Status, str] = {
    "running": "busy",
    "interrupted": "interrupted",
    "failed": "error",
    "done": "idle",
    "crashed": "error",
    "partial": "idle",
}
"""A thread's status in LangGraph's words."""


def to_store_status(name: str) -> Status:
    """A status in either vocabulary, as graphckpt's."""
    return cast(Status, _FROM_LANGGRAPH.get(name, name))


_FROM_LANGGRAPH: dict[str, str] = {"busy": "running", "idle": "done", "error": "failed", "interrupted": "interrupted"}
"""LangGraph's words as graphckpt's status (several of ours share one of theirs: ``error`` is ``failed`` or
``crashed``, ``idle`` is ``done`` or ``partial``; a search by theirs means the first)."""


def jsonable(value: Any) -> Any:
    return to_jsonable_python(value, fallback=repr)


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat()


def _ref(ns: str, thread_id: str | None, checkpoint_id: str | None) -> dict[str, Any] | None:
    if thread_id is None or checkpoint_id is None:
        return None
    return {"thread_id": api_id(ns, thread_id) or thread_id, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}


def thread_view(
    ns: str, thread: ThreadRecord | PendingThread, graph_id: str, values: Any = None, wake_at: float | None = None
) -> dict[str, Any]:
    """A thread as LangGraph's ``Thread``, plus graphckpt's fields. A thread a durable wait holds (``wake_at``: when
    a worker wakes it) is ``interrupted`` in LangGraph's words (it is: a person's answer continues it too), with
    ``graphckpt_status`` ``waiting`` and ``wake_at`` (ISO 8601, UTC); ``wake_at`` is ``None`` for any other."""
    if isinstance(thread, PendingThread):
        return {
            "thread_id": thread.thread_id,
            "created_at": _iso(thread.created_at),
            "updated_at": _iso(thread.created_at),
            "metadata": thread.metadata,
            "status": "idle",
            "graphckpt_status": None,
            "graph_id": thread.graph_id,
            "values": {},
            "interrupts": {},
            "head": None,
            "parent": None,
            "error": None,
            "wake_at": None,
        }
    return {
        "thread_id": api_id(ns, thread.thread_id),
        "created_at": _iso(thread.created_at),
        "updated_at": _iso(thread.updated_at),
        "metadata": jsonable(user_metadata(thread)),
        "status": LANGGRAPH_STATUS[thread.status],
        "graphckpt_status": "waiting" if wake_at is not None else thread.status,
        "graph_id": graph_id,
        "values": values,
        "interrupts": {},
        "head": {"checkpoint_id": thread.head_checkpoint_id, "step": thread.head_step},
        "parent": _ref(ns, thread.parent_thread_id, thread.parent_checkpoint_id),
        "error": thread.error,
        "wake_at": _iso(wake_at) if wake_at is not None else None,
    }


def interrupt_view(i: Interrupt) -> dict[str, Any]:
    return {"id": i.id, "value": jsonable(i.payload), "node": i.node, "when": i.when}


def state_view(ns: str, snap: Snapshot, *, values: bool = True) -> dict[str, Any]:
    """A checkpoint as LangGraph's ``ThreadState``, plus ``step`` and ``status``."""
    parent = snap.parent
    interrupts = [interrupt_view(i) for i in snap.interrupts]
    errors = {e.task_id: f"{e.type}: {e.message}" for e in snap.errors}
    return {
        "values": jsonable(as_dict(snap.values)) if values else None,
        "next": list(snap.next),
        "checkpoint": _ref(ns, snap.thread_id, snap.checkpoint_id),
        "metadata": jsonable(dict(snap.metadata)),
        "created_at": snap.created_at.isoformat(),
        "parent_checkpoint": _ref(ns, parent.thread_id, parent.checkpoint_id) if parent else None,
        "checkpoint_id": snap.checkpoint_id,
        "parent_checkpoint_id": parent.checkpoint_id if parent else None,
        "tasks": [
            {
                "id": t.id,
                "name": t.node,
                "error": errors.get(t.id),
                "interrupts": [v for v, i in zip(interrupts, snap.interrupts, strict=True) if i.task_id == t.id],
                "checkpoint": None,
                "state": None,
                "result": None,
            }
            for t in snap.tasks
        ],
        "interrupts": interrupts,
        "step": snap.step,
        "status": snap.status,
    }


def run_view(ns: str, run: RunInfo) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "thread_id": api_id(ns, run.request.thread_id),
        "assistant_id": run.request.graph_id,
        "created_at": _iso(run.created_at),
        "updated_at": _iso(run.updated_at),
        "status": run.status,
        "metadata": jsonable(dict(run.metadata)),
        "multitask_strategy": run.multitask_strategy,
        "error": run.error,
    }


def diff_view(ns: str, diff: Diff) -> dict[str, Any]:
    return {
        "a": _ref(ns, diff.a.thread_id, diff.a.checkpoint_id),
        "b": _ref(ns, diff.b.thread_id, diff.b.checkpoint_id),
        "added": jsonable(diff.added),
        "removed": jsonable(diff.removed),
        "changed": {k: {"before": jsonable(c.before), "after": jsonable(c.after)} for k, c in diff.changed.items()},
        "patch": diff.to_json_patch(jsonable),
    }


def tree_view(ns: str, record: ThreadRecord, children: Mapping[str, list[ThreadRecord]]) -> dict[str, Any]:
    """The branch tree under ``record``: each fork with the checkpoint it branched from."""
    return {
        "thread_id": api_id(ns, record.thread_id),
        "status": record.status,
        "head": {"checkpoint_id": record.head_checkpoint_id, "step": record.head_step},
        "forked_from": _ref(ns, record.parent_thread_id, record.parent_checkpoint_id),
        "children": [tree_view(ns, child, children) for child in children.get(record.thread_id, [])],
    }
