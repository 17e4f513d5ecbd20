"""``StateGraph``: the builder. Declare nodes and edges; ``compile()`` validates them and freezes a copy into a
:class:`~graphckpt.compiled.CompiledGraph` bound to a saver as an :class:`~graphckpt.app.App`."""

from __future__ import annotations

import inspect
import typing
import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from graphckpt.app import App
from graphckpt.compiled import Branch, CompiledGraph, Join, Migration, NodeSpec
from graphckpt.control import END, START
from graphckpt.errors import GraphckptWarning, GraphSetupError
from graphckpt.retry import RetryPolicy
from graphckpt.state import StateSchema
from graphckpt.subgraph import SubgraphNode

if TYPE_CHECKING:
    import networkx

    from graphckpt.savers.base import Saver

__all__ = ["Branch", "Join", "NodeSpec", "StateGraph"]

# Branch, Join, Migration and NodeSpec live with the frozen graph (graphckpt.compiled); the builder re-exports them

DEFAULT_RECURSION_LIMIT = 10007
"""The default ``recursion_limit`` of :meth:`StateGraph.compile`: LangGraph 1.x's default (1.2 reads it from
``LANGGRAPH_DEFAULT_RECURSION_LIMIT``, else 10007), so a loop that finishes under LangGraph's default finishes here."""

ALL_NODES = "*"
"""``interrupt_before="*"`` / ``interrupt_after="*"``: every node."""


