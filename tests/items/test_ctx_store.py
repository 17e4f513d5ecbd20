"""``ctx.store`` in nodes on every saver: async and sync nodes read, write, search and list through the context; a
resume after an interrupt re-runs the node, which sees its first reads and repeats none of its writes; the calls are
in the audit record as journaled effects; an attached store with an embedding serves the node's semantic search."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from graphckpt import END, START, StateGraph
from graphckpt.items import ItemStore


class State(BaseModel):
    seen: int = -1
    found: list[str] = []
    answer: str = ""


def _graph(node: Any) -> StateGraph:
    g = StateGraph(State)
    g.add_node("n", node)
    g.add_edge(START, "n")
    g.add_edge("n", END)
    return g


async def test_async_node_reads_and_writes_the_shared_store(saver: Any) -> None:
    async def node(state: State, ctx: Any) -> dict[str, Any]:
        item = await ctx.store.aget(("u", "1"), "visits")
        n = item.value["n"] if item is not None else 0
        await ctx.store.aput(("u", "1"), "visits", {"n": n + 1, "kind": "visit"})
        await ctx.store.aput(("u", "2"), "visits", {"n": 7, "kind": "visit"}, ttl=60)
        hits = await ctx.store.asearch(("u",), filter={"kind": "visit"})
        spaces = await ctx.store.alist_namespaces(prefix=("u",))
        return {"seen": n, "found": [f"{h.namespace[1]}:{h.value['n']}" for h in hits] + [".".join(s) for s in spaces]}

    app = _graph(node).compile(saver=saver)
    first = (await app.ainvoke({}, thread_id="a")).values
    second = (await app.ainvoke({}, thread_id="b")).values  # another thread sees the first one's write
    assert first.seen == 0 and second.seen == 1
    assert sorted(second.found) == ["1:2", "2:7", "u.1", "u.2"]
    item = await ItemStore(saver).aget(("u", "1"), "visits")
    assert item is not None and item.value == {"n": 2, "kind": "visit"}


async def test_resume_after_interrupt_replays_reads_and_writes(saver: Any) -> None:
    def node(state: State, ctx: Any) -> dict[str, Any]:  # sync: runs on a worker thread
        item = ctx.store.get(("c",), "k")
        n = item.value["n"] if item is not None else 0
        ctx.store.put(("c",), "k", {"n": n + 1})
        answer = ctx.interrupt("approve?")
        return {"seen": n, "answer": answer}

    app = _graph(node).compile(saver=saver)
    await app.ainvoke({}, thread_id="t")
    store = ItemStore(saver)
    got = await store.aget(("c",), "k")
    assert got is not None and got.value == {"n": 1}
    await store.aput(("c",), "k", {"n": 50})  # changed behind the node's back between the two runs
    out = (await app.aresume("t", "yes")).values
    assert out.seen == 0 and out.answer == "yes"  # the journaled read, not 50
    got = await store.aget(("c",), "k")
    assert got is not None and got.value == {"n": 50}  # the put was not repeated
    audit = await app.aaudit("t")
    assert [c["name"] for c in audit["calls"]].count("store.put") == 1


async def test_attached_store_with_embedding_serves_semantic_search(saver: Any) -> None:
    def embed(texts: list[str]) -> list[list[float]]:
        return [[t.count("cat") + 0.01, t.count("dog") + 0.01] for t in texts]

    ItemStore(saver, embed=embed, fields=("text",)).attach()

    async def node(state: State, ctx: Any) -> dict[str, Any]:
        await ctx.store.aput(("pets",), "a", {"text": "a cat and a cat"})
        await ctx.store.aput(("pets",), "b", {"text": "a dog"})
        hits = await ctx.store.asearch(("pets",), query="dog", limit=1)
        return {"found": [h.key for h in hits]}

    out = (await _graph(node).compile(saver=saver).ainvoke({}, thread_id="s")).values
    assert out.found == ["b"]
