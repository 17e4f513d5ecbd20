"""The graph of the worker tests (``test_workers.py``) and the workers bench: ``step`` loops ``$WORKER_STEPS``
times (default 5); each time it sleeps ``$WORKER_SLEEP`` seconds (default 0.02: an I/O-bound call standing in for a
model call) inside a journaled effect that appends ``<idempotency key>\\t<pid>`` to ``$WORKER_SIDE`` (when set).
``agraph`` is the same loop with an async node that awaits ``asyncio.sleep`` in its effect instead."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Annotated

from pydantic import BaseModel

from graphckpt import END, START, Context, StateGraph, append

STEPS = int(os.environ.get("WORKER_STEPS", "5"))


class WorkState(BaseModel):
    n: int = 0
    results: Annotated[list[str], append] = []


def _call(key: str, n: int) -> str:
    time.sleep(float(os.environ.get("WORKER_SLEEP", "0.02")))
    side = os.environ.get("WORKER_SIDE")
    if side:
        with open(side, "a") as f:
            f.write(f"{key}\t{os.getpid()}\n")
    return f"r{n}"


async def _acall(key: str, n: int) -> str:
    await asyncio.sleep(float(os.environ.get("WORKER_SLEEP", "0.02")))
    side = os.environ.get("WORKER_SIDE")
    if side:
        with open(side, "a") as f:  # noqa: ASYNC230 (one short append, as the sync node's)
            f.write(f"{key}\t{os.getpid()}\n")
    return f"r{n}"


def step(state: WorkState, ctx: Context) -> dict[str, object]:
    value = ctx.effect(lambda: _call(ctx.idempotency_key, state.n))
    return {"n": state.n + 1, "results": [value]}


graph = StateGraph(WorkState)
graph.add_node("step", step)
graph.add_edge(START, "step")
graph.add_conditional_edges("step", lambda s: "step" if s.n < STEPS else END)


async def astep(state: WorkState, ctx: Context) -> dict[str, object]:
    value = await ctx.aeffect(_acall, ctx.idempotency_key, state.n)
    return {"n": state.n + 1, "results": [value]}


agraph = StateGraph(WorkState)
agraph.add_node("step", astep)
agraph.add_edge(START, "step")
agraph.add_conditional_edges("step", lambda s: "step" if s.n < STEPS else END)
