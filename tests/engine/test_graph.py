"""Building and validating graphs: every structural mistake is a ``GraphSetupError`` that names the nodes."""

from __future__ import annotations

from typing import Annotated, TypedDict

import pytest
from pydantic import BaseModel

from graphckpt import END, START, GraphckptWarning, GraphSetupError, StateGraph, append


class S(BaseModel):
    x: int = 0
    log: Annotated[list[str], append] = []


def step(s: S) -> dict[str, int]:
    return {"x": s.x + 1}


def graph(*nodes: str) -> StateGraph:
    g = StateGraph(S)
    for n in nodes:
        g.add_node(n, step)
    return g


def test_unknown_node_in_edge_is_named() -> None:
    g = graph("a")
    g.add_edge(START, "a")
    g.add_edge("a", "ghost")
    with pytest.raises(GraphSetupError, match="unknown node 'ghost'"):
        g.compile()


def test_unknown_node_in_join_is_named() -> None:
    g = graph("a", "b")
    g.add_edge(START, "a")
    g.add_edge(["a", "nope"], "b")
    g.add_edge("b", END)
    with pytest.raises(GraphSetupError, match="unknown node 'nope'"):
        g.compile()


def test_unreachable_nodes_are_named() -> None:
    """LangGraph compiles such a graph; graphckpt too, with a warning naming the nodes."""
    g = graph("a", "island")
    g.add_edge(START, "a")
    g.add_edge("a", END)
    g.add_edge("island", END)
    with pytest.warns(GraphckptWarning, match="unreachable from START never run: island"):
        g.compile()


def test_nodes_without_path_to_end_are_named() -> None:
    g = graph("a", "loop1", "loop2")
    g.add_edge(START, "a")
    g.add_edge("a", END)
    g.add_edge("a", "loop1")
    g.add_edge("loop1", "loop2")
    g.add_edge("loop2", "loop1")
    with pytest.warns(GraphckptWarning, match="no path to END: loop1, loop2"):
        g.compile()


def test_path_map_target_must_exist() -> None:
    g = graph("a")
    g.add_edge(START, "a")
    g.add_conditional_edges("a", lambda s: "go", {"go": "missing", "stop": END})
    with pytest.raises(GraphSetupError, match=r"path_map\['go'\] -> unknown node 'missing'"):
        g.compile()


def test_graph_without_entry() -> None:
    g = graph("a")
    g.add_edge("a", END)
    with pytest.raises(GraphSetupError, match="no entry"):
        g.compile()


def test_router_without_path_map_may_go_anywhere() -> None:
    g = graph("a", "b")
    g.add_edge(START, "a")
    g.add_conditional_edges("a", lambda s: "b" if s.x < 2 else END)
    g.add_edge("b", "a")
    g.compile()  # b is reachable and can reach END through a's router


def test_command_destinations_count_for_validation() -> None:
    g = StateGraph(S)
    g.add_node("a", step, destinations=["b", END])
    g.add_node("b", step)
    g.add_edge(START, "a")
    g.add_edge("b", END)
    g.compile()
    g2 = StateGraph(S)
    g2.add_node("a", step)
    g2.add_node("b", step)
    g2.add_edge(START, "a")
    g2.add_edge("b", END)
    g2.compile()  # a has no edges: it may route to b with Command, or end its branch
    g2.add_edge("a", END)  # now it has one, and goes nowhere else
    with pytest.warns(GraphckptWarning, match="unreachable from START never run: b"):
        g2.compile()


@pytest.mark.parametrize("name", [START, END])
def test_reserved_node_names(name: str) -> None:
    with pytest.raises(GraphSetupError, match="reserved"):
        graph().add_node(name, step)


def test_duplicate_node() -> None:
    g = graph("a")
    with pytest.raises(GraphSetupError, match="already defined"):
        g.add_node("a", step)


def test_node_signature_is_checked() -> None:
    def three(a: object, b: object, c: object) -> None: ...

    with pytest.raises(GraphSetupError, match=r"must accept \(state\) or \(state, ctx\)"):
        graph().add_node("bad", three)


def test_interrupt_on_unknown_node() -> None:
    g = graph("a")
    g.add_edge(START, "a")
    g.add_edge("a", END)
    with pytest.raises(GraphSetupError, match="interrupt on unknown node 'zzz'"):
        g.compile(interrupt_before=["zzz"])


def test_schema_must_be_model_or_typeddict() -> None:
    with pytest.raises(GraphSetupError, match="pydantic BaseModel, a TypedDict or a dataclass"):
        StateGraph(dict)


def test_typeddict_schema_with_reducer() -> None:
    class T(TypedDict, total=False):
        items: Annotated[list[int], append]

    g = StateGraph(T)
    assert g.state.channels["items"].reducer is append


def test_mermaid_lists_nodes_edges_and_branches() -> None:
    g = graph("a", "b", "c")
    g.add_edge(START, "a")
    g.add_conditional_edges("a", lambda s: "b", {"left": "b", "right": "c"})
    g.add_edge("b", END)
    g.add_edge("c", END)
    text = g.compile().to_mermaid()
    assert text.startswith("flowchart TD\n")
    assert '["a"]' in text and '["b"]' in text and '["c"]' in text
    assert "__start__ --> n0" in text
    assert "n0 -.-> |left| n1" in text and "n0 -.-> |right| n2" in text
    assert "n1 --> __end__" in text


def test_to_networkx_has_every_edge_kind() -> None:
    g = graph("a", "b", "c")
    g.add_edge(START, "a")
    g.add_edge(START, "b")
    g.add_edge(["a", "b"], "c")
    g.add_conditional_edges("c", lambda s: END, [END])
    nx_graph = g.to_networkx()
    assert nx_graph.edges[START, "a"]["kind"] == "edge"
    assert nx_graph.edges["a", "c"]["kind"] == "join"
    assert nx_graph.edges["c", END]["kind"] == "branch"


def test_mermaid_says_when_a_router_has_no_path_map() -> None:
    g = graph("a")
    g.add_edge(START, "a")
    g.add_conditional_edges("a", lambda s: END)
    assert 'n0 -.-> |route| unknown0[/"any node: no path_map given"/]' in g.to_mermaid()
