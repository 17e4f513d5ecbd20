"""Durable waits: a reminder agent that sleeps, and an approval that escalates when nobody answers in time.

``draft`` writes a reminder and sleeps 2 s with ``ctx.sleep``: the thread stops ``interrupted`` with a pending wait
(``graphckpt threads --status waiting`` lists it with its wake-up time); no process or lease is held while it
waits. ``approve`` asks a person with a 2 s deadline; nobody answers, so ``OnTimeout.goto("escalate")`` routes the
graph to ``escalate``. A worker (here in this process; in production ``graphckpt worker`` or ``graphckpt serve``) wakes
the thread at each time, exactly once, even if every process was down at the wake-up time and started later.

    python examples/durable_wait.py [--db PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel

from graphckpt import END, START, Context, StateGraph, Worker, append
from graphckpt.cli.waits import waiting_threads
from graphckpt.savers.sqlite import SqliteSaver
from graphckpt.waiting import OnTimeout

GRAPH = "examples.durable_wait:graph"


class Reminder(BaseModel):
    text: str
    log: Annotated[list[str], append] = []


def draft(state: Reminder, ctx: Context) -> dict[str, Any]:
    ctx.sleep(2)  # durable: the thread waits in the database, not in this process
    return {"log": [f"reminder sent: {state.text}"]}


def approve(state: Reminder, ctx: Context) -> dict[str, Any]:
    verdict = ctx.interrupt("approve the follow-up?", timeout=2, on_timeout=OnTimeout.goto("escalate"))
    return {"log": [f"approved: {verdict}"]}


def escalate(state: Reminder) -> dict[str, Any]:
    return {"log": ["nobody answered in time: escalated to the manager"]}


graph = StateGraph(Reminder)
graph.add_node("draft", draft)
graph.add_node("approve", approve, destinations=["escalate"])
graph.add_node("escalate", escalate)
graph.add_edge(START, "draft")
graph.add_edge("draft", "approve")
graph.add_edge("approve", END)
graph.add_edge("escalate", END)


async def main(db: str) -> None:
    saver = SqliteSaver(db)
    app = graph.compile(saver=saver)
    worker = Worker({GRAPH: app}, poll=0.1)
    loop = asyncio.ensure_future(worker.run())
    started = time.monotonic()
    try:
        await app.asubmit({"text": "send the report"}, thread_id="reminder-1", graph=GRAPH)
        shown: set[str] = set()
        while (record := await saver.get_thread("reminder-1")) is None or record.status not in ("done", "failed"):
            for row in await waiting_threads(saver):
                if row["wake_at"] not in shown:
                    shown.add(row["wake_at"])
                    print(f"{row['thread_id']} is waiting; wakes at {row['wake_at']}")
            await asyncio.sleep(0.1)
        print(f"{record.thread_id} {record.status} after {time.monotonic() - started:.1f} s")
        for line in (await app.aget_state("reminder-1")).values.log:
            print(" ", line)
    finally:
        worker.stop()
        await loop
        await app.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", help="the SQLite file (default: a new temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(args.db or str(Path(tmp) / "waits.db")))
