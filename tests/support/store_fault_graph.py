"""A graph whose first run dies of a store error (``test_recover_faults.py``): ``lock -> count -> END``. The first
time ``lock`` runs (the file ``$STORE_FAULT_FLAG`` absent) it creates that file and starts a child process that holds
the SQLite file ``$STORE_FAULT_DB``'s write lock (``BEGIN IMMEDIATE``) for ``$STORE_FAULT_HOLD`` seconds (default 2),
and returns once the lock is held: the step's commit then waits past a short ``busy_timeout`` and fails with
:class:`~graphckpt.errors.SaverError`. With ``$STORE_FAULT_PG_APP`` set it terminates instead every PostgreSQL
connection of that ``application_name`` (on the server of ``$STORE_FAULT_PG_DSN``): the step's commit fails on its
dropped connection, and the next statement (a release) would go through on a new one. Every later run goes
through."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Annotated

from pydantic import BaseModel

from graphckpt import END, START, StateGraph, append

HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""

HOLDERS: list[subprocess.Popen[str]] = []
"""The lock holders this process started (a test waits for them)."""


class FaultState(BaseModel):
    done: Annotated[list[str], append] = []


def lock(state: FaultState) -> dict[str, list[str]]:
    flag = os.environ["STORE_FAULT_FLAG"]
    if not os.path.exists(flag):
        open(flag, "w").close()
        name = os.environ.get("STORE_FAULT_PG_APP")
        if name:
            import psycopg

            with psycopg.connect(os.environ["STORE_FAULT_PG_DSN"], autocommit=True) as conn:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (name,)
                )
            return {"done": ["lock"]}
        hold = os.environ.get("STORE_FAULT_HOLD", "2")
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, os.environ["STORE_FAULT_DB"], hold], stdout=subprocess.PIPE, text=True
        )
        HOLDERS.append(holder)
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    return {"done": ["lock"]}


def count(state: FaultState) -> dict[str, list[str]]:
    return {"done": [f"count after {len(state.done)}"]}


graph = StateGraph(FaultState)
graph.add_node("lock", lock)
graph.add_node("count", count)
graph.add_edge(START, "lock")
graph.add_edge("lock", "count")
graph.add_edge("count", END)
