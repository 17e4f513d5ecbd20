"""Differential tests: one graph, described once, run by LangGraph and by graphckpt, gives the same result.

A :class:`Spec` describes a graph without naming an engine: state fields with their reducers, nodes as pure
functions of a plain-dict view of the state, edges, joins, conditional routers, and neutral stand-ins for ``Send``
(:class:`Go`), ``Command`` (:class:`Cmd`) and ``RemoveMessage`` (:class:`Rm`). :func:`run_langgraph` and
:func:`run_graphckpt` build it with each engine (LangGraph with ``InMemorySaver``, graphckpt with ``MemorySaver``),
run it once, and return an :class:`Outcome`: the final values, every checkpoint's values and next nodes (oldest
first; LangGraph's extra ``__start__`` checkpoint, step -1, has no graphckpt counterpart and is dropped), and how
often each node was called. Parity is ``Outcome`` equality.

"Next nodes" are graphckpt's frontier, and for LangGraph the nodes that ran in the following step (each node notes
its ``langgraph_step``): LangGraph's ``StateSnapshot.next`` lists a join's target as soon as one of its sources has
finished, before the join is complete, although the target runs only once it is.

Subgraphs (``Spec.subgraphs``: nodes that are compiled graphs) are compared run by run as well: each subgraph run's
checkpoints (values and next nodes), from LangGraph's checkpoints in their namespaces and graphckpt's
``history(..., subgraphs=True)``. ``ask(question)`` is the running engine's ``interrupt``; a spec with ``answer``
answers every open interrupt by id (``Command(resume={id: answer})``) until none is left.

LangGraph is imported at the top on purpose: without the ``compat-test`` extra this module fails, it never skips.
Cases that differ because of the engine's routing are strict xfails, so they flip to
failures the day the engine matches; deliberate differences are asserted as such.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import operator
import random
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypedDict

import pydantic
import pytest
from langchain_core.messages import BaseMessage
from langchain_core.messages import RemoveMessage as LGRemoveMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphRecursionError
from langgraph.errors import InvalidUpdateError as LGInvalidUpdateError
from langgraph.graph import StateGraph as LGStateGraph
from langgraph.graph.message import add_messages as lg_add_messages
from langgraph.types import Command as LGCommand
from langgraph.types import Send as LGSend

import graphckpt as gc
from graphckpt import END, START

# -- the neutral description ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Go:
    """``Send(node, payload)``."""

    node: str
    payload: Any


@dataclass(frozen=True)
class Cmd:
    """``Command(update=..., goto=...)``; with ``parent``, ``Command(graph=Command.PARENT, ...)``."""

    update: dict[str, Any] | None = None
    goto: Any = ()
    parent: bool = False


@dataclass(frozen=True)
class Rm:
    """``RemoveMessage(id=...)``."""

    id: str


Reducer = Literal["add", "max", "messages"] | None
Kind = Literal["typeddict", "pydantic", "dataclass"]


def keep_max(old: int, new: int) -> int:
    """A custom reducer: it needs a start value of its field's type (``int()``), as ``operator.add`` does."""
    return max(old, new)


def ask(question: Any) -> Any:
    """``interrupt(question)`` of the engine running the node (set by :func:`run_langgraph` / :func:`run_graphckpt`)."""
    return _INTERRUPT[0](question)


_INTERRUPT: list[Callable[[Any], Any]] = [lambda q: pytest.fail("ask() outside a run")]


@dataclass
class Spec:
    fields: dict[str, tuple[type, Reducer]]
    nodes: dict[str, Callable[[dict[str, Any]], Any]]
    input: dict[str, Any]
    edges: list[tuple[str | tuple[str, ...], str]] = field(default_factory=list)
    branches: list[tuple[str, Callable[[dict[str, Any]], Any], Any]] = field(default_factory=list)
    destinations: dict[str, tuple[str, ...]] = field(default_factory=dict)
    kind: Kind = "typeddict"
    subgraphs: dict[str, Spec] = field(default_factory=dict)
    """Nodes that are compiled graphs (their node functions are in their own spec)."""
    answer: Callable[[Any], Any] | None = None
    """How the run answers an ``ask(question)``: every open interrupt is answered by id, until none is left."""

    def defaults(self) -> dict[str, Any]:
        """What an unset field reads as in a pydantic or dataclass state (every field defaults to its type's empty
        value)."""
        return {name: tp() for name, (tp, _) in self.fields.items()} if self.kind != "typeddict" else {}


