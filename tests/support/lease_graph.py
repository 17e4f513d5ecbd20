"""The graph of the lease tests (``test_leases.py``), run by real ``graphckpt`` processes.

``graph``: ``first -> wait -> last``. Each node journals an effect that appends ``<node>:<effect>\\t<pid>`` to the
file ``$LEASE_SIDE`` (so the test counts how many times each external call ran, and in which process). ``wait``
journals ``wait:before`` (then appends its pid to ``$LEASE_GATE.reached``: the journal entry is committed), then
blocks until the file ``$LEASE_GATE`` exists (bounded: 60 s), then journals
``wait:after``.
"""

from __future__ import annotations

import os
from typing import Annotated

from pydantic import BaseModel

from graphckpt import END, START, Context, StateGraph, append
from support.waiting import wait_for


class LeaseState(BaseModel):
    done: Annotated[list[str], append] = []


def _side(line: str) -> str:
    with open(os.environ["LEASE_SIDE"], "a") as f:
        f.write(f"{line}\t{os.getpid()}\n")
        f.flush()
        os.fsync(f.fileno())
    return line


def first(state: LeaseState, ctx: Context) -> dict[str, list[str]]:
    return {"done": [ctx.effect(_side, "first:once")]}


def wait(state: LeaseState, ctx: Context) -> dict[str, list[str]]:
    before = ctx.effect(_side, "wait:before")
    with open(os.environ["LEASE_GATE"] + ".reached", "a") as f:  # its journal entry is committed now
        f.write(f"{os.getpid()}\n")
    wait_for(lambda: os.path.exists(os.environ["LEASE_GATE"]), 60, interval=0.01, what="the gate file")
    return {"done": [before, ctx.effect(_side, "wait:after")]}


def last(state: LeaseState, ctx: Context) -> dict[str, list[str]]:
    return {"done": [ctx.effect(_side, "last:once")]}


graph = StateGraph(LeaseState)
graph.add_node("first", first)
graph.add_node("wait", wait)
graph.add_node("last", last)
graph.add_edge(START, "first")
graph.add_edge("first", "wait")
graph.add_edge("wait", "last")
graph.add_edge("last", END)
