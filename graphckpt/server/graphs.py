"""``Graphs``: the graphs a server serves, by id, each an :class:`~graphckpt.App` bound to the one shared saver.

A graph's id is the ``MODULE:ATTR`` it was loaded from (what ``graphckpt run`` records in a thread's ``tags.graph``,
so threads the CLI made are served with their graph), or the ``NAME`` of ``NAME=MODULE:ATTR``; the first graph is the
default for threads that name none. A graph served as ``NAME=MODULE:ATTR`` also answers to its ``MODULE:ATTR`` (the
app's ``graph_ref``, an *alias*): a thread ``graphckpt run MODULE:ATTR`` made (``tags.graph`` is ``MODULE:ATTR``) is
that graph's, so it is served, resumed and run by its workers (they claim runs of both ids), never read-only.
Whoever needs a graph (the run executors, the service, the event log) is handed this registry.
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
        self.apps = {name: _bound(app, saver) for name, app in apps.items()}
        self.default = next(iter(self.apps))
        """The id of the default graph (the first one)."""
        self.aliases = {
            app.graph_ref: name
            for name, app in self.apps.items()
            if app.graph_ref is not None and app.graph_ref != name and app.graph_ref not in self.apps
        }
        """``MODULE:ATTR`` -> the ``NAME`` it is served as (the graphs served as ``NAME=MODULE:ATTR``)."""

    def __iter__(self) -> Iterator[str]:
        return iter(self.apps)

    def __contains__(self, graph_id: object) -> bool:
        return graph_id in self.apps or graph_id in self.aliases

    def by_ref(self) -> dict[str, App]:
        """Every id a thread's ``tags.graph`` may name -> its app: the served ids and their aliases (what a worker
        claims runs of, and what the web UI looks a thread's graph up in)."""
        return {**self.apps, **{ref: self.apps[name] for ref, name in self.aliases.items()}}

    def app(self, graph_id: str | None) -> App:
        """The graph ``graph_id`` (the default one for ``None``); 404 for an unknown id."""
        if graph_id is None:
            return self.apps[self.default]
        try:
            return self.apps[self.aliases.get(graph_id, graph_id)]
        except KeyError:
            raise ApiError(404, "NotFound", f"no assistant (graph) {graph_id!r}") from None

    def served(self, graph_id: Any) -> str:
        """The served id ``graph_id`` names (itself, or the ``NAME`` of its alias), else the default one's id."""
        if not isinstance(graph_id, str):
            return self.default
        if graph_id in self.apps:
            return graph_id
        return self.aliases.get(graph_id, self.default)

    def graph_of(self, record: ThreadRecord) -> str:
        """The id of the graph that runs ``record``'s thread: its ``tags.graph`` when served, else the default."""
        tags = record.metadata.get("tags") or {}
        return self.served(tags.get("graph") if isinstance(tags, Mapping) else None)

    def app_of(self, record: ThreadRecord) -> App:
        return self.apps[self.graph_of(record)]


def _bound(app: App, saver: Saver) -> App:
    """``app`` on ``saver`` (a copy when it uses another), keeping its ``graph_ref``."""
    if app.saver is saver:
        return app
    bound = app.with_saver(saver)
    bound.graph_ref = app.graph_ref
    return bound
