"""A parent graph with a subgraph node (a -> sub -> b) and its child graph (c1 -> c2), counting each node's calls: the
subgraph tests' graphs, also used by the transfer tests (a child thread exported on its own)."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from graphckpt import START, StateGraph, interrupt
from graphckpt.app import App

__all__ = ["Inner", "Outer", "child_graph", "parent_graph"]


class Outer(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    x: int
    only_outer: str


class Inner(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    x: int
    only_inner: str


def child_graph(calls: dict[str, int], *, ask: bool = False, fail_once: bool = False) -> App:
    def c1(s: Inner) -> dict[str, Any]:
        calls["c1"] = calls.get("c1", 0) + 1
        return {"log": ["c1"], "x": s.get("x", 0) + 1, "only_inner": "z"}

    def c2(s: Inner) -> dict[str, Any]:
        calls["c2"] = calls.get("c2", 0) + 1
        if fail_once and calls["c2"] == 1:
            raise RuntimeError("c2 broke")
        answer = interrupt("ok?") if ask else "-"
        return {"log": [f"c2:{answer}"]}

    g = StateGraph(Inner)
    g.add_sequence([c1, c2])
    g.add_edge(START, "c1")
    return g.compile()


def parent_graph(child: App, saver: Any, calls: dict[str, int]) -> App:
    def a(s: Outer) -> dict[str, Any]:
        calls["a"] = calls.get("a", 0) + 1
        return {"log": ["a"]}

    def b(s: Outer) -> dict[str, Any]:
        calls["b"] = calls.get("b", 0) + 1
        return {"log": ["b"]}

    g = StateGraph(Outer)
    g.add_node("a", a)
    g.add_node("sub", child)
    g.add_node("b", b)
    g.add_edge(START, "a")
    g.add_edge("a", "sub")
    g.add_edge("sub", "b")
    return g.compile(saver)
