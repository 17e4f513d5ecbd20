"""The server's :class:`~graphckpt.server.events.hub.Hub` wakes its streams right after each write its own process
makes through the saver (a run's claim, its pending writes, each checkpoint commit), without waiting for its poll of
the log: the streams of the runs a server executes itself see each step at once (bench/server.py: commit-to-event
p50 6.3 -> 1.3 ms on SQLite). Writes of other processes are still found by the poll. Real SQLite files."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from support.tick_graph import tick_graph

from graphckpt.savers import events
from graphckpt.savers.sqlite import SqliteSaver
from graphckpt.server.events.hub import Hub


async def test_a_write_of_this_process_wakes_the_streams_before_the_next_poll(tmp_path: Path) -> None:
    async with SqliteSaver(str(tmp_path / "hub.db")) as saver:
        app = tick_graph().compile(saver=saver)
        hub = Hub(saver, poll_interval=3600.0)  # its poll would wake nobody within this test
        await hub.start()
        try:
            wake = asyncio.Event()
            hub.wakes.add(wake)
            version = hub.version
            await app.ainvoke({}, thread_id="t")
            assert wake.is_set()  # set by the commit itself, on this loop: no waiting
            assert hub.version > version  # a new version: shared reads are made afresh
            wake.clear()
            await app.ainvoke({}, thread_id="u")
            assert wake.is_set()
        finally:
            await hub.stop()
        wake.clear()
        hub.closing = False  # stopped: the saver no longer reports to it
        before = hub.version
        await app.ainvoke({}, thread_id="v")
        assert hub.version == before and not wake.is_set()


async def test_another_saver_s_writes_do_not_wake_this_hub(tmp_path: Path) -> None:
    async with SqliteSaver(str(tmp_path / "a.db")) as mine, SqliteSaver(str(tmp_path / "b.db")) as other:
        hub = Hub(mine, poll_interval=3600.0)
        await hub.start()
        try:
            wake = asyncio.Event()
            hub.wakes.add(wake)
            await tick_graph().compile(saver=other).ainvoke({}, thread_id="t")
            assert not wake.is_set()
            await tick_graph().compile(saver=mine).ainvoke({}, thread_id="t")
            assert wake.is_set()
        finally:
            await hub.stop()


def test_watch_returns_what_stops_it(tmp_path: Path) -> None:
    saver = SqliteSaver(str(tmp_path / "w.db"))
    calls: list[int] = []
    stop = events.watch(saver, lambda: calls.append(1))
    events.changed(saver)
    stop()
    stop()  # twice: nothing more
    events.changed(saver)
    assert calls == [1]


async def test_a_saver_that_is_not_hashable_is_polled_and_its_writes_still_commit(tmp_path: Path) -> None:
    """A saver class with ``__eq__`` and no ``__hash__`` (a user's own, say) cannot be watched: its commits go on as
    before and a hub on it falls back to its poll."""

    class Unhashable(SqliteSaver):
        def __eq__(self, other: object) -> bool:
            return self is other

        __hash__ = None  # type: ignore[assignment]

    async with Unhashable(str(tmp_path / "u.db")) as saver:
        with pytest.raises(TypeError, match="Unhashable is not hashable"):
            events.watch(saver, lambda: None)
        hub = Hub(saver, poll_interval=0.01)
        await hub.start()
        try:
            wake = asyncio.Event()
            hub.wakes.add(wake)
            assert (await tick_graph().compile(saver=saver).ainvoke({}, thread_id="t")).values.n == 1
            await asyncio.wait_for(wake.wait(), 5)  # by the poll
        finally:
            await hub.stop()