@dataclass
class Outcome:
    final: dict[str, Any]
    history: list[tuple[dict[str, Any], list[str]]]
    """Per checkpoint, oldest first: the values and the sorted names of the nodes to run next."""
    calls: dict[str, int]
    subgraphs: list[tuple[tuple[str, ...], list[tuple[dict[str, Any], list[str]]]]] = field(default_factory=list)
    """Each run of a subgraph, in the order they started: its node path and its checkpoints like ``history``."""


# -- the two engines -----------------------------------------------------------------------------------------------


class Engine:
    name: str
    ran: dict[tuple[str, int], dict[str, str]]
    """The nodes that ran in each step of each graph run (namespace ``""`` for the thread's own graph): task id ->
    node name (filled by the node wrappers; a task run again after an interrupt counts once)."""
    parent: str
    send: Callable[[str, Any], Any]
    command: Callable[..., Any]
    remove: Callable[[str], Any]
    add_messages: Callable[[Any, Any], Any]

    def out(self, value: Any) -> Any:
        """A neutral value (an update, a router's pick) in this engine's vocabulary."""
        if isinstance(value, Go):
            return self.send(value.node, value.payload)
        if isinstance(value, Rm):
            return self.remove(value.id)
        if isinstance(value, Cmd):
            if value.parent:
                return self.command(update=self.out(value.update), goto=self.out(value.goto), graph=self.parent)
            return self.command(update=self.out(value.update), goto=self.out(value.goto))
        if isinstance(value, list):
            return [self.out(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.out(v) for v in value)
        if isinstance(value, dict):
            return {k: self.out(v) for k, v in value.items()}
        return value

    def schema(self, spec: Spec) -> type[Any]:
        reducers = {"add": operator.add, "max": keep_max, "messages": self.add_messages}
        hints = {
            name: (Annotated[tp, reducers[r]] if r is not None else tp)  # type: ignore[valid-type]
            for name, (tp, r) in spec.fields.items()
        }
        if spec.kind == "typeddict":
            return TypedDict("State", hints, total=False)  # type: ignore[operator]
        if spec.kind == "dataclass":
            return dataclasses.make_dataclass(
                "State",
                [(n, h, dataclasses.field(default_factory=spec.fields[n][0])) for n, h in hints.items()],
            )
        definitions: dict[str, Any] = {
            name: (hint, pydantic.Field(default_factory=spec.fields[name][0])) for name, hint in hints.items()
        }
        return pydantic.create_model("State", **definitions)


class LangGraph(Engine):
    name = "langgraph"
    send = LGSend
    command = LGCommand
    parent = LGCommand.PARENT
    remove = staticmethod(lambda id: LGRemoveMessage(id=id))
    add_messages = staticmethod(lg_add_messages)


class Graphckpt(Engine):
    name = "graphckpt"
    send = gc.Send
    command = gc.Command
    parent = gc.Command.PARENT
    remove = staticmethod(gc.RemoveMessage)
    add_messages = staticmethod(gc.add_messages)


_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


def neutral(value: Any) -> Any:
    """A state (or payload) as the neutral node functions see it, and as outcomes compare: plain data."""
    if isinstance(value, BaseMessage):  # a pydantic model too: first
        return {"role": _ROLES.get(value.type, value.type), "content": value.content, "id": value.id}
    if isinstance(value, pydantic.BaseModel):
        return {k: neutral(getattr(value, k)) for k in type(value).model_fields}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: neutral(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {k: neutral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [neutral(v) for v in value]
    return value


def _build(engine: Engine, spec: Spec, builder: Any, calls: collections.Counter[str]) -> Any:
    g = builder(engine.schema(spec))

    def node(name: str, fn: Callable[[dict[str, Any]], Any]) -> Callable[..., Any]:
        def run(state: Any) -> Any:
            calls[name] += 1
            return engine.out(fn({**spec.defaults(), **neutral(state)}))

        if isinstance(engine, LangGraph):

            def run_lg(state, config):  # type: ignore[no-untyped-def]  # LangGraph wants no other annotation
                *outer, own = config["metadata"]["langgraph_checkpoint_ns"].split("|")
                step = config["metadata"]["langgraph_step"]
                engine.ran.setdefault(("|".join(outer), step), {})[own.partition(":")[2]] = name
                return run(state)

            return run_lg

        def run_gc(state: Any) -> Any:
            ctx = gc.current_context()
            engine.ran.setdefault(("|".join(ctx.namespace), ctx.step), {})[ctx.task_id] = name
            return run(state)

        return run_gc

    for name, fn in spec.nodes.items():
        dest = spec.destinations.get(name)
        if dest:
            g.add_node(name, node(name, fn), destinations=dest)
        else:
            g.add_node(name, node(name, fn))
    for name, child in spec.subgraphs.items():
        compiled = _build(engine, child, builder, calls).compile()
        dest = spec.destinations.get(name)
        if dest:
            g.add_node(name, compiled, destinations=dest)
        else:
            g.add_node(name, compiled)
    for source, target in spec.edges:
        g.add_edge(list(source) if isinstance(source, tuple) else source, target)
    for source, router, path_map in spec.branches:

        def route(state: Any, router: Callable[[dict[str, Any]], Any] = router) -> Any:
            return engine.out(router({**spec.defaults(), **neutral(state)}))

        if path_map is None:
            g.add_conditional_edges(source, route)
        else:
            g.add_conditional_edges(source, route, path_map)
    return g


def _normal(spec: Spec, values: Any) -> dict[str, Any]:
    return {**spec.defaults(), **neutral(values)}


def _ran(engine: Engine, namespace: str, step: int, subgraphs: Any = ()) -> list[str]:
    """What ran in ``step`` of the graph run ``namespace``: the wrapped nodes, and the subgraph nodes (not wrapped:
    the compiled graph is the node) as LangGraph's ``next`` names them (``subgraphs``)."""
    return sorted([*engine.ran.get((namespace, step), {}).values(), *subgraphs])


def _of(spec: Spec, names: Any) -> list[str]:
    return [n for n in names if n in spec.subgraphs]


def _subgraph_spec(spec: Spec, path: tuple[str, ...]) -> Spec:
    for name in path:
        spec = spec.subgraphs[name]
    return spec


def run_langgraph(spec: Spec) -> Outcome:
    from langgraph.types import interrupt as lg_interrupt

    calls: collections.Counter[str] = collections.Counter()
    engine = LangGraph()
    engine.ran = {}
    _INTERRUPT[0] = lg_interrupt
    saver = InMemorySaver()
    app = _build(engine, spec, LGStateGraph, calls).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "t"}}
    final = app.invoke(spec.input, config)
    while spec.answer is not None and app.get_state(config).interrupts:
        answers = {i.id: spec.answer(i.value) for i in app.get_state(config).interrupts}
        final = app.invoke(LGCommand(resume=answers), config)
    history = []
    for s in reversed(list(app.get_state_history(config))):
        assert s.metadata is not None
        step = s.metadata["step"]
        if step >= 0:
            history.append((_normal(spec, s.values), _ran(engine, "", step + 1, _of(spec, s.next))))
    runs: dict[str, list[Any]] = {}
    for c in saver.list(None):
        ns = c.config["configurable"]["checkpoint_ns"]
        if ns:
            runs.setdefault(ns, []).append(c)
    subgraphs = []
    for ns, cps in sorted(runs.items(), key=lambda item: min(c.checkpoint["id"] for c in item[1])):
        path = tuple(entry.partition(":")[0] for entry in ns.split("|"))
        child = _subgraph_spec(spec, path)
        own = sorted((c for c in cps if c.metadata["step"] >= 0), key=lambda c: c.metadata["step"])
        seen = []
        for c in own:
            at = {"configurable": {"thread_id": "t", "checkpoint_ns": ns, "checkpoint_id": c.checkpoint["id"]}}
            snap = app.get_state(at)
            ran = _ran(engine, ns, c.metadata["step"] + 1, _of(child, snap.next))
            seen.append((_normal(child, snap.values), ran))
        subgraphs.append((path, seen))
    final = {k: v for k, v in final.items() if k != "__interrupt__"}
    return Outcome(_normal(spec, final), history, dict(calls), subgraphs)


def run_graphckpt(spec: Spec) -> Outcome:
    calls: collections.Counter[str] = collections.Counter()
    engine = Graphckpt()
    engine.ran = {}
    _INTERRUPT[0] = gc.interrupt
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gc.GraphckptWarning)  # LangGraph compiles the same graph silently
        app = _build(engine, spec, gc.StateGraph, calls).compile(saver=gc.MemorySaver())
    with app:
        final = app.invoke(spec.input, thread_id="t")
        while spec.answer is not None and final.status == "interrupted":
            final = app.resume("t", {i.id: spec.answer(i.payload) for i in final.interrupts})
        everything = list(reversed(app.history("t", subgraphs=True)))
    history = [(_normal(spec, s.values), sorted(s.next)) for s in everything if not s.namespace]
    for i, (_, next_nodes) in enumerate(history):  # the frontier is what ran: the harness itself is checked here
        assert next_nodes == _ran(engine, "", i + 1, _of(spec, next_nodes))
    runs: dict[tuple[str, ...], list[gc.Snapshot]] = {}
    for s in everything:
        if s.namespace:
            runs.setdefault(s.namespace, []).append(s)
    subgraphs = []
    for namespace, snaps in runs.items():  # oldest first already: in the order the runs started
        path = tuple(entry.partition(":")[0] for entry in namespace)
        child = _subgraph_spec(spec, path)
        for s in snaps:
            assert sorted(s.next) == _ran(engine, "|".join(namespace), s.step + 1, _of(child, s.next))
        subgraphs.append((path, [(_normal(child, s.values), sorted(s.next)) for s in snaps]))
    return Outcome(_normal(spec, final.values), history, dict(calls), subgraphs)


