"""``StateGraph``: the builder. Declare nodes and edges; ``compile()`` validates them and freezes a copy into a
:class:`~graphckpt.compiled.CompiledGraph` bound to a saver as an :class:`~graphckpt.app.App`."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from graphckpt.app import App
from graphckpt.compiled import CompiledGraph
from graphckpt.control import END, START
from graphckpt.errors import GraphSetupError
from graphckpt.retry import RetryPolicy
from graphckpt.state import StateSchema

if TYPE_CHECKING:
    import networkx

    from graphckpt.savers.base import Saver

__all__ = ["Branch", "Join", "NodeSpec", "StateGraph"]

Migration = Callable[[dict[str, Any]], dict[str, Any]]
"""Upgrades the stored values of a checkpoint written by schema version ``v`` to version ``v + 1``."""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A node as registered: its function and how to call it."""

    name: str
    fn: Callable[..., Any]
    takes_ctx: bool
    is_async: bool
    retry: RetryPolicy | None
    timeout: float | None
    destinations: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Branch:
    """A conditional edge: ``router(state)`` picks the next node(s) after ``source``."""

    source: str
    router: Callable[[Any], Any]
    path_map: Mapping[Hashable, str] | None


@dataclass(frozen=True, slots=True)
class Join:
    """``target`` runs once every one of ``sources`` has finished (since it last ran)."""

    sources: tuple[str, ...]
    target: str

    @property
    def key(self) -> str:
        return f"{'+'.join(self.sources)}->{self.target}"


class StateGraph:
    """A graph of nodes over a state schema. Build it, then :meth:`compile` it with a saver.

    ``version`` is the schema version recorded in every checkpoint; ``migrations[v]`` upgrades the values of a
    checkpoint written by version ``v`` to ``v + 1`` when it is loaded.
    """

    def __init__(self, schema: type[Any], *, version: int = 1, migrations: Mapping[int, Migration] | None = None):
        self.state = StateSchema(schema)
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
        name: str | Callable[..., Any],
        fn: Callable[..., Any] | None = None,
        *,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        destinations: Iterable[str] = (),
    ) -> StateGraph:
        """Add a node. ``fn(state)`` or ``fn(state, ctx)``, sync or async, returns a partial update dict, a
        :class:`~graphckpt.Command`, or ``None``. ``add_node(fn)`` uses ``fn.__name__``. ``timeout`` (seconds)
        bounds each attempt; ``destinations`` names the nodes a ``Command(goto=...)`` may send to (for validation
        and drawing)."""
        if fn is None:
            if not callable(name):
                raise GraphSetupError(f"add_node({name!r}) needs a function")
            fn, name = name, getattr(name, "__name__", "")
        if not isinstance(name, str) or not name:
            raise GraphSetupError(f"node name must be a non-empty string, not {name!r}")
        if name in (START, END) or name in self.nodes:
            raise GraphSetupError(f"node {name!r} is {'reserved' if name in (START, END) else 'already defined'}")
        if not callable(fn):
            raise GraphSetupError(f"node {name!r}: {fn!r} is not callable")
        if timeout is not None and timeout <= 0:
            raise GraphSetupError(f"node {name!r}: timeout must be positive seconds, not {timeout!r}")
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
        """Raise :class:`GraphSetupError` naming the nodes if the structure is wrong.

        Checks unknown nodes in edges and path maps, nodes unreachable from START, nodes with no path to END. A
        conditional edge without ``path_map`` may lead anywhere. (Plain breadth-first search, so compiling stays
        cheap on the resume path; :meth:`to_networkx` gives the same graph for deeper analysis.)
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
            raise GraphSetupError("the graph has no entry: add_edge(START, 'first_node')")
        reachable = _reach(START, succ)
        unreachable = sorted(known - reachable)
        if unreachable:
            raise GraphSetupError(f"node(s) unreachable from START: {', '.join(unreachable)}")
        pred: dict[str, set[str]] = {n: set() for n in succ}
        for n, targets in succ.items():
            for t in targets:
                pred[t].add(n)
        stuck = sorted(known - _reach(END, pred))
        if stuck:
            raise GraphSetupError(
                f"node(s) with no path to END: {', '.join(stuck)} (add an edge to END, or declare the "
                "destinations of a node that routes with Command)"
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
        )

    def compile(
        self,
        saver: Saver | None = None,
        *,
        interrupt_before: Iterable[str] = (),
        interrupt_after: Iterable[str] = (),
        recursion_limit: int = 100,
        snapshot_every: int = 1000,
    ) -> App:
        """Validate, freeze and return the runnable :class:`~graphckpt.app.App`. The app runs a copy of the graph
        as it is now: adding nodes or edges to this builder afterwards does not change it.

        ``saver=None`` keeps checkpoints in a private :class:`~graphckpt.savers.memory.MemorySaver`.
        ``recursion_limit`` bounds the super-steps of one run. ``snapshot_every`` is N of the storage rule: a
        reducer channel stores a full snapshot every N versions and deltas in between.
        """
        self.validate()
        for name in (*interrupt_before, *interrupt_after):
            if name not in self.nodes:
                raise GraphSetupError(f"interrupt on unknown node {name!r}")
        if recursion_limit < 1 or snapshot_every < 1:
            raise GraphSetupError("recursion_limit and snapshot_every must be at least 1")
        graph = self._freeze(frozenset(interrupt_before), frozenset(interrupt_after))
        return App(graph, saver, recursion_limit=recursion_limit, snapshot_every=snapshot_every)

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