class StateGraph:
    """A graph of nodes over a state schema. Build it, then :meth:`compile` it with a saver.

    ``version`` is the schema version recorded in every checkpoint; ``migrations[v]`` upgrades the values of a
    checkpoint written by version ``v`` to ``v + 1`` when it is loaded.
    """

    def __init__(
        self,
        schema: type[Any],
        *,
        input_schema: type[Any] | None = None,
        output_schema: type[Any] | None = None,
        version: int = 1,
        migrations: Mapping[int, Migration] | None = None,
    ):
        self.state = StateSchema(schema)
        self.input_schema = _sub_schema(self.state, input_schema, "input_schema")
        """The fields an input may carry (validated with this schema), or ``None``: any state field."""
        self.output_schema = _sub_schema(self.state, output_schema, "output_schema")
        """The fields a run's result shows, or ``None``: the whole state."""
        self.version = version
        self.migrations = dict(migrations or {})
        bad = [v for v in self.migrations if not 1 <= v < version]
        if bad:
            raise GraphSetupError(f"migrations for versions {bad} do not upgrade towards version {version}")
        self.nodes: dict[str, NodeSpec] = {}
        self.edges: list[tuple[str, str]] = []
        self.joins: list[Join] = []
        self.branches: list[Branch] = []

    # -- building ----------------------------------------------------------------------------------------------------

    def add_node(
        self,
        name: str | Callable[..., Any] | App,
        fn: Callable[..., Any] | App | None = None,
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        destinations: Iterable[str] | Mapping[str, str] = (),
        retry_policy: RetryPolicy | None = None,
    ) -> StateGraph:
        """Add a node. ``fn`` may be a compiled graph (``StateGraph(...).compile()``): a subgraph, run on a child
        thread of the parent's thread in the parent's saver (see :mod:`graphckpt.subgraph`). ``fn(state)`` or
        ``fn(state, ctx)``, sync or async, returns a partial update dict, a
        :class:`~graphckpt.Command`, or ``None``. ``add_node(fn)`` uses ``fn.__name__``. ``timeout`` (seconds)
        bounds each attempt; ``destinations`` names the nodes a ``Command(goto=...)`` may send to (for validation
        and drawing; a mapping's keys are the nodes, as in LangGraph, where its values are edge labels).
        ``retry_policy`` is LangGraph's name for ``retry``.

        A second parameter named ``config`` (or annotated ``RunnableConfig``) is refused: graphckpt would pass its
        :class:`~graphckpt.Context` there, not a LangGraph config. Declare ``(state, ctx)`` or ``(state)``."""
        if fn is None:
            if isinstance(name, App):
                raise GraphSetupError("add_node(compiled_graph) needs a name: add_node('name', compiled_graph)")
            if not callable(name):
                raise GraphSetupError(f"add_node({name!r}) needs a function")
            fn, name = name, getattr(name, "__name__", "")
        if not isinstance(name, str) or not name:
            raise GraphSetupError(f"node name must be a non-empty string, not {name!r}")
        if name in (START, END) or name in self.nodes:
            raise GraphSetupError(f"node {name!r} is {'reserved' if name in (START, END) else 'already defined'}")
        if isinstance(fn, App):  # a compiled graph as a node: a subgraph (see graphckpt.subgraph)
            fn = SubgraphNode(name, fn.graph, fn.codec)
        if not callable(fn):
            raise GraphSetupError(f"node {name!r}: {fn!r} is not callable")
        if timeout is not None and timeout <= 0:
            raise GraphSetupError(f"node {name!r}: timeout must be positive seconds, not {timeout!r}")
        _refuse_config_parameter(fn, name)
        if retry_policy is not None:
            if retry is not None:
                raise GraphSetupError(f"node {name!r}: give retry= or retry_policy= (the same), not both")
            retry = retry_policy
        self.nodes[name] = NodeSpec(
            name=name,
            fn=fn,
            takes_ctx=_positional_arity(fn, name) >= 2,
            is_async=inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__),
            retry=retry,
            timeout=timeout,
            destinations=tuple(destinations),
        )
        return self

    def add_edge(self, source: str | Sequence[str], target: str) -> StateGraph:
        """``add_edge(a, b)``: ``b`` runs after ``a``. ``add_edge([a, b], c)``: ``c`` waits for both (a join)."""
        if isinstance(source, str):
            if source == END:
                raise GraphSetupError("END has no outgoing edges")
            self.edges.append((source, target))
        else:
            sources = tuple(source)
            if not sources:
                raise GraphSetupError(f"add_edge([], {target!r}): a join needs at least one source")
            if len(sources) == 1:
                return self.add_edge(sources[0], target)
            self.joins.append(Join(sources, target))
        return self

    def add_sequence(self, nodes: Sequence[Callable[..., Any] | tuple[str, Callable[..., Any]]]) -> StateGraph:
        """Add ``nodes`` (functions, named by ``__name__``, or ``(name, fn)`` pairs) and an edge from each to the
        next. No edge from START or to END is added."""
        if not nodes:
            raise GraphSetupError("add_sequence() needs at least one node")
        previous: str | None = None
        for item in nodes:
            if isinstance(item, tuple):
                name, fn = item
            else:
                name, fn = getattr(item, "__name__", ""), item
            self.add_node(name, fn)
            if previous is not None:
                self.add_edge(previous, name)
            previous = name
        return self

    def set_entry_point(self, node: str) -> StateGraph:
        """``add_edge(START, node)``."""
        return self.add_edge(START, node)

    def set_conditional_entry_point(
        self, router: Callable[[Any], Any], path_map: Mapping[Hashable, str] | Sequence[str] | None = None
    ) -> StateGraph:
        """``add_conditional_edges(START, router, path_map)``: the router picks the first node(s) from the input."""
        return self.add_conditional_edges(START, router, path_map)

    def set_finish_point(self, node: str) -> StateGraph:
        """``add_edge(node, END)``."""
        return self.add_edge(node, END)

    def add_conditional_edges(
        self,
        source: str,
        router: Callable[[Any], Any],
        path_map: Mapping[Hashable, str] | Sequence[str] | None = None,
    ) -> StateGraph:
        """After ``source``, ``router(state)`` returns a node name, a list of names, ``END``, or ``Send`` objects.
        With ``path_map`` the router's return values are looked up in it (a list maps each name to itself)."""
        if not callable(router):
            raise GraphSetupError(f"router for {source!r} is not callable")
        mapping: Mapping[Hashable, str] | None
        if path_map is None:
            mapping = None
        elif isinstance(path_map, Mapping):
            mapping = dict(path_map)
        else:
            mapping = {name: name for name in path_map}
        self.branches.append(Branch(source, router, mapping))
        return self

    # -- validation and compilation --------------------------------------------------------------------------------

    def validate(self) -> None:
        """Raise :class:`GraphSetupError` naming the nodes if the structure is wrong; warn
        (:class:`~graphckpt.errors.GraphckptWarning`) where it runs but is likely a mistake.

        Errors: unknown nodes in edges, path maps and destinations; no edge from START. Warnings, as LangGraph runs
        such graphs: nodes unreachable from START, nodes from which END cannot be reached (a loop with no exit). A
        conditional edge without ``path_map`` may lead anywhere, and so may a node with no outgoing edges and no
        ``destinations`` (it may route with ``Command(goto=...)``; when it does not, its branch ends there). (Plain
        breadth-first search, so compiling stays cheap on the resume path; :meth:`to_networkx` gives the same graph
        for deeper analysis.)
        """
        known = set(self.nodes)
        problems: list[str] = []
        for a, b in self.edges:
            problems += [f"edge {a!r} -> {b!r}: unknown node {n!r}" for n in (a, b) if n not in known | {START, END}]
        for join in self.joins:
            for n in (*join.sources, join.target):
                if n not in known:
                    problems.append(f"join {join.key}: unknown node {n!r}")
        for br in self.branches:
            if br.source not in known | {START}:
                problems.append(f"conditional edge from unknown node {br.source!r}")
            for key, target in (br.path_map or {}).items():
                if target not in known | {END}:
                    problems.append(
                        f"conditional edge from {br.source!r}: path_map[{key!r}] -> unknown node {target!r}"
                    )
        for spec in self.nodes.values():
            problems += [
                f"node {spec.name!r}: unknown destination {d!r}" for d in spec.destinations if d not in known | {END}
            ]
        if problems:
            raise GraphSetupError("; ".join(problems))
        succ = self.successors()
        if not succ[START]:
            raise GraphSetupError("the graph has no entry: add_edge(START, 'first_node') or set_entry_point(...)")
        for n in known:
            if not succ[n]:  # may route anywhere with Command(goto=...), or end its branch
                succ[n] = known | {END}
        unreachable = sorted(known - _reach(START, succ))
        if unreachable:
            warnings.warn(
                f"node(s) unreachable from START never run: {', '.join(unreachable)} (if a node goes there with "
                "Command(goto=...), declare it: add_node(..., destinations=[...]))",
                GraphckptWarning,
                stacklevel=3,
            )
        pred: dict[str, set[str]] = {n: set() for n in succ}
        for n, targets in succ.items():
            for t in targets:
                pred[t].add(n)
        stuck = sorted(known - _reach(END, pred) - set(unreachable))
        if stuck:
            warnings.warn(
                f"node(s) with no path to END: {', '.join(stuck)}: a run that reaches them loops until "
                "recursion_limit (add an edge or a conditional edge to END)",
                GraphckptWarning,
                stacklevel=3,
            )

    def successors(self) -> dict[str, set[str]]:
        """Every node's possible next nodes (START and END included)."""
        return self._freeze().successors()

    def _freeze(
        self, interrupt_before: frozenset[str] = frozenset(), interrupt_after: frozenset[str] = frozenset()
    ) -> CompiledGraph:
        """An immutable copy of the structure as it is now (not validated)."""
        return CompiledGraph(
            state=self.state,
            version=self.version,
            migrations=self.migrations,
            nodes=self.nodes,
            edges=tuple(self.edges),
            joins=tuple(self.joins),
            branches=tuple(self.branches),
            interrupt_before=interrupt_before,
            interrupt_after=interrupt_after,
            input_schema=self.input_schema,
            output_schema=self.output_schema,
        )

    def compile(
        self,
        saver: Saver | None = None,
        *,
        interrupt_before: Iterable[str] | str = (),
        interrupt_after: Iterable[str] | str = (),
        recursion_limit: int = DEFAULT_RECURSION_LIMIT,
        snapshot_every: int = 1000,
        lease_seconds: float | None = None,
    ) -> App:
        """Validate, freeze and return the runnable :class:`~graphckpt.app.App`. The app runs a copy of the graph
        as it is now: adding nodes or edges to this builder afterwards does not change it.

        ``saver=None`` keeps checkpoints in a private :class:`~graphckpt.savers.memory.MemorySaver`.
        ``interrupt_before`` / ``interrupt_after``: node names, or ``"*"`` for every node. ``recursion_limit``
        bounds the node super-steps of one run (default :data:`DEFAULT_RECURSION_LIMIT`; graphckpt has no
        ``__start__`` step, so a limit of n runs n node steps where LangGraph runs n - 1). ``snapshot_every`` is N of
        the storage rule: a reducer channel stores a full snapshot every N versions and deltas in between.
        ``lease_seconds``: how long a run's lease on its thread lasts without a heartbeat (renewed every third of
        it; default ``$GRAPHCKPT_LEASE_SECONDS``, else 30): a thread whose process died shows as ``crashed`` that
        long after its last heartbeat.
        """
        self.validate()
        interrupt_before = self._interrupt_nodes(interrupt_before, "interrupt_before")
        interrupt_after = self._interrupt_nodes(interrupt_after, "interrupt_after")
        for name in (*interrupt_before, *interrupt_after):
            if name not in self.nodes:
                raise GraphSetupError(f"interrupt on unknown node {name!r}")
        if recursion_limit < 1 or snapshot_every < 1:
            raise GraphSetupError("recursion_limit and snapshot_every must be at least 1")
        graph = self._freeze(frozenset(interrupt_before), frozenset(interrupt_after))
        return App(
            graph, saver, recursion_limit=recursion_limit, snapshot_every=snapshot_every, lease_seconds=lease_seconds
        )

    def _interrupt_nodes(self, names: Iterable[str] | str, what: str) -> tuple[str, ...]:
        if names == ALL_NODES:
            return tuple(self.nodes)
        if isinstance(names, str):
            raise GraphSetupError(f'{what} takes a list of node names or "*", not the string {names!r}')
        return tuple(names)

    def validate_input(self, input: Any) -> dict[str, Any]:
        """``input`` checked as a run's input (see :meth:`CompiledGraph.validate_input`)."""
        return self._freeze().validate_input(input)

    def output(self, values: Mapping[str, Any]) -> Any:
        """What a run's output shows of the state ``values`` (see :meth:`CompiledGraph.output`)."""
        return self._freeze().output(values)

    # -- drawing -----------------------------------------------------------------------------------------------------

    def to_networkx(self) -> networkx.DiGraph:
        """The structure as a ``networkx.DiGraph``; edge attribute ``kind`` is ``edge``, ``join`` or ``branch``."""
        return self._freeze().to_networkx()

    def to_mermaid(self) -> str:
        """A mermaid ``flowchart`` of the graph: solid edges, dotted conditional edges, joins marked ``&``."""
        return self._freeze().to_mermaid()