def assert_parity(spec: Spec) -> Outcome:
    """Both engines give the same outcome. The subgraph runs are compared as a collection: the runs of subgraphs
    started in one step (Send tasks, parallel nodes) start in whichever order their threads get there, in either
    engine (CI saw the two Send tasks' runs listed n=2 first once); each run's own history is compared exactly."""
    expected = run_langgraph(spec)
    got = run_graphckpt(spec)
    assert sorted(got.subgraphs, key=repr) == sorted(expected.subgraphs, key=repr)
    assert dataclasses.replace(got, subgraphs=[]) == dataclasses.replace(expected, subgraphs=[])
    return expected


# -- hand-written cases --------------------------------------------------------------------------------------------

LOG: dict[str, tuple[type, Reducer]] = {"log": (list, "add"), "n": (int, None)}


def _say(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda s: {"log": [name]}


@pytest.mark.parametrize("kind", ["typeddict", "pydantic", "dataclass"])
def test_linear(kind: Kind) -> None:
    spec = Spec(
        fields={**LOG, "text": (str, None)},
        nodes={
            "a": lambda s: {"log": ["a"], "n": s["n"] + 1},
            "b": lambda s: {"text": s["text"] + "!", "log": ["b"]},
            "c": lambda s: {"n": s["n"] * 10},
        },
        input={"n": 1, "text": "hi"},
        edges=[(START, "a"), ("a", "b"), ("b", "c"), ("c", END)],
        kind=kind,
    )
    out = assert_parity(spec)
    assert out.final == {"log": ["a", "b"], "n": 20, "text": "hi!"}


@pytest.mark.parametrize("kind", ["typeddict", "pydantic", "dataclass"])
def test_loop_with_a_conditional_exit(kind: Kind) -> None:
    spec = Spec(
        fields=LOG,
        nodes={"work": lambda s: {"n": s["n"] + 1, "log": [s["n"]]}, "check": _say("check")},
        input={"n": 0},
        edges=[(START, "work"), ("work", "check")],
        branches=[("check", lambda s: "work" if s["n"] < 4 else END, None)],
        kind=kind,
    )
    out = assert_parity(spec)
    assert out.calls == {"work": 4, "check": 4}


def test_conditional_edges_with_a_path_map_and_a_list_of_targets() -> None:
    spec = Spec(
        fields=LOG,
        nodes={"a": _say("a"), "b": _say("b"), "c": _say("c"), "d": _say("d")},
        input={"n": 2},
        edges=[(START, "a"), ("b", "d"), ("c", "d"), ("d", END)],
        branches=[("a", lambda s: ["yes", "no"] if s["n"] > 1 else "no", {"yes": "b", "no": "c"})],
    )
    out = assert_parity(spec)
    assert out.calls["d"] == 1  # one task per step, however many edges lead there


def test_join_waits_for_every_source() -> None:
    spec = Spec(
        fields=LOG,
        nodes={"a": _say("a"), "b": _say("b"), "b2": _say("b2"), "c": _say("c")},
        input={},
        edges=[(START, "a"), (START, "b"), ("b", "b2"), (("a", "b2"), "c"), ("c", END)],
    )
    out = assert_parity(spec)
    assert out.final["log"] == ["a", "b", "b2", "c"]


def test_conditional_entry_point() -> None:
    spec = Spec(
        fields=LOG,
        nodes={"small": _say("small"), "big": _say("big")},
        input={"n": 7},
        branches=[(START, lambda s: "big" if s["n"] > 5 else "small", ["small", "big"])],
    )
    assert assert_parity(spec).final["log"] == ["big"]


def test_send_fan_out_and_a_join_of_the_workers() -> None:
    spec = Spec(
        fields={"log": (list, "add"), "total": (int, "add")},
        nodes={
            "plan": _say("plan"),
            "work": lambda s: {"log": [f"w{s['i']}"], "total": s["i"]},
            "sum": _say("sum"),
        },
        input={},
        edges=[(START, "plan"), ("work", "sum"), ("sum", END)],
        branches=[("plan", lambda s: [Go("work", {"i": i}) for i in (3, 1, 2)], None)],
    )
    out = assert_parity(spec)
    assert out.final == {"log": ["plan", "w3", "w1", "w2", "sum"], "total": 6}
    assert out.history[1][1] == ["work", "work", "work"]


def test_command_routing_without_destinations() -> None:
    spec = Spec(
        fields=LOG,
        nodes={
            "a": lambda s: Cmd(update={"log": ["a"], "n": s["n"] + 1}, goto="b" if s["n"] < 2 else "c"),
            "b": lambda s: Cmd(update={"log": ["b"]}, goto="a"),
            "c": lambda s: Cmd(update={"log": ["c"]}, goto=END),
        },
        input={"n": 0},
        edges=[(START, "a")],
    )
    out = assert_parity(spec)
    assert out.final["log"] == ["a", "b", "a", "b", "a", "c"]


def test_command_with_send_and_declared_destinations() -> None:
    spec = Spec(
        fields={"log": (list, "add")},
        nodes={
            "a": lambda s: Cmd(update={"log": ["a"]}, goto=[Go("w", {"x": "p"}), Go("w", {"x": "q"})]),
            "w": lambda s: {"log": [s["x"]]},
        },
        input={},
        edges=[(START, "a")],
        destinations={"a": ("w",)},
    )
    assert assert_parity(spec).final["log"] == ["a", "p", "q"]


def test_a_node_without_outgoing_edges_ends_its_branch() -> None:
    spec = Spec(
        fields=LOG,
        nodes={"a": _say("a"), "tail": _say("tail")},
        input={},
        edges=[(START, "a"), ("a", "tail")],
    )
    assert assert_parity(spec).final["log"] == ["a", "tail"]


@pytest.mark.parametrize("kind", ["typeddict", "pydantic", "dataclass"])
def test_reducers_start_at_their_types_empty_value(kind: Kind) -> None:
    spec = Spec(
        fields={"log": (list, "add"), "best": (int, "max"), "untouched": (list, "add"), "total": (int, "add")},
        nodes={"a": lambda s: {"best": 3, "total": 2}, "b": lambda s: {"best": 1, "total": 5, "log": ["b"]}},
        input={"log": ["in"]},
        edges=[(START, "a"), ("a", "b"), ("b", END)],
        kind=kind,
    )
    out = assert_parity(spec)
    assert out.final == {"log": ["in", "b"], "best": 3, "untouched": [], "total": 7}


def test_add_messages_appends_replaces_and_removes_by_id() -> None:
    def m(role: str, content: str, id: str) -> dict[str, Any]:
        return {"role": role, "content": content, "id": id}

    spec = Spec(
        fields={"messages": (list, "messages")},
        nodes={
            "answer": lambda s: {"messages": [m("assistant", f"seen {len(s['messages'])}", "a1")]},
            "edit": lambda s: {"messages": [m("assistant", "edited", "a1"), m("user", "more", "u2")]},
            "forget": lambda s: {"messages": [Rm("u1")]},
        },
        input={"messages": [m("user", "hi", "u1")]},
        edges=[(START, "answer"), ("answer", "edit"), ("edit", "forget"), ("forget", END)],
    )
    out = assert_parity(spec)
    assert out.final == {"messages": [m("assistant", "edited", "a1"), m("user", "more", "u2")]}


# -- routing and write order within a step ----------------------------------


def test_parallel_writes_apply_in_sorted_task_order() -> None:
    """Item 3: LangGraph applies a step's writes in its task order (node names sorted); graphckpt in routing order
    (the order the edges were added: z before a)."""
    spec = Spec(
        fields={"log": (list, "add")},
        nodes={"z": _say("z"), "a": _say("a")},
        input={},
        edges=[(START, "z"), (START, "a"), ("z", END), ("a", END)],
    )
    assert_parity(spec)


def test_a_router_sees_the_start_of_its_step_plus_its_own_writes() -> None:
    """Item 2: LangGraph evaluates a's router on the step's starting state plus a's writes, so b's write of ``seen``
    in the same step is invisible to it; graphckpt routes on the state after the whole step."""
    spec = Spec(
        fields={"log": (list, "add"), "seen": (int, "add")},
        nodes={"a": _say("a"), "b": lambda s: {"seen": 1}, "c": _say("c")},
        input={},
        edges=[(START, "a"), (START, "b"), ("c", END)],
        branches=[("a", lambda s: "c" if s["seen"] else END, None)],
    )
    assert_parity(spec)


# -- deliberate differences -----------------------------------------------------------------------------------------


def test_difference_parallel_writes_to_a_plain_field() -> None:
    """LangGraph refuses two writes to a plain field in one step; graphckpt keeps the last in task order (an
    ``Annotated`` reducer field is the portable way)."""
    spec = Spec(
        fields={"x": (str, None)},
        nodes={"a": lambda s: {"x": "a"}, "b": lambda s: {"x": "b"}},
        input={},
        edges=[(START, "a"), (START, "b"), ("a", END), ("b", END)],
    )
    with pytest.raises(LGInvalidUpdateError):
        run_langgraph(spec)
    assert run_graphckpt(spec).final == {"x": "b"}


@pytest.mark.parametrize("limit", [1, 5])
def test_recursion_limit_allows_the_same_node_steps(limit: int) -> None:
    """LangGraph numbers its input checkpoint -1 and its ``__start__`` step 0, graphckpt its input checkpoint 0, but
    a limit of n lets both run n node steps before they raise."""
    calls = {"langgraph": 0, "graphckpt": 0}

    def build(engine: Engine, builder: Any) -> Any:
        g = builder(engine.schema(Spec(fields=LOG, nodes={}, input={})))

        def spin(state: Any) -> dict[str, Any]:
            calls[engine.name] += 1
            return {"n": 1}

        g.add_node("spin", spin)
        g.add_edge(START, "spin")
        g.add_edge("spin", "spin")
        return g

    with pytest.raises(GraphRecursionError):
        build(LangGraph(), LGStateGraph).compile(checkpointer=InMemorySaver()).invoke(
            {}, {"configurable": {"thread_id": "t"}, "recursion_limit": limit}
        )
    with pytest.warns(gc.GraphckptWarning, match="no path to END"):
        app = build(Graphckpt(), gc.StateGraph).compile(recursion_limit=limit)
    with pytest.raises(gc.RecursionLimitError):
        app.invoke({}, thread_id="t")
    app.close()
    assert calls == {"langgraph": limit, "graphckpt": limit}


def test_the_default_recursion_limit_is_langgraphs() -> None:
    from langgraph._internal._config import DEFAULT_RECURSION_LIMIT  # private, but where LangGraph keeps it

    default = inspect.signature(gc.StateGraph.compile).parameters["recursion_limit"].default
    assert default == gc.graph.DEFAULT_RECURSION_LIMIT == int(DEFAULT_RECURSION_LIMIT)


# -- seeded random graphs ------------------------------------------------------------------------------------------

STEPS = 6
"""Routers of random graphs end the run once the ``steps`` counter reaches this."""


def random_spec(seed: int, *, parallel: bool) -> Spec:
    """A random graph of 3-6 nodes. Each node counts a step and logs its name; after it comes a forward static edge,
    a router (which may loop back: it ends the run after ``STEPS`` steps) or a ``Command``. ``parallel`` graphs
    also fan out (two edges, a router's list, ``Send`` to a worker) and join."""
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(rng.randint(3, 6))]
    fields: dict[str, tuple[type, Reducer]] = {"log": (list, "add"), "steps": (int, "add"), "best": (int, "max")}
    if not parallel:
        fields["last"] = (str, None)
    nodes: dict[str, Callable[[dict[str, Any]], Any]] = {}
    edges: list[tuple[str | tuple[str, ...], str]] = [(START, names[0])]
    branches: list[tuple[str, Callable[[dict[str, Any]], Any], Any]] = []
    if parallel:
        nodes["worker"] = lambda s: {"log": [f"w{s['item']}"], "best": s["item"]}
    for i, name in enumerate(names):
        later = names[i + 1 :]
        shape = rng.choice(["edge", "router", "command"] if later else ["router", "command"])
        targets = rng.sample(names, k=min(len(names), rng.randint(1, 3)))
        width = rng.choice([1, 2]) if parallel else 1
        update = {"log": [name], "steps": 1, "best": i, **({} if parallel else {"last": name})}

        def pick(s: dict[str, Any], targets: list[str] = targets, width: int = width) -> list[str]:
            at = s["steps"] + len(s["log"])
            return sorted({targets[(at + k) % len(targets)] for k in range(width)})

        if shape == "edge":
            for target in rng.sample(later, k=min(len(later), width)):
                edges.append((name, target))
            nodes[name] = lambda s, update=update: update
        elif shape == "router":
            sends = parallel and rng.random() < 0.3

            def router(s: dict[str, Any], pick: Callable[..., list[str]] = pick, sends: bool = sends) -> Any:
                if s["steps"] >= STEPS:
                    return END
                chosen: list[Any] = list(pick(s))
                if sends:
                    chosen += [Go("worker", {"item": s["steps"] + k}) for k in range(2)]
                return chosen

            branches.append((name, router, None))
            nodes[name] = lambda s, update=update: update
        else:

            def command(s: dict[str, Any], update: dict[str, Any] = update, pick: Any = pick) -> Cmd:
                done = s["steps"] + 1 >= STEPS
                return Cmd(update=update, goto=END if done else pick(s))

            nodes[name] = command
    if parallel and len(names) >= 4 and rng.random() < 0.5:
        edges.append(((names[1], names[2]), names[-1]))
    return Spec(fields=fields, nodes=nodes, input={}, edges=edges, branches=branches, kind=rng.choice(KINDS))


