"""Export and import of threads whose deltas are packed into chunks: a chunk travels as the deltas it packs, each with
the checkpoint of its own step, up to the end of the exported segment."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from graphckpt import END, START, Saver, StateGraph, append, codec
from graphckpt.savers.memory import MemorySaver
from graphckpt.transfer import export_thread, import_thread


class Log(BaseModel):
    items: Annotated[list[str], append] = []
    n: int = 0
    stop: int = 0


def log_app(saver: Saver, **options: Any) -> Any:
    def step(s: Log) -> dict[str, Any]:
        return {"items": [f"item-{s.n}"], "n": s.n + 1}

    g = StateGraph(Log)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s.n < s.stop else END)
    return g.compile(saver=saver, recursion_limit=1000, **options)


def expected(n: int) -> list[str]:
    return [f"item-{k}" for k in range(n)]


async def test_importing_a_second_fork_after_the_source_packed_its_deltas(
    saver: Saver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first export carries the source's loose deltas 2..5; by the second export they (and 6..8) sit in one chunk
    # keyed by step 2, a checkpoint the target already has and the import skips: steps 6..8 were lost.
    monkeypatch.setattr(codec, "CHUNK", 8)
    app = log_app(saver)
    await app.ainvoke({"stop": 6}, thread_id="src")  # items stored at step 1, deltas 2..6 stay loose
    await app.afork("src", step=5, update={"stop": 7}, new_thread_id="f1")
    target = MemorySaver()
    await import_thread(target, [line async for line in export_thread(saver, "f1")])
    await app.ainvoke({"stop": 12}, thread_id="src")  # a new turn: deltas 2..9 are packed
    await app.afork("src", step=8, update={"stop": 10}, new_thread_id="f2")
    await import_thread(target, [line async for line in export_thread(saver, "f2")])
    copy = log_app(target)
    head = (await copy.aget_state("f2")).values
    assert head.n == 7 and head.items == expected(7)
    for snap in await copy.ahistory("f2"):
        assert snap.values.items == expected(snap.values.n)


async def test_resuming_an_imported_ancestor_cut_inside_a_chunk(saver: Saver, monkeypatch: pytest.MonkeyPatch) -> None:
    # The export of a fork carries the source up to the fork point, with the source's chunk whole (its deltas past
    # the fork point too). Continuing that source in the target folded them as well as its own new deltas.
    monkeypatch.setattr(codec, "CHUNK", 4)
    app = log_app(saver)
    await app.ainvoke({"stop": 10}, thread_id="src")  # chunks at 2 (2..5) and 6 (6..9)
    await app.afork("src", step=3, update={"stop": 4}, new_thread_id="f")
    target = MemorySaver()
    await import_thread(target, [line async for line in export_thread(saver, "f")])
    copy = log_app(target)
    assert (await copy.aget_state("src")).values.items == expected(3)
    done = await copy.aresume("src")
    assert done.values.items == expected(10)
    for snap in await copy.ahistory("src"):
        assert snap.values.items == expected(snap.values.n)
