"""Schedules: a report graph run by a cron, a new thread per tick, fired by a worker exactly once per tick.

The cron here ticks every second (``* * * * * *``, seconds last) so the example ends quickly; a real one would be
``0 9 * * 1-5`` with ``timezone="Europe/Oslo"``. A worker (here in this process; in production ``graphckpt worker`` or
``graphckpt serve``, any number of them) fires each tick once: a compare-and-set on the cron's next run time queues
the tick's run. ``graphckpt cron list`` shows the same counters this prints.

    python examples/cron_schedule.py [--db PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from graphckpt import END, START, StateGraph, Worker
from graphckpt.crons import add_cron
from graphckpt.savers.sqlite import SqliteSaver

GRAPH = "examples.cron_schedule:graph"


class Report(BaseModel):
    kind: str = ""
    text: str = ""


def write(state: Report) -> dict[str, Any]:
    return {"text": f"{state.kind} report written"}


graph = StateGraph(Report)
graph.add_node("write", write)
graph.add_edge(START, "write")
graph.add_edge("write", END)


async def main(db: str) -> None:
    saver = SqliteSaver(db)
    app = graph.compile(saver=saver)
    cron = await add_cron(app, "* * * * * *", graph=GRAPH, input={"kind": "daily"}, metadata={"team": "ops"})
    workers = [Worker({GRAPH: app}, poll=0.1) for _ in range(2)]  # two workers: each tick still runs once
    loops = [asyncio.ensure_future(w.run()) for w in workers]
    try:
        for _ in range(600):  # at most a minute
            row = await saver.get_cron(cron.cron_id)
            if row is not None and row.runs >= 3:
                break
            await asyncio.sleep(0.1)
        await saver.delete_cron(cron.cron_id)
        for _ in range(600):
            runs = await saver.list_runs()
            if runs and all(r.status == "done" for r in runs):
                break
            await asyncio.sleep(0.1)
    finally:
        for w in workers:
            w.stop()
        await asyncio.gather(*loops)
    ticks = sorted(r.thread_id for r in runs)
    print(f"cron {cron.cron_id}: {len(ticks)} ticks, each run once")
    for thread_id in ticks:
        print(f"  {thread_id}: {(await app.aget_state(thread_id)).values.text}")
    await app.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", help="the SQLite file (default: a new temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(args.db or str(Path(tmp) / "crons.db")))
