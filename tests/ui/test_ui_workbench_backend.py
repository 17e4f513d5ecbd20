"""The workbench's data layer (:class:`LocalBackend`) over a real SQLite file, without a browser (the pages are in
test_ui_workbench.py): the inbox's order and deadlines, the step records of a fan-out run in this process, and the
one-line errors of a take-over or an edit it cannot do."""

from __future__ import annotations

import datetime as dt
import functools
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from support.workbench_world import CHAT, FAN, WIDTH, chat_graph, fan_graph

from graphckpt import END, START, StateGraph
from graphckpt.savers.sqlite import SqliteSaver
from graphckpt.server.ui import LocalBackend, UIError
from graphckpt.server.ui.workbench import node_source

ASKING = "test:asking"


class Ask(BaseModel):
    topic: str = ""
    answer: Any = None


def asking_graph(timeout: float | None) -> StateGraph:
    def ask(state: Ask, ctx: Any) -> dict[str, Any]:
        return {"answer": ctx.interrupt(f"About {state.topic}?", timeout=timeout)}

    g = StateGraph(Ask)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    return g


async def test_the_inbox_lists_the_longest_waiting_first_with_deadlines(tmp_path: Path) -> None:
    saver = SqliteSaver(tmp_path / "w.db")
    plain, timed = asking_graph(None).compile(saver=saver), asking_graph(3600).compile(saver=saver)
    await timed.ainvoke({"topic": "first"}, thread_id="t-first", tags={"graph": ASKING})
    await plain.ainvoke({"topic": "second"}, thread_id="t-second", tags={"graph": ASKING})
    backend = LocalBackend(saver, {ASKING: plain})
    try:
        items = await backend.inbox()
        assert [i.thread_id for i in items] == ["t-first", "t-second"]
        first, second = items
        assert first.waiting_since is not None and first.waiting_since <= (second.waiting_since or first.waiting_since)
        assert first.deadline is not None and second.deadline is None
        left = (first.deadline - dt.datetime.now(dt.UTC)).total_seconds()
        assert 3500 < left <= 3600 and first.waiting_s() >= 0
    finally:
        await backend.aclose()


async def test_step_records_of_a_fan_out_and_what_cannot_be_done(tmp_path: Path) -> None:
    saver = SqliteSaver(tmp_path / "f.db")
    fan, chat = fan_graph().compile(saver=saver), chat_graph().compile(saver=saver)
    await fan.ainvoke({"topic": "rain"}, thread_id="fan", tags={"graph": FAN})
    await chat.ainvoke({"messages": [{"role": "user", "content": "Hi?"}]}, thread_id="chat", tags={"graph": CHAT})
    backend = LocalBackend(saver, {FAN: fan, CHAT: chat})
    try:
        steps = [s for s in await backend.checkpoints_of("fan") if s.nodes == ["work"]]
        view = await backend.step_view("fan", steps[0].checkpoint_id)
        assert len(view.bars) == WIDTH and all(b.send and b.offset_ms is not None for b in view.bars)
        assert all(0 <= b.left <= 100 and b.left + b.width <= 100.5 for b in view.bars)
        assert [c["status"] for b in view.bars for c in b.calls] == ["finished"] * WIDTH
        assert view.diff is not None and len(list(view.diff.changes())) == WIDTH
        with pytest.raises(UIError, match=r"'fan' is done.*only a crashed thread can be taken over"):
            await backend.take_over("fan")
        talk = await backend.conversation("chat")
        assert talk is not None and [m.role for m in talk.messages] == ["user", "assistant", "tool", "assistant"]
        assert all(m.id and m.checkpoint_id for m in talk.messages)  # every message knows where it first appeared
        first = talk.messages[0]
        assert first.checkpoint_id is not None and first.id is not None
        with pytest.raises(UIError, match="holds no message 'nope'"):
            await backend.edit_message("chat", first.checkpoint_id, "nope", "Hello?", None)
        with pytest.raises(UIError, match="field 'content'"):
            await backend.edit_message("chat", first.checkpoint_id, first.id, "  ", None)
        assert await backend.conversation("fan") is None
    finally:
        await backend.aclose()


def _decorated(fn: Any) -> Any:
    @functools.wraps(fn)
    def inner(*a: Any) -> Any:
        return fn(*a)

    return inner


def test_node_source_names_module_and_line() -> None:
    def node(state: Any) -> dict[str, Any]:
        return {}

    line = node.__code__.co_firstlineno
    assert node_source(node) == f"{__name__}:{line}"
    assert node_source(functools.partial(node)) == f"{__name__}:{line}"
    assert node_source(_decorated(node)) == f"{__name__}:{line}"
    assert node_source(len) is None or ":" in str(node_source(len))