KINDS: list[Kind] = ["typeddict", "pydantic", "dataclass"]


@pytest.mark.parametrize("seed", range(10))
def test_random_sequential_graph(seed: int) -> None:
    assert_parity(random_spec(seed, parallel=False))


@pytest.mark.parametrize("seed", range(100, 110))
def test_random_parallel_graph(seed: int) -> None:
    assert_parity(random_spec(seed, parallel=True))


# -- subgraphs and interrupts --------------------------------------------------------------

INNER: dict[str, tuple[type, Reducer]] = {"log": (list, "add"), "n": (int, None), "note": (str, None)}


def _inner(**kw: Any) -> Spec:
    """A subgraph sharing ``log`` and ``n`` with its parent; ``note`` is its own."""
    nodes = {"i1": lambda s: {"log": ["i1"], "n": s["n"] + 1, "note": "x"}, "i2": lambda s: {"log": [f"i2:{s['n']}"]}}
    defaults: dict[str, Any] = {
        "fields": INNER,
        "nodes": nodes,
        "input": {},
        "edges": [(START, "i1"), ("i1", "i2"), ("i2", END)],
    }
    return Spec(**{**defaults, **kw})


@pytest.mark.parametrize("kind", ["typeddict", "pydantic"])
def test_subgraph_as_a_node_shares_keys(kind: Kind) -> None:
    """The child reads the parent's shared fields; its output (shared fields) is the node's update, folded by the
    parent's reducers (so ``log``'s input comes back once more, in both engines)."""
    spec = Spec(
        fields={**LOG, "only_parent": (str, None)},
        nodes={"a": _say("a"), "b": _say("b")},
        subgraphs={"sub": _inner(kind=kind)},
        input={"log": ["in"], "n": 1, "only_parent": "p"},
        edges=[(START, "a"), ("a", "sub"), ("sub", "b"), ("b", END)],
        kind=kind,
    )
    out = assert_parity(spec)
    assert out.final["log"] == ["in", "a", "in", "a", "i1", "i2:2", "b"]
    assert [path for path, _ in out.subgraphs] == [("sub",)]


