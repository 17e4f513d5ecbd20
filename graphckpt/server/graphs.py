"""``Graphs``: the graphs a server serves, by id, each an :class:`~graphckpt.App` bound to the one shared saver.

A graph's id is the ``MODULE:ATTR`` it was loaded from (what ``graphckpt run`` records in a thread's ``tags.graph``,
so threads the CLI made are served with their graph), or the ``NAME`` of ``NAME=MODULE:ATTR``; the first graph is the
default for threads that name none. Whoever needs a graph (the run executors, the service, the event log) is handed
this registry.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from graphckpt.app import App
from graphckpt.savers.base import Saver, ThreadRecord
from graphckpt.server.errors import ApiError

__all__ = ["Graphs"]


class Graphs:
    """The graphs ``apps`` (id -> app), each rebound to ``saver`` unless it already uses it."""

    def __init__(self, apps: Mapping[str, App], saver: Saver) -> None:
        if not apps:
            raise ValueError("serve at least one graph")
        self.saver = saver
        self.apps = {name: app if app.saver is saver else app.with_saver(saver) for name, app in apps.items()}
        self.default = next(iter(self.apps))
        """The id of the default graph (the first one)."""

    def __iter__(self) -> Iterator[str]:
        return iter(self.apps)

    def __contains__(self, graph_id: object) -> bool:
        return graph_id in self.apps

    def app(self, graph_id: str | None) -> App:
        """The graph ``graph_id`` (the default one for ``None``); 404 for an unknown id."""
        if graph_id is None:
            return self.apps[self.default]
        try:
            return self.apps[graph_id]
        except KeyError:
            raise ApiError(404, "NotFound", f"no assistant (graph) {graph_id!r}") from None

    def served(self, graph_id: Any) -> str:
        """``graph_id`` when it names a served graph, else the default one's id."""
        return graph_id if isinstance(graph_id, str) and graph_id in self.apps else self.default

    def graph_of(self, record: ThreadRecord) -> str:
        """The id of the graph that runs ``record``'s thread: its ``tags.graph`` when served, else the default."""
        tags = record.metadata.get("tags") or {}
        return self.served(tags.get("graph") if isinstance(tags, Mapping) else None)

    def app_of(self, record: ThreadRecord) -> App:
        return self.apps[self.graph_of(record)]
