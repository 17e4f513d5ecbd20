"""Determinism (invariant 4): the state after a super-step does not depend on which parallel task finished first.

The tests force finish orders instead of hoping for them: each branch waits for the branch before it in a chosen
permutation, so every order hypothesis picks really happens.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from graphckpt import END, START, StateGraph, append, merge
from graphckpt.savers.memory import MemorySaver


class S(BaseModel):
    log: Annotated[list[str], append] = []
    seen: Annotated[dict[str, int], merge] = {}
    last: str | None = None


def build(n: int, order: list[int], finished: list[int]) -> StateGraph:
    gates = [asyncio.Event() for _ in range(n)]
    position = {branch: i for i, branch in enumerate(order)}

    def branch(i: int) -> Any:
        async def run(s: S) -> dict[str, Any]:
            p = position[i]
            if p > 0:
                await gates[order[p - 1]].wait()
            finished.append(i)
            gates[i].set()
            return {"log": [f"b{i}"], "seen": {"k": i, f"b{i}": len(s.log)}, "last": f"b{i}"}

        return run

    g = StateGraph(S)
    for i in range(n):
        g.add_node(f"b{i}", branch(i))
        g.add_edge(START, f"b{i}")
    g.add_edge([f"b{i}" for i in range(n)], "done")
    g.add_node("done", lambda s: {"log": ["done"]})
    g.add_edge("done", END)
    return g


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(min_value=2, max_value=7).flatmap(lambda n: st.permutations(list(range(n)))))
def test_parallel_branches_give_the_same_state_in_any_finish_order(order: list[int]) -> None:
    n = len(order)

    async def run() -> tuple[Any, list[int]]:
        finished: list[int] = []
        app = build(n, order, finished).compile(saver=MemorySaver())
        snap = await app.ainvoke({}, thread_id="t")
        return snap.values, finished

    values, finished = asyncio.run(run())
    assert finished == order  # the finish order really was the permutation
    assert values.log == [f"b{i}" for i in range(n)] + ["done"]  # frontier order
    assert values.seen == {"k": n - 1, **{f"b{i}": 0 for i in range(n)}}  # merge: later tasks in frontier order win
    assert values.last == f"b{n - 1}"
