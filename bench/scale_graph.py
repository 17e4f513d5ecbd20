"""The graph ``bench/scale.py`` fills its stores with: ``tick`` until ``n == limit`` (10 checkpoints for
``limit=9``: the input, then one per tick), no work per step (the reads, not the nodes, are measured)."""

from __future__ import annotations

from typing import Any, TypedDict

from graphckpt import END, START, StateGraph


class Count(TypedDict, total=False):
    n: int
    limit: int


def tick(state: Count) -> dict[str, Any]:
    return {"n": state.get("n", 0) + 1}


def graph() -> StateGraph:
    g = StateGraph(Count)
    g.add_node("tick", tick)
    g.add_edge(START, "tick")
    g.add_conditional_edges("tick", lambda s: "tick" if s.get("n", 0) < s.get("limit", 0) else END)
    return g
