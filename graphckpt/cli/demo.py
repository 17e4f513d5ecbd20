"""The demo's graph for the other commands: ``graphckpt.cli.demo:graph``.

The threads ``graphckpt demo`` makes record this reference (``tags.graph``), so ``graphckpt resume``, ``fork`` and
``graph`` can load the demo's graph wherever graphckpt is installed from its source tree (the demo itself,
``examples/agent_task.py``, is loaded by path: ``examples`` is not an installed package).
"""

from __future__ import annotations

from graphckpt.graph import StateGraph

__all__ = ["graph"]


def graph() -> StateGraph:
    """The demo's agent task graph (analyse -> write -> check -> tests), offline, with no simulated fault."""
    from graphckpt.cli.commands import load_demo

    built: StateGraph = load_demo().build_graph()
    return built
