"""The service commands: ``graphckpt submit`` (queue a run), ``graphckpt runs`` (list the queue) and
``graphckpt worker`` (claim and run queued runs until SIGTERM or Ctrl-C; see :mod:`graphckpt.worker`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import sys
from typing import Any

from graphckpt.cli.session import CliError, Session, parse_json
from graphckpt.lease import LEASE_ENV
from graphckpt.savers.queue import RunRecord
from graphckpt.targets import UsageError

__all__ = ["cmd_runs", "cmd_submit", "cmd_worker"]


def _lease_option(args: argparse.Namespace) -> None:
    import os

    if getattr(args, "lease_seconds", None) is not None:
        os.environ[LEASE_ENV] = repr(args.lease_seconds)


async def cmd_submit(args: argparse.Namespace, s: Session) -> int:
    """Queue a run of graph ``MODULE:ATTR`` for a worker; prints its run id."""
    app = s.app(args.target, create=True)
    if args.resume:
        answer = parse_json(args.answer, "--answer") if args.answer is not None else None
        given = {"answer": answer} if args.answer is not None else {}
        run = await app.asubmit(
            None,
            thread_id=args.thread,
            multitask=args.multitask,
            resume=True,
            graph=args.target,
            recursion_limit=args.recursion_limit,
            **given,
        )
    else:
        update = parse_json(args.input, "--input")
        run = await app.asubmit(
            update,
            thread_id=args.thread,
            multitask=args.multitask,
            graph=args.target,
            recursion_limit=args.recursion_limit,
        )
    if args.json:
        print(json.dumps(run_record(run), indent=2))
    else:
        print(f"queued run {run.run_id} on thread {run.thread_id}")
    return 0


async def cmd_runs(args: argparse.Namespace, s: Session) -> int:
    """The queue: runs oldest first, optionally of one thread and/or status."""
    saver = s.saver()
    list_runs = getattr(saver, "list_runs", None)
    if list_runs is None:
        raise CliError(f"{type(saver).__name__} has no run queue")
    found: list[RunRecord] = await list_runs(thread_id=args.thread, status=args.status)
    if args.json:
        print(json.dumps([run_record(r) for r in found], indent=2))
        return 0
    if not found:
        print(f"no runs{f' with status {args.status}' if args.status else ''} in {s.db.display}")
        return 0
    for r in found:
        when = _iso(r.created_at)
        line = f"{r.run_id}  {r.status:<11} thread {r.thread_id}  {r.kind:<6} attempt {r.attempt}  {when}"
        print(line + (f"  error: {r.error}" if r.error else ""))
    return 0


async def cmd_worker(args: argparse.Namespace, s: Session) -> int:
    """Claim and run queued runs of the given graphs until SIGTERM or Ctrl-C (then: the running steps commit, the
    leases are released and those runs go back to the queue)."""
    from graphckpt.worker import Worker

    _lease_option(args)
    apps = {ref: s.app(ref, create=True) for ref in args.graph}
    if not 0 <= args.ttl_sweep_every < float("inf"):
        raise UsageError(f"--ttl-sweep-every must be 0 or more seconds, not {args.ttl_sweep_every}")
    worker = Worker(apps, concurrency=args.concurrency, poll=args.poll, ttl_sweep_every=args.ttl_sweep_every or None)
    stop = asyncio.Event()
    ctrl_c = getattr(args, "ctrl_c", None)
    if ctrl_c is not None:
        ctrl_c.stop = stop  # the first SIGTERM / Ctrl-C only sets this flag

    async def stop_on_signal() -> None:
        await stop.wait()
        worker.stop()

    watcher = asyncio.ensure_future(stop_on_signal())
    sys.stderr.write(f"graphckpt: worker for {', '.join(apps)} on {s.db.display} (concurrency {args.concurrency})\n")
    sys.stderr.flush()
    try:
        await worker.run()
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    sys.stderr.write(f"graphckpt: worker stopped after {worker.ran} run{'s' if worker.ran != 1 else ''}\n")
    return 0


def run_record(r: RunRecord) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "thread_id": r.thread_id,
        "kind": r.kind,
        "status": r.status,
        "graph": r.graph,
        "attempt": r.attempt,
        "worker": r.worker,
        "created_at": _iso(r.created_at),
        "started_at": _iso(r.started_at),
        "ended_at": _iso(r.ended_at),
        "error": r.error,
    }


def _iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    with contextlib.suppress(OverflowError, OSError, ValueError):
        return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat()
    return None
