"""What the UI's workbench pages read, as plain records: a step (:func:`step_view`: the state before and after, their
diff, the step's tasks on one time axis with their calls and source locations, a subgraph task's child steps), a
conversation (:func:`conversation`: the ``messages`` of a thread's state) and two branches side by side
(:func:`compare`).

Each function is handed the parts it reads (a :class:`~graphckpt.reader.RawReader`, the loaded graph when there is
one, a price table); the backend (:mod:`~graphckpt.server.ui.data`) picks them.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from graphckpt.audit import Prices
from graphckpt.checkpoint import Snapshot
from graphckpt.compiled import CompiledGraph
from graphckpt.diff import Diff
from graphckpt.errors import ThreadNotFoundError
from graphckpt.plain import audit_of, duration_ms, metadata_of, ran_nodes, source_of, to_jsonable, tokens
from graphckpt.reader import RawReader
from graphckpt.reads import Reader
from graphckpt.subgraph import child_thread_id, link_of

__all__ = [
    "BranchSide",
    "ChatMessage",
    "Comparison",
    "Conversation",
    "StepView",
    "TaskBar",
    "compare",
    "conversation",
    "node_source",
    "step_view",
]

Differ = Callable[[tuple[str, str | None], tuple[str, str | None]], Awaitable[Diff]]
"""How a page diffs two checkpoints: the backend's ``diff`` (through the graph's schema when it is loaded), the same
reading ``graphckpt diff`` does."""


@dataclass(frozen=True, slots=True)
class TaskBar:
    """One task of a step on the step's time axis (``left`` and ``width`` in percent of the axis)."""

    task_id: str
    node: str
    send: bool
    ms: float
    left: float
    width: float
    offset_ms: float | None
    """Start relative to the step's first task (``None``: timed by an earlier run, before a crash)."""
    calls: list[dict[str, Any]]
    source: str | None
    child: str | None = None
    """The child thread of a subgraph task."""
    child_steps: list[dict[str, Any]] = field(default_factory=list)
    payload: Any = None


@dataclass(frozen=True, slots=True)
class StepView:
    """A step: the checkpoint it committed, the state before and after, their diff, its tasks."""

    snap: Snapshot
    before: dict[str, Any] | None
    after: dict[str, Any]
    diff: Diff | None
    bars: list[TaskBar]
    axis_ms: float
    tokens: int
    cost: float | None
    parent_link: Mapping[str, Any] | None
    """For a subgraph's child thread: its parent's thread, checkpoint, task and node."""


