"""Waiting out a killed process's lease before resuming its thread (the children of the crash tests use short
leases, 0.2-0.5 s): until then the thread is ``running`` with a live lease and a resume is refused; after it, the
thread is ``crashed`` (or released) and resumable. Bounded: the wait fails naming the thread after 30 s."""

from __future__ import annotations

import time
from typing import Any

from support.waiting import await_for, wait_for

__all__ = ["DEADLINE", "await_unleased", "wait_unleased"]

DEADLINE = 30.0


def wait_unleased(app: Any, thread_id: str) -> None:
    def unleased() -> bool:
        info = app.thread(thread_id)
        return info.status != "running" or info.lease is None

    wait_for(unleased, DEADLINE, what=f"the lease on thread {thread_id!r} to end")


async def await_unleased(app: Any, thread_id: str) -> None:
    """Also waits for the thread's subgraph child threads (``{thread_id}|...``): each has its own lease, renewed by
    the killed process a moment apart from the parent's, and resuming the parent resumes them."""

    async def unleased() -> bool:
        info = await app.athread(thread_id)
        return info.status != "running" or info.lease is None

    async def children_unleased() -> bool:
        now = time.time()
        rows = await app.saver.list_threads()
        held = [r for r in rows if r.thread_id.startswith(thread_id + "|") and r.lease is not None]
        return not any(r.lease.live(now) for r in held)

    await await_for(unleased, DEADLINE, what=f"the lease on thread {thread_id!r} to end")
    await await_for(children_unleased, DEADLINE, what=f"the leases on the child threads of {thread_id!r} to end")
