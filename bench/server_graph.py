"""The graph ``bench/server.py`` serves: ``tick`` until ``n == limit``, no work per step (events, not nodes, are
measured)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from graphckpt import END, START, StateGraph


class Count(BaseModel):
    n: int = 0
    limit: int = 100


def tick(state: Count) -> dict[str, Any]:
    return {"n": state.n + 1}


def graph() -> StateGraph:
    g = StateGraph(Count)
    g.add_node("tick", tick)
    g.add_edge(START, "tick")
    g.add_conditional_edges("tick", lambda s: "tick" if s.n < s.limit else END)
    return g
