"""The server's rings of ephemeral events (:mod:`graphckpt.server.events.ephemeral`), in process: a run is listened to
only while a stream wants one of its ephemeral modes, each event is anchored after the durable events committed
before it, and memory stays bounded (events and bytes per thread, idle rings dropped)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, TypedDict

import pytest

from graphckpt import END, START, StateGraph
from graphckpt.savers.memory import MemorySaver
from graphckpt.server.errors import ApiError
from graphckpt.server.events import ephemeral
from graphckpt.server.events.ephemeral import At, Ephemera
from graphckpt.server.events.streams import EventId, parse_event_id


def _engine(step: int = 0) -> Any:
    return SimpleNamespace(head=SimpleNamespace(cp=SimpleNamespace(step=step)), listener=None, wanted=frozenset())


class S(TypedDict, total=False):
    x: int


async def _thread_with_events(saver: MemorySaver) -> str:
    """A thread ``t`` whose log has a first step (run.started, checkpoint, ...)."""
    graph = StateGraph(S).add_node("a", lambda s: {"x": 1}).add_edge(START, "a").add_edge("a", END)
    await graph.compile(saver).ainvoke({"x": 0}, thread_id="t")
    return "t"


async def test_a_run_is_listened_to_only_while_a_stream_wants_it() -> None:
    saver = MemorySaver()
    thread = await _thread_with_events(saver)
    log = await saver.read_events([(thread, -1, 10**9)], after=(-1, -1), limit=100)
    first_step = min(e.step for e in log)
    eph = Ephemera(saver)
    engine = _engine(first_step)
    eph.attach(SimpleNamespace(run_id="r1", thread_id=thread), engine)
    assert engine.listener is None  # nobody streams it: the engine produces nothing extra
    wake = asyncio.Event()
    channel = eph.subscribe(thread, {"custom", "values"}, wake)
    assert engine.listener is not None and engine.wanted == {"custom"}
    engine.listener("custom", {"p": 1})
    engine.listener("tasks", {"id": "x"})  # a mode nobody asked for
    await eph.settle(channel)
    assert [(e.mode, e.data) for e in channel.ring] == [("custom", {"p": 1})]
    assert wake.is_set()
    ends = [e for e in log if e.step <= first_step or e.kind == "run.started"]
    assert channel.ring[0].anchor == At(ends[-1].step, ends[-1].seq, thread)  # after its step's durable events
    eph.saw(channel, At(first_step + 5, 0, thread))  # a stream read further: later events are anchored there
    engine.listener("custom", {"p": 2})
    assert channel.ring[-1].anchor == At(first_step + 5, 0, thread) and channel.ring[-1].n == 1
    eph.unsubscribe(channel, wake)
    engine.listener("custom", {"p": 3})  # the modes asked for during the run stay on until it ends
    assert len(channel.ring) == 3
    eph.ended("r1")
    assert engine.listener is None and channel.engine is None


def test_rings_are_bounded_by_events_and_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ephemeral, "RING", 4)
    monkeypatch.setattr(ephemeral, "RING_BYTES", 100)
    channel = ephemeral.Channel("t", born=10)
    assert channel.keeps_after(10) is True and channel.keeps_after(9) is False  # numbered before it was made
    for n in range(10, 16):
        channel.append(ephemeral.Entry(n, At(1, 0, "t"), "custom", n, 10))
    assert [e.n for e in channel.ring] == [12, 13, 14, 15] and channel.evicted == 11
    assert not channel.keeps_after(10) and channel.keeps_after(11)
    assert [e.n for e in channel.after(13)] == [14, 15]
    channel.append(ephemeral.Entry(16, At(1, 0, "t"), "custom", "big", 95))
    assert [e.n for e in channel.ring] == [16] and channel.bytes == 95
    assert channel.first_after((1, 0, -1)) == 15 and channel.first_after((1, 0, 16)) == 16


def test_idle_rings_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    eph = Ephemera(MemorySaver())
    eph.expect("old", {"custom"})
    eph.expect("kept", {"messages"})
    wake = asyncio.Event()
    eph.subscribe("kept", {"messages"}, wake)  # a stream is open: never dropped
    monkeypatch.setattr(ephemeral, "LINGER", -1.0)
    eph.expect("new", {"custom"})
    assert set(eph.channels) == {"kept", "new"}
    monkeypatch.setattr(ephemeral, "LINGER", 3600.0)
    monkeypatch.setattr(ephemeral, "MAX_THREADS", 3)
    for name in ("a", "b", "c"):
        eph.expect(name, {"custom"})
    assert len(eph.channels) <= 3 and "kept" in eph.channels
    assert eph.count == 0  # nothing was numbered: a ring made again never reuses a number anyway


def test_ephemeral_ids_parse_and_never_look_durable() -> None:
    assert parse_event_id("a:b:3:4") == EventId("a:b", 3, 4)
    assert parse_event_id("t:3:4~ab12.7") == EventId("t", 3, 4, "ab12", 7)
    for bad in ("t:3:4~", "t:3:4~ab", "t:3:4~ab.", "t:3:4~.7", "t:3:4~a-b.7", "t:3:4.7", "t:3:4~ab.x"):
        with pytest.raises(ApiError):
            parse_event_id(bad)


async def test_a_reconnect_after_aged_out_ephemeral_events_is_reset_to_its_durable_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from graphckpt.server.app import build_service
    from graphckpt.server.routes.streams import start_of

    saver = MemorySaver()
    thread = await _thread_with_events(saver)
    graph = StateGraph(S).add_node("a", lambda s: {"x": 1}).add_edge(START, "a").add_edge("a", END)
    service = build_service({"g": graph.compile(saver)}, saver)
    log = await saver.read_events([(thread, -1, 10**9)], after=(-1, -1), limit=100)
    first, last = log[0], log[-1]
    monkeypatch.setattr(ephemeral, "RING", 2)
    eph = service.hub.ephemera
    channel = eph.subscribe(thread, {"custom"}, asyncio.Event())
    for n in range(4):  # numbered 0..3, anchored after the first durable event; 0 and 1 age out
        eph.count += 1
        channel.append(ephemeral.Entry(n, At(first.step, first.seq, thread), "custom", n, 1))
    kept = await start_of(service, "", thread, f"{first.id}~{eph.epoch}.1", ephemeral=True)
    assert kept.reset is None and kept.after_n == 1 and kept.cursor == (first.step, first.seq)
    lost = await start_of(service, "", thread, f"{first.id}~{eph.epoch}.0", ephemeral=True)
    assert lost.reset is not None and lost.reset["continue_after"] == first.id and lost.after_n == 1
    assert lost.cursor == (first.step, first.seq)  # the durable event the id names, no full replay
    other = await start_of(service, "", thread, f"{first.id}~{eph.epoch}x.3", ephemeral=True)  # another server's
    assert other.reset is not None and other.after_n is None
    durable_id = await start_of(service, "", thread, first.id, ephemeral=True)  # those after it aged out
    assert durable_id.reset is not None and durable_id.after_n == 1
    assert (await start_of(service, "", thread, last.id, ephemeral=True)).reset is None  # nothing after it was lost
    assert (await start_of(service, "", thread, f"{first.id}~{eph.epoch}.0")).reset is None  # no ephemeral mode
