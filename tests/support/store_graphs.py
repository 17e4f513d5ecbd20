"""A graph the store's server tests serve (``support.store_graphs:remember``): its node writes the input's ``fact``
to ``ctx.store`` under ``("facts",)`` and reads back how many facts the namespace holds."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from graphckpt import END, START, StateGraph


class Memo(BaseModel):
    fact: str = ""
    known: int = 0


async def note(state: Memo, ctx: Any) -> dict[str, Any]:
    await ctx.store.aput(("facts",), state.fact, {"text": state.fact})
    return {"known": len(await ctx.store.asearch(("facts",), limit=100))}


g = StateGraph(Memo)
g.add_node("note", note)
g.add_edge(START, "note")
g.add_edge("note", END)
remember = g
