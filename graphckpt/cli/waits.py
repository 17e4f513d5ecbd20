"""``graphckpt threads --status waiting``: the threads that wait for a time (a durable sleep or an interrupt's
deadline, see :mod:`graphckpt.waiting`), each with when it wakes."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import Any

from graphckpt import ids
from graphckpt.savers.base import Saver
from graphckpt.savers.waits import WaitTable, wake_times
from graphckpt.subgraph import link_of


async def waiting_threads(saver: Saver) -> list[dict[str, Any]]:
    """The waiting threads, soonest first (see :func:`~graphckpt.savers.waits.wake_times`; a subgraph's child
    thread is not listed: its root thread waits for it)."""
    if not isinstance(saver, WaitTable):
        return []
    now, out = ids.now(), []
    waits = await saver.list_waits(status="pending")
    records = [
        r for w in waits if (r := await saver.get_thread(w.thread_id)) is not None and link_of(r.metadata) is None
    ]
    wakes = await wake_times(saver, records)
    for wait in waits:
        if wait.thread_id not in wakes:
            continue
        out.append(
            {
                "thread_id": wait.thread_id,
                "status": "waiting",
                "wake_at": dt.datetime.fromtimestamp(wait.wake_at, dt.UTC).isoformat(),
                "wakes_in_s": round(wait.wake_at - now, 3),
                "checkpoint_id": wait.checkpoint_id,
            }
        )
    return out


async def cmd_threads_waiting(args: argparse.Namespace, saver: Any, display: str) -> int:
    rows = await waiting_threads(saver)
    if args.limit is not None:
        rows = rows[: args.limit]
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return 0
    if not rows:
        sys.stdout.write(f"no threads with status waiting in {display}\n")
        return 0
    width = max(len("THREAD"), *(len(r["thread_id"]) for r in rows))
    sys.stdout.write(f"{'THREAD':<{width}}  {'WAKES AT (UTC)':<32}  IN\n")
    for r in rows:
        due = r["wakes_in_s"]
        when = f"{due:.1f}s" if due > 0 else f"due {-due:.1f}s ago (a worker wakes it on its next sweep)"
        sys.stdout.write(f"{r['thread_id']:<{width}}  {r['wake_at']:<32}  {when}\n")
    return 0
