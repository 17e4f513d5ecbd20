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
from graphckpt.savers.waits import WaitTable


async def waiting_threads(saver: Saver) -> list[dict[str, Any]]:
    """The waiting threads, soonest first: a pending wait whose thread is still ``interrupted`` at that checkpoint
    (a wait whose thread is still running at it is about to be: its node is stopping)."""
    if not isinstance(saver, WaitTable):
        return []
    now, out = ids.now(), []
    waits = await saver.list_waits(status="pending")
    for wait in waits:
        record = await saver.get_thread(wait.thread_id)
        if record is None or record.head_checkpoint_id != wait.checkpoint_id:
            continue
        if record.status not in ("interrupted", "running"):
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
