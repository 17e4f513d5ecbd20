"""Control-flow values: the graph's entry and exit markers, and what nodes and routers return besides updates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

__all__ = ["END", "START", "Command", "ParentCommand", "Send"]

START: Final = "__start__"
"""The virtual node a run enters from: ``add_edge(START, "first")``."""
END: Final = "__end__"
"""The virtual node a run leaves to: a router returning ``END`` stops that branch."""


@dataclass(frozen=True, slots=True)
class Send:
    """Fan-out: run ``node`` once with ``payload`` as its input instead of the state. Return one or many from a
    router (``add_conditional_edges``) or put them in ``Command(goto=...)``; each becomes its own task."""

    node: str
    payload: Any


@dataclass(frozen=True, slots=True)
class Command:
    """A node's return value when it also decides where to go next.

    ``update`` is applied like a plain dict return; ``goto`` (node names, :class:`Send` objects or ``END``) is added
    to the targets of the node's edges for the next super-step.

    ``Command(resume=...)`` is an answer for ``app.resume(thread_id, Command(resume=...))`` (LangGraph's spelling):
    one value answers the first open interrupt; a mapping from :attr:`Interrupt.id` to values answers each of them.

    ``Command(graph=Command.PARENT, update=..., goto=...)`` from a node of a subgraph stops the subgraph and applies
    ``update`` and ``goto`` in the parent graph, as the writes and targets of the subgraph's node there.
    """

    update: Mapping[str, Any] | None = None
    goto: str | Send | Sequence[str | Send] = field(default=())
    resume: Any = field(default=None)
    graph: str | None = None
    """``None``: this graph; :attr:`PARENT`: the graph this one runs in as a subgraph node."""

    PARENT: ClassVar[str] = "__parent__"

    def targets(self) -> list[str | Send]:
        if isinstance(self.goto, (str, Send)):
            return [self.goto]
        return list(self.goto)


class ParentCommand(BaseException):
    """Raised by the engine when a subgraph's node returns ``Command(graph=Command.PARENT)``: it stops the subgraph
    run (a ``BaseException``, so node code and retry policies do not catch it) and reaches the parent's subgraph node,
    which applies ``command`` in the parent graph. ``node`` is the subgraph node that returned it."""

    def __init__(self, command: Command, node: str) -> None:
        super().__init__(command)
        self.command, self.node = command, node