def test_nested_subgraphs() -> None:
    leaf = Spec(
        fields=INNER, nodes={"leaf": lambda s: {"log": ["leaf"], "n": s["n"] * 10}}, input={}, edges=[(START, "leaf")]
    )
    mid = Spec(
        fields=INNER, nodes={"m": _say("m")}, subgraphs={"deep": leaf}, input={}, edges=[(START, "m"), ("m", "deep")]
    )
    spec = Spec(
        fields=LOG, nodes={"z": _say("z")}, subgraphs={"mid": mid}, input={"n": 2}, edges=[(START, "mid"), ("mid", "z")]
    )
    out = assert_parity(spec)
    assert [path for path, _ in out.subgraphs] == [("mid",), ("mid", "deep")]


def test_send_to_a_subgraph_in_a_loop() -> None:
    """Several Send tasks run the subgraph, each on its own input; then the parent loops once more."""
    spec = Spec(
        fields={"log": (list, "add"), "n": (int, "add")},
        nodes={"plan": _say("plan"), "check": lambda s: {"n": 100}},
        subgraphs={
            "sub": _inner(
                fields={"log": (list, "add"), "n": (int, None)},
                nodes={"i1": lambda s: {"log": [f"i1:{s['n']}"]}, "i2": _say("i2")},
            )
        },
        input={},
        edges=[(START, "plan"), ("sub", "check")],
        branches=[
            ("plan", lambda s: [Go("sub", {"n": i, "log": []}) for i in (2, 1)], None),
            ("check", lambda s: "plan" if s["n"] < 300 else END, None),
        ],
    )
    out = assert_parity(spec)
    assert len(out.subgraphs) == 6  # three rounds of two


