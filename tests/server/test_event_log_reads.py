"""The server's shared event reads (:class:`graphckpt.server.events.log.EventLog`) on a real SQLite file: a read that
found nothing is not remembered, so a stream waiting at a position sees rows that arrived without the hub's counter
moving (``max(id)`` taken down by a delete and back up to the same value by new rows between two polls: SQLite
reuses deleted rows' ids). Before, such a stream read its remembered "nothing" for good (a stateless run's stream
that never ended, one run in a few of tests/server/test_langgraph_sdk_surface.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from support.tick_graph import tick_graph

from graphckpt.savers.sqlite import SqliteSaver
from graphckpt.server.events.hub import Hub
from graphckpt.server.events.log import EventLog
from graphckpt.server.service import NO_END


async def test_a_read_that_found_nothing_is_read_again_at_the_same_hub_version(tmp_path: Path) -> None:
    async with SqliteSaver(str(tmp_path / "log.db")) as saver:
        app = tick_graph().compile(saver=saver)
        await app.ainvoke({}, thread_id="old")
        hub = Hub(saver)  # not polling: its version stays where it is, as when the counter came back to one value
        graphs = SimpleNamespace(saver=saver, app_of=lambda record: app, app=lambda ref: app)  # the one graph
        log = EventLog(graphs, hub)  # type: ignore[arg-type]
        version = hub.version
        segments = [("new", 0, NO_END)]
        assert await log.events(segments, (-1, -1)) == []
        await app.ainvoke({}, thread_id="new")
        assert hub.version == version
        kinds = [e.kind for e in await log.events(segments, (-1, -1))]
        assert kinds[0] == "run.started" and kinds[-1] == "run.done", kinds
        seen: list[Any] = await log.events(segments, (-1, -1))  # found something: remembered and shared
        assert seen is await log.events(segments, (-1, -1))
