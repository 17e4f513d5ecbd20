"""Child process for ``tests/items/test_ctx_store_crash.py``: a one-node graph on a SQLite file whose node reads a
counter from the long-term store (``ctx.store``), writes it plus one, and (with ``STORE_KILL=1``) then says
``in-node`` and blocks so the parent can SIGKILL it mid-step.

``python tests/support/store_child.py DB THREAD`` runs the thread or resumes it (see
:func:`support.audit_child.run_or_resume`), printing ``commit <step>`` and ``done <status>``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from pydantic import BaseModel

from graphckpt import END, START, StateGraph
from support.audit_child import run_or_resume, say

NS = ("counters", "shared")


class State(BaseModel):
    seen: int = -1


def bump(state: State, ctx: Any) -> dict[str, Any]:
    item = ctx.store.get(NS, "visits")
    n = item.value["n"] if item is not None else 0
    ctx.store.put(NS, "visits", {"n": n + 1})
    if os.environ.get("STORE_KILL") == "1":
        say("in-node")
        time.sleep(60)  # the parent SIGKILLs us here: the put is journaled, the step is not committed
    return {"seen": n}


def build_graph() -> StateGraph:
    g = StateGraph(State)
    g.add_node("bump", bump)
    g.add_edge(START, "bump")
    g.add_edge("bump", END)
    return g


if __name__ == "__main__":
    os.environ.setdefault("GRAPHCKPT_LEASE_SECONDS", "0.5")
    sys.exit(run_or_resume(build_graph(), sys.argv[1], sys.argv[2]))
