"""The long-term store: a user's preferences remembered across conversations (threads), through ``ctx.store``.

Each run is a new thread of the same graph. ``remember`` writes what the user said about themselves into the store
under ``("users", <user>)``; ``answer`` reads every fact about the user back (a search with a filter) and a semantic
search finds the fact closest to the question (a toy embedding here: letter counts; pass your model's). The items
live in the same SQLite file as the checkpoints, and every store call is a journaled effect of its node: a crashed
and resumed run sees the same reads and writes nothing twice.

    python examples/memory_store.py [--db PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from graphckpt import END, START, StateGraph
from graphckpt.items import ItemStore
from graphckpt.savers.sqlite import SqliteSaver


class Turn(BaseModel):
    user: str
    said: str = ""
    question: str = ""
    reply: str = ""


def embed(texts: list[str]) -> list[list[float]]:
    """A stand-in for an embedding model: one dimension per letter a-z."""
    return [[t.lower().count(chr(c)) + 0.01 for c in range(97, 123)] for t in texts]


async def remember(state: Turn, ctx: Any) -> dict[str, Any]:
    if state.said:
        key = f"fact{len(await ctx.store.asearch(('users', state.user), limit=100))}"
        await ctx.store.aput(("users", state.user), key, {"text": state.said, "kind": "fact"})
    return {}


async def answer(state: Turn, ctx: Any) -> dict[str, Any]:
    facts = await ctx.store.asearch(("users", state.user), filter={"kind": "fact"}, limit=100)
    best = await ctx.store.asearch(("users", state.user), query=state.question, limit=1) if state.question else []
    closest = best[0].value["text"] if best else "-"
    return {"reply": f"I know {len(facts)} thing(s) about {state.user}; closest to your question: {closest}"}


def build() -> StateGraph:
    g = StateGraph(Turn)
    g.add_node("remember", remember)
    g.add_node("answer", answer)
    g.add_edge(START, "remember")
    g.add_edge("remember", "answer")
    g.add_edge("answer", END)
    return g


async def main(db: str) -> None:
    saver = SqliteSaver(db)
    ItemStore(saver, embed=embed, fields=("text",)).attach()  # the store ctx.store uses on this saver
    app = build().compile(saver=saver)
    try:
        await app.ainvoke({"user": "ann", "said": "I prefer short answers"}, thread_id="conversation-1")
        await app.ainvoke({"user": "ann", "said": "My city is Oslo"}, thread_id="conversation-2")
        last = await app.ainvoke({"user": "ann", "question": "which city?"}, thread_id="conversation-3")
        print(last.values.reply)
        for item in await ItemStore(saver).asearch(("users",), limit=10):
            print(f"{'/'.join(item.namespace)} {item.key}: {item.value['text']}")
        print("namespaces:", await ItemStore(saver).alist_namespaces(prefix=("users",)))
    finally:
        await app.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", help="the SQLite file (default: a new temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(args.db or str(Path(tmp) / "memory.db")))
