"""The graph of the durable-wait crash tests (``tests/waits/test_wait_crash.py``): ``nap`` appends
``before\\t<thread>\\t<pid>`` to ``$SLEEP_SIDE`` in a journaled effect, sleeps ``$SLEEP_SECONDS`` (default 2) with
``ctx.sleep``, then appends ``after\\t<thread>\\t<pid>`` in another journaled effect."""

from __future__ import annotations

import os

from pydantic import BaseModel

from graphckpt import END, START, Context, StateGraph


class Nap(BaseModel):
    woke: bool = False


def _note(what: str, thread_id: str) -> str:
    with open(os.environ["SLEEP_SIDE"], "a") as f:
        f.write(f"{what}\t{thread_id}\t{os.getpid()}\n")
        f.flush()
        os.fsync(f.fileno())
    return what


def nap(state: Nap, ctx: Context) -> dict[str, object]:
    ctx.effect(_note, "before", ctx.thread_id)
    ctx.sleep(float(os.environ.get("SLEEP_SECONDS", "2")))
    ctx.effect(_note, "after", ctx.thread_id)
    return {"woke": True}


graph = StateGraph(Nap)
graph.add_node("nap", nap)
graph.add_edge(START, "nap")
graph.add_edge("nap", END)