def node_source(fn: Any) -> str | None:
    """``module:line`` of a node function (unwrapping ``functools.partial`` and decorators; a callable object's
    class); ``None`` when Python cannot tell."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = inspect.unwrap(fn) if callable(fn) else fn
    target = fn if inspect.isfunction(fn) or inspect.ismethod(fn) else type(fn)
    line: int | None
    try:
        line = inspect.getsourcelines(target)[1]
    except (OSError, TypeError):
        code = getattr(target, "__code__", None)
        line = code.co_firstlineno if code is not None else None
    return f"{getattr(target, '__module__', '?')}:{line}" if line is not None else None


def _graph_of_child(graph: CompiledGraph | None, link: Mapping[str, Any]) -> CompiledGraph | None:
    """The compiled graph a subgraph's child thread runs (its parent graph's node ``link["node"]``)."""
    if graph is None:
        return None
    namespace = link.get("ns")
    names = [str(n).partition(":")[0] for n in namespace] if isinstance(namespace, Sequence) else []
    names = names or [str(link.get("node", ""))]
    for name in names:
        spec = graph.nodes.get(name)
        inner = getattr(spec.fn, "graph", None) if spec is not None else None
        if not isinstance(inner, CompiledGraph):
            return None
        graph = inner
    return graph


def _call_rows(calls: Sequence[Mapping[str, Any]], prices: Prices | None) -> list[dict[str, Any]]:
    rows = []
    for c in calls:
        found = c.get("usage")
        usage: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        prompt, completion = int(usage.get("prompt_tokens", 0) or 0), int(usage.get("completion_tokens", 0) or 0)
        model = str(c.get("model") or "")
        cost = prices.cost(model, prompt, completion) if prices is not None and model else None
        rows.append(
            {
                "name": c.get("name") or f"call {c.get('effect', '?')}",
                "model": model or None,
                "status": c.get("status", "?"),
                "ms": c.get("ms"),
                "tokens": prompt + completion,
                "cost": cost,
                "replays": c.get("replays"),
            }
        )
    return rows


async def _child_steps(reader: RawReader, child: str) -> list[dict[str, Any]]:
    try:
        history = await reader.ahistory(child)
    except ThreadNotFoundError:
        return []
    return [
        {
            "thread_id": s.thread_id,
            "checkpoint_id": s.checkpoint_id,
            "step": s.step,
            "nodes": ran_nodes(metadata_of(s)) or [source_of(metadata_of(s))],
            "ms": round(duration_ms(metadata_of(s)), 1),
        }
        for s in reversed(history)
        if s.thread_id == child
    ]


async def step_view(
    reader: RawReader,
    thread_id: str,
    checkpoint_id: str,
    *,
    graph: CompiledGraph | None,
    prices: Prices | None,
    differ: Differ,
) -> StepView:
    """The step that committed ``checkpoint_id`` of ``thread_id`` (see :class:`StepView`)."""
    snap = await reader.aget_state(thread_id, checkpoint_id)
    meta = metadata_of(snap) or {}
    link = link_of(meta)
    if link is not None:
        graph = _graph_of_child(graph, link)
    before_snap = None
    diff = None
    if snap.parent is not None:
        before_snap = await reader.aget_state(snap.parent.thread_id, snap.parent.checkpoint_id)
        diff = await differ((snap.parent.thread_id, snap.parent.checkpoint_id), (snap.thread_id, snap.checkpoint_id))
    record = audit_of(meta)
    stored_audit = meta.get("audit")
    timed = stored_audit.get("tasks") if isinstance(stored_audit, Mapping) else None
    listed = timed if isinstance(timed, list) else []
    spans = {
        str(t.get("task")): t
        for t in listed
        if isinstance(t, Mapping) and _finite(t.get("started_at")) and _finite(t.get("ms"))
    }
    stored = meta.get("durations_ms")
    durations: Mapping[str, Any] = stored if isinstance(stored, Mapping) else {}
    tasks = list(before_snap.tasks) if before_snap is not None and source_of(meta) == "loop" else []
    starts = [float(s["started_at"]) for s in spans.values()]
    t0 = min(starts) if starts else 0.0
    ends = [float(s["started_at"]) + float(s["ms"]) / 1000 for s in spans.values()]
    longest = max((float(v) for v in durations.values() if _finite(v)), default=0.0)
    axis_ms = max(((max(ends) - t0) * 1000) if ends else longest, 0.001)
    bars = []
    for task in tasks:
        span = spans.get(task.id)
        if span is not None:
            ms, offset = float(span.get("ms", 0)), (float(span["started_at"]) - t0) * 1000
        else:  # an earlier run's result: its node's total time, from the step's start
            same = [t for t in tasks if t.node == task.node]
            total = durations.get(task.node, 0)
            ms, offset = (float(total) if _finite(total) else 0.0) / max(1, len(same)), None
        spec = graph.nodes.get(task.node) if graph is not None else None
        is_sub = spec is not None and isinstance(getattr(spec.fn, "graph", None), CompiledGraph)
        child = child_thread_id(snap.thread_id, task.node, task.id) if is_sub else None
        bars.append(
            TaskBar(
                task_id=task.id,
                node=task.node,
                send=task.has_payload,
                ms=round(ms, 1),
                left=round((offset or 0.0) / axis_ms * 100, 2),
                width=round(max(ms / axis_ms * 100, 0.5), 2),
                offset_ms=round(offset, 1) if offset is not None else None,
                calls=_call_rows([c for c in record["calls"] if c.get("task") == task.id], prices),
                source=node_source(spec.fn) if spec is not None and not is_sub else None,
                child=child,
                child_steps=await _child_steps(reader, child) if child is not None else [],
                payload=to_jsonable(task.payload) if task.has_payload else None,
            )
        )
    all_calls = _call_rows(record["calls"], prices)
    costs = [c["cost"] for c in all_calls if c["cost"] is not None]
    return StepView(
        snap=snap,
        before=_plain(before_snap.values) if before_snap is not None else None,
        after=_plain(snap.values),
        diff=diff,
        bars=bars,
        axis_ms=round(axis_ms, 1),
        tokens=tokens(meta),
        cost=sum(costs) if costs else None,
        parent_link=link,
    )


def _finite(value: Any) -> bool:
    """A stored number that can be placed on an axis (stored metadata may hold anything)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _plain(values: Any) -> dict[str, Any]:
    out = to_jsonable(values)
    return out if isinstance(out, dict) else {"value": out}


# -- conversation ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One message as a person reads it."""

    index: int
    id: str | None
    role: str
    text: str
    tool_calls: list[dict[str, Any]]
    name: str | None
    checkpoint_id: str | None
    """The first checkpoint of the lineage that holds the message (where "edit and fork" forks from)."""
    thread_id: str | None


@dataclass(frozen=True, slots=True)
class Conversation:
    thread_id: str
    head: Snapshot
    messages: list[ChatMessage]


ROLES = {"human": "user", "ai": "assistant", "HumanMessage": "user", "AIMessage": "assistant", "ToolMessage": "tool"}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks: their text parts
        parts = [b.get("text", "") if isinstance(b, Mapping) else str(b) for b in content]
        return "\n".join(p for p in parts if p)
    return "" if content is None else str(to_jsonable(content))


