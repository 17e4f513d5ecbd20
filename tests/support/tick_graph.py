"""The smallest graph with a step: one node that adds one to ``n`` (for tests about what surrounds a run, not the
run itself: event wake-ups, shared reads, cron ticks)."""

from __future__ import annotations

from pydantic import BaseModel

from graphckpt import END, START, StateGraph


class Tick(BaseModel):
    n: int = 0


def tick_graph() -> StateGraph:
    """``START -> bump -> END``; ``bump`` returns ``{"n": n + 1}``."""
    g = StateGraph(Tick)
    g.add_node("bump", lambda s: {"n": s.n + 1})
    g.add_edge(START, "bump")
    g.add_edge("bump", END)
    return g
