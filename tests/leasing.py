"""Waiting out a killed process's lease before resuming its thread (the children of the crash tests use short
leases, 0.2-0.5 s): until then the thread is ``running`` with a live lease and a resume is refused; after it, the
thread is ``crashed`` (or released) and resumable. Bounded: a child exits with the owner named after 30 s."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

DEADLINE = 30.0


def wait_unleased(app: Any, thread_id: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while (info := app.thread(thread_id)).status == "running" and info.lease is not None:
        if time.monotonic() > deadline:
            sys.exit(f"thread {thread_id!r} is still held by {info.lease.owner}")
        time.sleep(0.02)


async def await_unleased(app: Any, thread_id: str) -> None:
    """Also waits for the thread's subgraph child threads (``{thread_id}|...``): each has its own lease, renewed by
    the killed process a moment apart from the parent's, and resuming the parent resumes them."""
    deadline = time.monotonic() + DEADLINE
    while (info := await app.athread(thread_id)).status == "running" and info.lease is not None:
        if time.monotonic() > deadline:
            sys.exit(f"thread {thread_id!r} is still held by {info.lease.owner}")
        await asyncio.sleep(0.02)
    while held := [r for r in await app.saver.list_threads() if r.thread_id.startswith(thread_id + "|")
                   and r.lease is not None and r.lease.live(time.time())]:  # fmt: skip
        if time.monotonic() > deadline:
            sys.exit(f"child thread {held[0].thread_id!r} is still held by {held[0].lease.owner}")
        await asyncio.sleep(0.02)