def test_command_parent_from_inside_a_subgraph() -> None:
    inner = _inner(
        nodes={
            "i1": _say("i1"),
            "i2": lambda s: Cmd(update={"log": ["up"], "n": 7}, goto="z", parent=True),
            "i3": _say("never"),
        },
        edges=[(START, "i1"), ("i1", "i2"), ("i2", "i3")],
    )
    spec = Spec(
        fields=LOG,
        nodes={"z": _say("z"), "after": _say("after")},
        subgraphs={"sub": inner},
        input={},
        edges=[(START, "sub"), ("sub", "after")],
        destinations={"sub": ("z",)},
    )
    out = assert_parity(spec)
    assert "never" not in out.final["log"] and out.final["n"] == 7


def _asking(name: str) -> Callable[[dict[str, Any]], Any]:
    return lambda s: {"log": [f"{name}:{ask(f'{name}?')}"]}


def test_interrupt_inside_a_subgraph() -> None:
    inner = _inner(nodes={"i1": _say("i1"), "i2": _asking("i2")})
    spec = Spec(
        fields=LOG,
        nodes={"a": _say("a"), "b": _say("b")},
        subgraphs={"sub": inner},
        input={},
        edges=[(START, "a"), ("a", "sub"), ("sub", "b")],
        answer=lambda q: q.upper(),
    )
    out = assert_parity(spec)
    assert out.calls == {"a": 1, "i1": 1, "i2": 2, "b": 1}  # the child resumed from inside: i1 ran once
    assert out.final["log"][-2:] == ["i2:I2?", "b"]