def _reach(start: str, succ: Mapping[str, set[str]]) -> set[str]:
    seen, stack = {start}, [start]
    while stack:
        for nxt in succ.get(stack.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def _sub_schema(state: StateSchema, schema: type[Any] | None, what: str) -> StateSchema | None:
    if schema is None or schema is state.schema:
        return None
    sub = StateSchema(schema)
    extra = sorted(set(sub.channels) - set(state.channels))
    if extra:
        raise GraphSetupError(f"{what} has field(s) the state schema does not: {', '.join(extra)}")
    return sub


def _refuse_config_parameter(fn: Callable[..., Any], name: str) -> None:
    """A LangGraph node ``(state, config)`` expects a ``RunnableConfig``; graphckpt would pass its Context there."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    for i, p in enumerate(params):
        if i == 0 and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            continue  # the state
        hint = hints.get(p.name, p.annotation)
        annotated = "RunnableConfig" in (getattr(hint, "__name__", None) or str(hint))
        if (p.name == "config" and p.default is p.empty) or annotated:
            raise GraphSetupError(
                f"node {name!r}: its parameter {p.name!r} looks like LangGraph's RunnableConfig, which graphckpt "
                "does not pass; declare the node (state) or (state, ctx) and read the thread, step and node from "
                "ctx (ctx.thread_id, ctx.step, ctx.node)"
            )


def _positional_arity(fn: Callable[..., Any], name: str) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 1
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 2
    required = [p for p in positional if p.default is p.empty]
    if not positional or len(required) > 2:
        raise GraphSetupError(f"node {name!r} must accept (state) or (state, ctx)")
    if len(positional) >= 2 and positional[1].default is not positional[1].empty and positional[1].name != "ctx":
        return 1  # fn(state, option=default): the second parameter is the function's own, not the context
    return len(positional)