def chat_message(index: int, raw: Any) -> ChatMessage:
    """A stored message (a dict, or a model's fields) as :class:`ChatMessage`."""
    m = to_jsonable(raw)
    if not isinstance(m, Mapping):
        return ChatMessage(index, None, "user", str(m), [], None, None, None)
    role = str(m.get("role") or m.get("type") or "message")
    calls = m.get("tool_calls")
    if not calls and isinstance(m.get("additional_kwargs"), Mapping):
        calls = m["additional_kwargs"].get("tool_calls")
    tool_calls = [dict(c) for c in calls if isinstance(c, Mapping)] if isinstance(calls, list) else []
    mid = m.get("id")
    return ChatMessage(
        index=index,
        id=str(mid) if mid is not None else None,
        role=ROLES.get(role, role),
        text=_text_of(m.get("content")),
        tool_calls=tool_calls,
        name=str(m["name"]) if m.get("name") else None,
        checkpoint_id=None,
        thread_id=None,
    )


async def conversation(reader: Reader, thread_id: str) -> Conversation | None:
    """The thread's ``messages`` in order, each with the first checkpoint holding it; ``None`` when its state has no
    list of messages. ``reader``: the thread's app when its graph is loaded (the ``messages`` reducer gives each
    message its id as it folds the stored writes), else a raw reader."""
    history = await reader.ahistory(thread_id)  # newest first
    if not history:
        return None
    head = history[0]
    values = to_jsonable(head.values)
    found = values.get("messages") if isinstance(values, Mapping) else None
    if not isinstance(found, list):
        return None
    messages = [chat_message(i, m) for i, m in enumerate(found)]
    first: dict[str, tuple[str, str]] = {}
    for snap in history:  # newest first: the last one seen is the oldest holding it
        held = to_jsonable(snap.values)
        listed = held.get("messages") if isinstance(held, Mapping) else None
        for m in listed if isinstance(listed, list) else []:
            if isinstance(m, Mapping) and m.get("id") is not None:
                first[str(m["id"])] = (snap.thread_id, snap.checkpoint_id)
    out = []
    for m in messages:
        where = first.get(m.id or "")
        out.append(
            ChatMessage(
                m.index,
                m.id,
                m.role,
                m.text,
                m.tool_calls,
                m.name,
                where[1] if where else None,
                where[0] if where else None,
            )
        )
    return Conversation(thread_id, head, out)


# -- branches side by side --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BranchSide:
    """One branch: its head, its own steps after the common ancestor, their tokens and time."""

    thread_id: str
    head: Snapshot
    status: str
    steps: list[dict[str, Any]]
    tokens: int
    ms: float
    first: tuple[str, str] | None
    """Its first checkpoint after the fork point (``None``: it has none)."""


@dataclass(frozen=True, slots=True)
class Comparison:
    a: BranchSide
    b: BranchSide
    fork_point: tuple[str, str] | None
    """The last checkpoint both branches share."""
    at_fork: Diff | None
    """The two branches' first checkpoints after the fork point, diffed."""
    at_heads: Diff


async def _side(reader: RawReader, thread_id: str, shared: set[str], history: list[Snapshot]) -> BranchSide:
    own = [s for s in reversed(history) if s.checkpoint_id not in shared]  # oldest first
    info = await reader.athread(thread_id)
    steps = [
        {
            "thread_id": s.thread_id,
            "checkpoint_id": s.checkpoint_id,
            "step": s.step,
            "nodes": ran_nodes(metadata_of(s)) or [source_of(metadata_of(s))],
            "tokens": tokens(metadata_of(s)),
            "ms": round(duration_ms(metadata_of(s)), 1),
            "created_at": s.created_at,
        }
        for s in own
    ]
    return BranchSide(
        thread_id=thread_id,
        head=history[0],
        status=str(info.status),
        steps=steps,
        tokens=sum(tokens(metadata_of(s)) for s in own),
        ms=round(sum(duration_ms(metadata_of(s)) for s in own), 1),
        first=(own[0].thread_id, own[0].checkpoint_id) if own else None,
    )


async def compare(reader: RawReader, a: str, b: str, differ: Differ) -> Comparison:
    """Branches ``a`` and ``b`` (threads of one fork family) side by side."""
    ha, hb = await reader.ahistory(a), await reader.ahistory(b)
    ids_a, ids_b = {s.checkpoint_id for s in ha}, {s.checkpoint_id for s in hb}
    shared = ids_a & ids_b
    fork_point = next(((s.thread_id, s.checkpoint_id) for s in ha if s.checkpoint_id in shared), None)
    side_a, side_b = await _side(reader, a, shared, ha), await _side(reader, b, shared, hb)
    at_fork = await differ(side_a.first, side_b.first) if side_a.first and side_b.first else None
    at_heads = await differ((a, None), (b, None))
    return Comparison(side_a, side_b, fork_point, at_fork, at_heads)
