"""The frozen graph and its parts (:class:`NodeSpec`, :class:`Branch`, :class:`Join`, :data:`Migration`): what
``StateGraph.compile()`` returns to the app. It answers the engine's three questions
about structure: the next tasks after a step's results, the status a frontier gives the thread, and the tasks a
``goto`` names. Nothing done to the builder after ``compile()`` reaches it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from graphckpt.checkpoint import Interrupt, Task
from graphckpt.control import END, START, Send
from graphckpt.errors import InvalidUpdateError
from graphckpt.records import TaskResult
from graphckpt.retry import RetryPolicy
from graphckpt.savers.base import Status
from graphckpt.state import StateSchema

if TYPE_CHECKING:
    import networkx

__all__ = ["Branch", "CompiledGraph", "Join", "Migration", "NodeSpec", "RouteError"]

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


class RouteError(Exception):
    """Routing after ``task`` failed with ``cause`` (a router raised, or named an unknown node)."""

    def __init__(self, task: Task, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.task, self.cause = task, cause


@dataclass(frozen=True)
class CompiledGraph:
    """An immutable copy of a validated graph's structure, with the compile-time options that shape runs."""

    state: StateSchema
    version: int
    migrations: Mapping[int, Migration]
    nodes: Mapping[str, NodeSpec]
    edges: tuple[tuple[str, str], ...]
    joins: tuple[Join, ...]
    branches: tuple[Branch, ...]
    interrupt_before: frozenset[str] = frozenset()
    interrupt_after: frozenset[str] = frozenset()
    input_schema: StateSchema | None = None
    """The fields a run's input may set (``StateGraph(input_schema=...)``); ``None``: any state field."""
    output_schema: StateSchema | None = None
    """The fields a stream of values shows (``StateGraph(output_schema=...)``); ``None``: the whole state."""
    _edges_from: Mapping[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)
    _branches_from: Mapping[str, tuple[Branch, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        put = object.__setattr__  # frozen: the derived tables are set once, here
        put(self, "nodes", MappingProxyType(dict(self.nodes)))
        put(self, "migrations", MappingProxyType(dict(self.migrations)))
        edges_from: dict[str, list[str]] = {}
        for a, b in self.edges:
            edges_from.setdefault(a, []).append(b)
        branches_from: dict[str, list[Branch]] = {}
        for br in self.branches:
            branches_from.setdefault(br.source, []).append(br)
        put(self, "_edges_from", MappingProxyType({k: tuple(v) for k, v in edges_from.items()}))
        put(self, "_branches_from", MappingProxyType({k: tuple(v) for k, v in branches_from.items()}))

    def validate_input(self, input: Any) -> dict[str, Any]:
        """``input`` checked as a run's input: against ``input_schema`` when one was given (only its fields), else
        as a state update."""
        if self.input_schema is None:
            return self.state.validate_update(input, node="input")
        update = self.input_schema.validate_update(input, node="input")
        self.input_schema.check_required(update, node="input")
        return update

    def output(self, values: Mapping[str, Any]) -> Any:
        """What a run's output shows of the state ``values``: the ``output_schema``'s fields, as that schema's dict,
        model or dataclass; the state as a node sees it without an ``output_schema``."""
        if self.output_schema is None:
            return self.state.make(values)
        return self.output_schema.make({k: v for k, v in values.items() if k in self.output_schema.channels})

    # -- the engine's questions --------------------------------------------------------------------------------------

    def next_tasks(
        self,
        before: dict[str, Any],
        values: dict[str, Any],
        results: Sequence[TaskResult],
        barriers_before: Mapping[str, list[str]],
        checkpoint_id: str,
    ) -> tuple[list[Task], dict[str, list[str]]]:
        """The next frontier after ``results`` took the state from ``before`` to ``values``: for each result in
        order, its ``goto`` targets, static edges, router picks and completed joins. A node's routers see the step's
        starting state plus that node's own writes (not its siblings'), as in LangGraph. The frontier is in
        LangGraph's task order: plain tasks by node name, then every ``Send`` in the order it was made (each its own
        task); writes are applied in that order. Raises :class:`RouteError` naming the task whose routing failed."""
        targets: list[tuple[str, bool, Any]] = []
        plain: set[str] = set()
        barriers = {k: list(v) for k, v in barriers_before.items()}
        state: Any

        def seen_by(r: TaskResult) -> Any:
            if len(results) == 1:
                return self.state.make(values)
            try:
                own, _ = self.state.apply(before, [r.update], sources=[r.task.node])
            except InvalidUpdateError as exc:
                raise RouteError(r.task, exc) from exc
            return self.state.make(own)

        def add(target: Any, source: Task) -> None:
            if isinstance(target, Send):
                if target.node not in self.nodes:
                    raise RouteError(source, InvalidUpdateError(f"{source.node}: Send to unknown node {target.node!r}"))
                targets.append((target.node, True, target.payload))
            elif target == END or target is None:
                return
            elif not isinstance(target, str) or target not in self.nodes:
                raise RouteError(source, InvalidUpdateError(f"{source.node}: routes to unknown node {target!r}"))
            elif target not in plain:
                plain.add(target)
                targets.append((target, False, None))

        for r in results:
            node = r.task.node
            for g in r.goto:
                add(g, r.task)
            for b in self._edges_from.get(node, ()):
                add(b, r.task)
            state = None
            for br in self._branches_from.get(node, ()):
                if state is None:
                    state = seen_by(r)
                for item in _picks(br, state, r.task):
                    add(item, r.task)
        finished: dict[str, Task] = {}  # each node that finished in this step, with its first task
        for r in results:
            finished.setdefault(r.task.node, r.task)
        for join in self.joins:  # once per step, so several tasks of one source count once
            arrived = [s for s in join.sources if s in finished]
            if not arrived:
                continue
            seen = barriers.setdefault(join.key, [])
            seen += [s for s in arrived if s not in seen]
            if set(seen) >= set(join.sources):
                del barriers[join.key]
                add(join.target, finished[arrived[-1]])
        return _numbered(targets, checkpoint_id), barriers

    def goto_tasks(self, goto: str | Send | Sequence[str | Send], checkpoint_id: str) -> list[Task]:
        """The frontier that ``goto`` names (a fork that re-routes), as the tasks of ``checkpoint_id``. Raises
        :class:`InvalidUpdateError` for an unknown node."""
        items = [goto] if isinstance(goto, str | Send) else list(goto)
        targets: list[tuple[str, bool, Any]] = []
        plain: set[str] = set()
        for item in items:
            if isinstance(item, Send):
                if item.node not in self.nodes:
                    raise InvalidUpdateError(f"Send to unknown node {item.node!r}")
                targets.append((item.node, True, item.payload))
            elif item == END or item is None:
                continue
            elif not isinstance(item, str) or item not in self.nodes:
                raise InvalidUpdateError(f"routes to unknown node {item!r}")
            elif item not in plain:
                plain.add(item)
                targets.append((item, False, None))
        return _numbered(targets, checkpoint_id)

    def frontier_status(
        self, tasks: Sequence[Task], results: Sequence[TaskResult] = ()
    ) -> tuple[Status, list[Interrupt]]:
        """``done`` for an empty frontier; ``interrupted`` after an ``interrupt_after`` node or before an
        ``interrupt_before`` one; otherwise ``running``."""
        if not tasks:
            return "done", []
        after = [
            Interrupt(r.task.node, "after", task_id=r.task.id) for r in results if r.task.node in self.interrupt_after
        ]
        if after:
            return "interrupted", after
        before = [Interrupt(t.node, "before", task_id=t.id) for t in tasks if t.node in self.interrupt_before]
        if before:
            return "interrupted", before
        return "running", []

    # -- structure, for validation and drawing ---------------------------------------------------------------------

    def successors(self) -> dict[str, set[str]]:
        """Every node's possible next nodes (START and END included)."""
        everything = set(self.nodes) | {END}
        succ: dict[str, set[str]] = {n: set() for n in (START, END, *self.nodes)}
        for a, b in self.edges:
            succ.setdefault(a, set()).add(b)
        for join in self.joins:
            for s in join.sources:
                succ.setdefault(s, set()).add(join.target)
        for br in self.branches:
            succ.setdefault(br.source, set()).update(br.path_map.values() if br.path_map is not None else everything)
        for spec in self.nodes.values():
            succ[spec.name] |= set(spec.destinations)
        return succ

    def to_networkx(self) -> networkx.DiGraph:
        """The structure as a ``networkx.DiGraph``; edge attribute ``kind`` is ``edge``, ``join`` or ``branch``."""
        import networkx

        g: networkx.DiGraph = networkx.DiGraph()
        g.add_nodes_from([START, *self.nodes, END])
        g.add_edges_from(self.edges, kind="edge")
        for join in self.joins:
            g.add_edges_from(((s, join.target) for s in join.sources), kind="join")
        for br in self.branches:
            targets = br.path_map.values() if br.path_map is not None else [*self.nodes, END]
            g.add_edges_from(((br.source, t) for t in targets), kind="branch")
        return g

    def to_mermaid(self) -> str:
        """A mermaid ``flowchart`` of the graph: solid edges, dotted conditional edges, joins marked ``&``."""
        ident = {START: "__start__", END: "__end__"}
        ident.update({n: f"n{i}" for i, n in enumerate(self.nodes)})
        lines = ["flowchart TD", f"    {ident[START]}([START])"]
        lines += [f'    {ident[n]}["{_mermaid_text(n)}"]' for n in self.nodes]
        lines.append(f"    {ident[END]}([END])")
        lines += [f"    {ident[a]} --> {ident[b]}" for a, b in self.edges]
        for join in self.joins:
            lines.append(f"    {' & '.join(ident[s] for s in join.sources)} --> {ident[join.target]}")
        for i, br in enumerate(self.branches):
            if br.path_map is None:  # the router may pick any node: say so instead of guessing
                lines.append(f'    {ident[br.source]} -.-> |route| unknown{i}[/"any node: no path_map given"/]')
                continue
            for key, target in br.path_map.items():
                label = f" |{_mermaid_text(str(key))}|" if str(key) != target else ""
                lines.append(f"    {ident[br.source]} -.->{label} {ident[target]}")
        for spec in self.nodes.values():
            lines += [f"    {ident[spec.name]} -.-> |goto| {ident[d]}" for d in spec.destinations]
        return "\n".join(lines) + "\n"


def _numbered(targets: list[tuple[str, bool, Any]], checkpoint_id: str) -> list[Task]:
    """The tasks of ``checkpoint_id`` for ``(node, is_send, payload)`` targets, in LangGraph's order: plain tasks
    sorted by node name, then the ``Send`` tasks in the order they were made."""
    ordered = sorted((t for t in targets if not t[1]), key=lambda t: t[0]) + [t for t in targets if t[1]]
    return [Task(f"{checkpoint_id}.{i}", n, p, h) for i, (n, h, p) in enumerate(ordered)]


def _picks(br: Branch, state: Any, task: Task) -> list[Any]:
    """What ``br``'s router picked after ``task``, looked up in its path map."""
    try:
        picked = br.router(state)
    except Exception as exc:
        raise RouteError(task, exc) from exc
    out = []
    for item in picked if isinstance(picked, list | tuple) else [picked]:
        if br.path_map is not None and not isinstance(item, Send):
            if not _is_key_of(item, br.path_map):
                raise RouteError(task, InvalidUpdateError(f"{br.source}: router returned {item!r}, not in path_map"))
            item = br.path_map[item]
        out.append(item)
    return out


def _is_key_of(item: Any, path_map: Mapping[Hashable, str]) -> bool:
    try:
        return item in path_map
    except TypeError:  # unhashable (a list inside the router's list, a dict): no key of a path_map
        return False


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;")