def test_interrupts_inside_send_tasks() -> None:
    """Three Send tasks each ask; one resume answers all (by interrupt id); each asking task runs twice."""
    spec = Spec(
        fields={"log": (list, "add")},
        nodes={"plan": _say("plan"), "w": lambda s: {"log": [f"w{s['i']}:{ask(s['i'])}"]}, "done": _say("done")},
        input={},
        edges=[(START, "plan"), ("w", "done")],
        branches=[("plan", lambda s: [Go("w", {"i": i}) for i in (3, 1, 2)], None)],
        answer=lambda q: q * 10,
    )
    out = assert_parity(spec)
    assert out.calls == {"plan": 1, "w": 6, "done": 1}
    assert out.final["log"] == ["plan", "w3:30", "w1:10", "w2:20", "done"]


def test_interrupts_inside_send_tasks_answered_one_by_one() -> None:
    """Only some Send tasks ask; the others' results are kept while the askers wait."""
    spec = Spec(
        fields={"log": (list, "add")},
        nodes={"plan": _say("plan"), "w": lambda s: {"log": [f"w{s['i']}:{ask(s['i']) if s['i'] % 2 else '-'}"]}},
        input={},
        edges=[(START, "plan")],
        branches=[("plan", lambda s: [Go("w", {"i": i}) for i in range(4)], None)],
        answer=lambda q: f"a{q}",
    )
    out = assert_parity(spec)
    assert out.calls == {"plan": 1, "w": 6}


