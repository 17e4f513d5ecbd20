"""The graph ``bench/scale.py`` fills its stores with: ``tick`` until ``n == limit`` (10 checkpoints for
``limit=9``: the input, then one per tick), no work per step (the reads, not the nodes, are measured). Each tick
also appends a line to ``log`` (a reducer channel): its writes are blob rows (deltas), so every read of a state
reads the ``blobs`` table as an agent's message list does, not only the checkpoint's body."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from graphckpt import END, START, StateGraph, append


class Count(TypedDict, total=False):
    n: int
    limit: int
    log: Annotated[list[str], append]


def tick(state: Count) -> dict[str, Any]:
    n = state.get("n", 0) + 1
    return {"n": n, "log": [f"tick {n}: the step's note, a short line as a tool result would leave"]}


def graph() -> StateGraph:
    g = StateGraph(Count)
    g.add_node("tick", tick)
    g.add_edge(START, "tick")
    g.add_conditional_edges("tick", lambda s: "tick" if s.get("n", 0) < s.get("limit", 0) else END)
    return g
