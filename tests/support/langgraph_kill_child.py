"""A LangGraph graph that a test kills mid-run: ``python langgraph_kill_child.py KIND DB MARKS``.

``KIND`` is ``ours`` (GraphckptSaver over graphckpt's SQLite saver) or ``theirs`` (LangGraph's SqliteSaver). The
graph: ``start`` then, in parallel, ``quick`` and ``slow``, then ``join``. Each node appends its name to the file
``MARKS`` when it runs; ``slow`` blocks while the file ``MARKS.block`` exists (the test kills the process there), so
``quick``'s finished write is in the store and ``slow`` never finished."""

from __future__ import annotations

import operator
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import START, StateGraph


class State(TypedDict):
    log: Annotated[list[str], operator.add]


def build(checkpointer: Any, marks: Path) -> Any:
    def node(name: str) -> Any:
        def run(state: State) -> dict[str, Any]:
            with marks.open("a") as f:
                f.write(name + "\n")
            while name == "slow" and Path(f"{marks}.block").exists():
                time.sleep(0.01)
            return {"log": [name]}

        return run

    builder = StateGraph(State)
    for name in ("start", "quick", "slow", "join"):
        builder.add_node(name, node(name))
    builder.add_edge(START, "start")
    builder.add_edge("start", "quick")
    builder.add_edge("start", "slow")
    builder.add_edge(["quick", "slow"], "join")
    return builder.compile(checkpointer=checkpointer)


def checkpointer(kind: str, db: str) -> Any:
    if kind == "ours":
        from graphckpt.compat.langgraph import GraphckptSaver
        from graphckpt.savers.sqlite import SqliteSaver

        return GraphckptSaver(SqliteSaver(db))
    from langgraph.checkpoint.sqlite import SqliteSaver as LangGraphSqliteSaver

    return LangGraphSqliteSaver(sqlite3.connect(db, check_same_thread=False, isolation_level=None))


if __name__ == "__main__":
    kind, db, marks = sys.argv[1:4]
    graph = build(checkpointer(kind, db), Path(marks))
    graph.invoke({"log": []}, {"configurable": {"thread_id": "killed"}})
    os._exit(0)
