"""The graph behind ``tests/data/format_v1.db``: a database written by graphckpt before the seams step (commit
b046ceb), kept to prove that the stored format did not change. ``python tests/support/format_v1_graph.py
OUT.db OUT.json`` writes such a database and the reading it should give (run it with the code whose format is to be
pinned)."""

from __future__ import annotations

import enum
import json
import sys
from typing import Annotated, Any

from pydantic import BaseModel

from graphckpt import END, START, Context, StateGraph, append, merge


class Mood(enum.Enum):
    CALM = "calm"
    BUSY = "busy"


class Note(BaseModel):
    text: str
    n: int


class State(BaseModel):
    request: str
    notes: Annotated[list[Note], append] = []
    seen: Annotated[dict[str, int], merge] = {}
    mood: Mood = Mood.CALM
    big: str = ""
    steps: int = 0
    answer: str | None = None


# The database names the types it stores by the module they were written from, then a top-level ``format_v1_graph``:
# they keep that name, so that the old file reads back unchanged from here (State is not stored by name).
for _type in (Mood, Note):
    _type.__module__ = "format_v1_graph"


def work(s: State) -> dict[str, Any]:
    n = s.steps + 1
    return {
        "notes": [Note(text=f"{s.request} #{n}", n=n)],
        "seen": {f"k{n % 3}": n},
        "steps": n,
        "mood": Mood.BUSY if n % 2 else Mood.CALM,
        "big": "x" * (300 * n),
    }


def ask(s: State, ctx: Context) -> dict[str, Any]:
    return {"answer": str(ctx.interrupt({"question": f"ok after {s.steps}?"}))}


def build() -> StateGraph:
    g = StateGraph(State)
    g.add_node("work", work)
    g.add_node("ask", ask)
    g.add_edge(START, "work")
    g.add_conditional_edges("work", lambda s: "work" if s.steps < s.request.count("+") + 12 else "ask", ["work", "ask"])
    g.add_edge("ask", END)
    return g


def reading(app: Any) -> dict[str, Any]:
    """Everything a user reads back, as JSON: each thread's history with values, frontier and metadata."""
    out: dict[str, Any] = {}
    for info in sorted(app.threads(), key=lambda t: t.thread_id):
        out[info.thread_id] = {
            "status": info.status,
            "step": info.step,
            "history": [
                {
                    "thread": s.thread_id,
                    "checkpoint": s.checkpoint_id,
                    "step": s.step,
                    "status": s.status,
                    "next": list(s.next),
                    "interrupts": [[i.node, i.when, i.payload] for i in s.interrupts],
                    "values": s.values.model_dump(mode="json"),
                    "source": s.metadata.get("source"),
                    "writes": s.metadata.get("writes"),
                }
                for s in app.history(info.thread_id)
            ],
        }
    return out


def main(db: str, expected: str) -> None:
    from graphckpt.savers.sqlite import SqliteSaver

    app = build().compile(saver=SqliteSaver(db))
    app.invoke({"request": "weather"}, thread_id="main")  # 13 work steps, then waits in ask
    app.fork("main", step=4, update={"request": "weather++"}, new_thread_id="branch")
    app.resume("branch")
    app.resume("branch", "yes")
    app.invoke({"request": "short" + "+" * 0}, thread_id="other")
    with open(expected, "w") as out:
        json.dump(reading(app), out, indent=1, sort_keys=True)
    app.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