def test_interrupts_inside_subgraphs_run_by_send_tasks() -> None:
    """Two Send tasks run a subgraph that asks twice, one question after the other: both parent tasks wait at once,
    one resume (by ids) answers both, and each child resumes from inside."""
    inner = _inner(
        fields={"log": (list, "add"), "n": (int, None)},
        nodes={"i1": lambda s: {"log": [f"i1:{s['n']}:{ask(s['n'])}"]}, "i2": lambda s: {"log": [ask(-s["n"])]}},
    )
    spec = Spec(
        fields={"log": (list, "add")},
        nodes={"plan": _say("plan")},
        subgraphs={"sub": inner},
        input={},
        edges=[(START, "plan")],
        branches=[("plan", lambda s: [Go("sub", {"n": i, "log": []}) for i in (1, 2)], None)],
        answer=lambda q: q * 100,
    )
    out = assert_parity(spec)
    assert out.calls == {"plan": 1, "i1": 4, "i2": 4}


def test_two_parallel_interrupts_inside_one_subgraph() -> None:
    """Two nodes of one subgraph ask in the same step: both questions surface in the parent at once, one resume
    (by ids) answers both."""
    inner = Spec(
        fields={"log": (list, "add")},
        nodes={"p": lambda s: {"log": [ask("p")]}, "q": lambda s: {"log": [ask("q")]}},
        input={},
        edges=[(START, "p"), (START, "q")],
    )
    spec = Spec(
        fields={"log": (list, "add")},
        nodes={},
        subgraphs={"sub": inner},
        input={},
        edges=[(START, "sub")],
        answer=lambda q: q.upper(),
    )
    out = assert_parity(spec)
    assert out.calls == {"p": 2, "q": 2} and out.final == {"log": ["P", "Q"]}
