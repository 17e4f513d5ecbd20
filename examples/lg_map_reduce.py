"""Map-reduce with ``Send``, written the LangGraph way; only the imports are graphckpt's. Subjects are generated,
one joke task per subject runs in parallel (each its own task, checkpointed), and the best joke is picked.
``python examples/lg_map_reduce.py`` runs it on SQLite.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from graphckpt import END, START, Send, StateGraph

# -- the graph (the part that is the same in LangGraph) ------------------------------------------------------------


class OverallState(TypedDict):
    topic: str
    subjects: list[str]
    jokes: Annotated[list[str], operator.add]
    best: str


class JokeState(TypedDict):
    subject: str


def generate_topics(state: OverallState) -> dict[str, Any]:
    return {"subjects": [f"{state['topic']} {kind}" for kind in ("cats", "queues", "retries")]}


def generate_joke(state: JokeState) -> dict[str, Any]:
    return {"jokes": [f"Why did the {state['subject']} cross the road? To be checkpointed."]}


def continue_to_jokes(state: OverallState) -> list[Send]:
    return [Send("generate_joke", {"subject": s}) for s in state["subjects"]]


def best_joke(state: OverallState) -> dict[str, Any]:
    return {"best": max(state["jokes"], key=len)}


builder = StateGraph(OverallState)
builder.add_node("generate_topics", generate_topics)
builder.add_node("generate_joke", generate_joke)
builder.add_node("best_joke", best_joke)
builder.add_edge(START, "generate_topics")
builder.add_conditional_edges("generate_topics", continue_to_jokes, ["generate_joke"])
builder.add_edge("generate_joke", "best_joke")
builder.add_edge("best_joke", END)

# -- running it with graphckpt -------------------------------------------------------------------------------------


def main(db: str = "map_reduce.db") -> str:
    from graphckpt.savers.sqlite import SqliteSaver

    with builder.compile(saver=SqliteSaver(db)) as app:
        best: str = app.invoke({"topic": "distributed", "jokes": []}).values["best"]
        return best


if __name__ == "__main__":
    print(main())
