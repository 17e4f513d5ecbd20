"""The seams step: a compiled app is frozen, streams are bounded, and a database written before the step reads
back unchanged (``tests/data/format_v1.db``, written by commit b046ceb through ``tests/support/format_v1_graph.py``)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any, TypedDict

import pytest
from support import DATA, format_v1_graph

from graphckpt import END, START, StateGraph
from graphckpt.reader import RawReader
from graphckpt.savers.base import Saver
from graphckpt.savers.sqlite import SqliteSaver


def test_a_database_written_before_the_seams_step_reads_back_unchanged(tmp_path: Path) -> None:
    db = tmp_path / "v1.db"
    shutil.copy(DATA / "format_v1.db", db)
    expected = json.loads((DATA / "format_v1.json").read_text())
    app = format_v1_graph.build().compile(saver=SqliteSaver(db))
    try:
        assert format_v1_graph.reading(app) == expected
        done = app.resume("main", "sure")  # and it still runs on: the stored frontier is what runs next
        assert done.status == "done" and done.values.answer == "sure" and done.step == 13
    finally:
        app.close()


def test_the_raw_reader_reads_the_old_database_without_the_graph(tmp_path: Path) -> None:
    db = tmp_path / "v1.db"
    shutil.copy(DATA / "format_v1.db", db)
    expected = json.loads((DATA / "format_v1.json").read_text())
    with RawReader(SqliteSaver(db)) as reader:
        for thread_id, thread in expected.items():
            history = reader.history(thread_id)
            assert [s.checkpoint_id for s in history] == [h["checkpoint"] for h in thread["history"]]
            head = history[0].values
            want = thread["history"][0]["values"]
            assert [n["text"] for n in head["notes"]] == [n["text"] for n in want["notes"]]
            assert head["mood"] == want["mood"] and head["steps"] == want["steps"]


class Counter(TypedDict, total=False):
    n: int


def _step(s: Counter) -> dict[str, Any]:
    return {"n": s.get("n", 0) + 1}


def test_changing_the_builder_after_compile_changes_nothing_in_the_app() -> None:
    g = StateGraph(Counter)
    g.add_node("a", _step)
    g.add_edge(START, "a")
    g.add_edge("a", END)
    app = g.compile()
    g.add_node("b", _step)  # b has no path to END: compile() would refuse this graph
    g.add_edge("a", "b")
    g.add_conditional_edges("a", lambda s: "b")
    try:
        app.invoke({"n": 0}, thread_id="t")
        history = app.history("t")
        assert len(history) == 2 and history[0].values == {"n": 1}
        assert "b" not in app.graph.nodes and "b" not in app.to_mermaid()
        with pytest.raises(TypeError):
            app.graph.nodes["c"] = app.graph.nodes["a"]  # type: ignore[index]
    finally:
        app.close()


async def test_a_slow_stream_reader_keeps_the_run_at_most_one_step_ahead(saver: Saver) -> None:
    """The reader sleeps 50 ms per item; at every item, the saver holds at most one checkpoint more than the items
    read so far (the engine runs the next step while the reader handles this one, and no further)."""

    def router(s: Counter) -> str:
        return "a" if s.get("n", 0) < 8 else END

    g = StateGraph(Counter)
    g.add_node("a", _step)
    g.add_edge(START, "a")
    g.add_conditional_edges("a", router, ["a", END])
    app = g.compile(saver=saver)
    ahead: list[int] = []
    read = 0
    async for _ in app.astream({"n": 0}, thread_id="slow", mode="checkpoints"):
        read += 1
        await asyncio.sleep(0.05)  # the slow reader (not a wait for a condition: it is what the test is about)
        committed = len(await app.ahistory("slow"))
        ahead.append(committed - read)
    assert read == 9  # the input's checkpoint and eight steps
    assert max(ahead) <= 1 and ahead[-1] == 0, ahead  # never more than one step ahead; nothing after the end
    await app.aclose()
