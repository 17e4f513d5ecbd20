"""A graph that puts a marker string everywhere a thread stores user data, and a scenario that exercises it.

The marker lands in a plain state field, a reducer field (written by two tasks of one step, so their
``task.finished`` events store the update themselves), a journaled tool result (``ctx.effect``), an interrupt
payload, a resume answer and run tags. :func:`scenario` runs, interrupts, resumes, forks, diffs, streams and reads
events, and returns what it saw with ids left out, so two savers can be compared.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from pydantic import BaseModel

from graphckpt import END, START, App, Context, StateGraph
from graphckpt.savers.base import Saver

__all__ = ["MARKER", "build", "graph", "scenario"]

MARKER = "ZQX-secret-marker-7311"


class S(BaseModel):
    doc: str = ""
    notes: Annotated[list[str], operator.add] = []
    tool: str = ""
    answer: str = ""


def _start(s: S) -> dict[str, Any]:
    return {"doc": f"document holding {MARKER} " + "filler " * 40}


def _left(s: S) -> dict[str, Any]:
    return {"notes": [f"left {MARKER}"]}


def _right(s: S) -> dict[str, Any]:
    return {"notes": [f"right {MARKER}"]}


def _tool(s: S, ctx: Context) -> dict[str, Any]:
    result = ctx.effect(lambda: f"tool said {MARKER}")
    answer = ctx.interrupt({"question": f"approve {MARKER}?"})
    return {"tool": result, "answer": str(answer)}


def build(saver: Saver) -> App:
    return graph().compile(saver=saver)


def graph() -> StateGraph:
    """The graph alone (what ``graphckpt serve support.sealed_world:graph`` serves)."""
    g = StateGraph(S)
    g.add_node("start", _start)
    g.add_node("left", _left)
    g.add_node("right", _right)
    g.add_node("tool", _tool)
    g.add_edge(START, "start")
    g.add_edge("start", "left")
    g.add_edge("start", "right")
    g.add_edge(["left", "right"], "tool")
    g.add_edge("tool", END)
    return g


async def scenario(app: App, thread_id: str = "t1") -> dict[str, Any]:
    """Run the graph on ``thread_id`` through an interrupt, resume it, fork it, diff, stream and read events."""
    seen: dict[str, Any] = {}
    first = await app.ainvoke({}, thread_id=thread_id, tags={"customer": MARKER, "graph": "sealed"})
    seen["interrupt"] = [i.payload for i in first.interrupts]
    seen["interrupted"] = first.values.model_dump()
    done = await app.aresume(thread_id, f"yes {MARKER}")
    seen["done"] = done.values.model_dump()
    history = await app.ahistory(thread_id)
    seen["history"] = [(h.step, h.values.model_dump(), dict(h.metadata.get("tags") or {})) for h in history]
    fork = await app.afork(thread_id, step=1, update={"notes": [f"forked {MARKER}"]}, new_thread_id=f"{thread_id}-f")
    seen["fork"] = fork.values.model_dump()
    forked_done = await app.aresume(f"{thread_id}-f")
    seen["fork_interrupt"] = [i.payload for i in forked_done.interrupts]
    forked_done = await app.aresume(f"{thread_id}-f", "fork answer")
    seen["fork_done"] = forked_done.values.model_dump()
    diff = await app.adiff((thread_id, None), (f"{thread_id}-f", None))
    seen["diff"] = sorted(str(c) for c in diff.changes())
    seen["stream"] = [chunk async for chunk in app.astream({}, thread_id=f"{thread_id}-s")]
    seen["stream_resumed"] = [
        chunk async for chunk in app.astream(None, thread_id=f"{thread_id}-s", resume=True, answer="s")
    ]
    events = await app.store.saver.read_events([(thread_id, 0, 1 << 30)], after=(-1, -1), limit=1000)
    seen["events"] = [(e.step, e.seq, e.kind, _no_ids(e.payload)) for e in events]
    return seen


def _no_ids(payload: Any) -> Any:
    return {k: v for k, v in payload.items() if k not in _IDS}


_IDS = frozenset({"task_id", "checkpoint_id", "parent_checkpoint_id", "update_in", "run_id", "duration_ms"})
