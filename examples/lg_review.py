"""Human-in-the-loop review with ``interrupt()`` and ``Command(resume=...)``, written the LangGraph way; only the
imports are graphckpt's. A draft is written, a person approves it or asks for changes, and the draft is revised
until approved. ``python examples/lg_review.py`` runs it on SQLite with two canned answers.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from graphckpt import END, START, Command, StateGraph, interrupt

# -- the graph (the part that is the same in LangGraph) ------------------------------------------------------------


class ReviewState(TypedDict):
    topic: str
    draft: str
    revisions: int
    notes: Annotated[list[str], operator.add]


def write_draft(state: ReviewState) -> dict[str, Any]:
    revisions = state.get("revisions", 0)
    extra = " ".join(state.get("notes", []))
    return {"draft": f"On {state['topic']} (v{revisions + 1}). {extra}".strip(), "revisions": revisions + 1}


def review(state: ReviewState) -> Command:
    verdict = interrupt({"question": "Approve this draft?", "draft": state["draft"]})
    if verdict.get("approve"):
        return Command(goto=END)
    return Command(update={"notes": [verdict["note"]]}, goto="write_draft")


builder = StateGraph(ReviewState)
builder.add_node("write_draft", write_draft)
builder.add_node("review", review, destinations=("write_draft", END))
builder.add_edge(START, "write_draft")
builder.add_edge("write_draft", "review")

# -- running it with graphckpt -------------------------------------------------------------------------------------


def main(db: str = "review.db") -> str:
    from graphckpt.savers.sqlite import SqliteSaver

    with builder.compile(saver=SqliteSaver(db)) as app:
        waiting = app.invoke({"topic": "durable agents", "revisions": 0, "notes": []})
        thread = waiting.thread_id
        print("asked:", waiting.interrupts[0].payload["question"])
        app.resume(thread, Command(resume={"approve": False, "note": "Mention crashes."}))
        done = app.resume(thread, Command(resume={"approve": True}))
        draft: str = done.values["draft"]
        return draft


if __name__ == "__main__":
    print(main())
