"""``graphckpt recover``: continue crashed threads (``running`` with an expired lease: their process died).

``--yes`` continues every one (the automatic strategy, once): one it cannot continue (no graph recorded, a run that
fails) is reported and the others still run, and the exit status is 1 at the end; one another process holds by then
is reported "skipped: taken by <owner>", which is no failure. Without it, on a terminal, each crashed thread is
described (graph, last step, what it was running, tokens spent so far, how long ago its process was last heard
from) and continued only after a ``y``; any other answer leaves it untouched. Elsewhere (a script) it needs
``--yes``. Each thread runs with the graph recorded in it (or ``--graph``), through ``resume``, which takes it over.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from graphckpt.cli.session import CliError, Session, UsageError
from graphckpt.recovery import crashed, recover

__all__ = ["cmd_recover"]


async def cmd_recover(args: argparse.Namespace, s: Session) -> int:
    """Continue crashed threads: all with ``--yes``; on a terminal, those a person confirms one by one."""
    if not args.yes and not sys.stdin.isatty():
        raise UsageError("not recovering without confirmation: pass --yes (not a terminal)")
    reader = s.reader()
    records = await reader.saver.list_threads(status="crashed")
    if not records:
        print(f"no crashed threads in {s.db.display}")
        return 0
    failed = 0
    # each crashed thread is read once to describe it (its row came with the list); resume then takes it over
    for info in await crashed(reader.store, records):  # a subgraph's child thread is left to its parent's recovery
        try:  # each one on its own: a thread that cannot be recovered does not stop the others
            app, _ = s.app_of(info.thread_id, info.graph, args.graph, action="recover")
        except CliError as exc:
            failed += 1
            print(f"thread {info.thread_id}: not recovered: {exc}")
            continue
        line = (
            f"thread {info.thread_id}: graph {info.graph or '?'}, crashed at step {info.step} running "
            f"{', '.join(info.running) or 'nothing'}; {info.tokens:,} tokens so far; last heard from "
            f"{_ago(info.seconds_ago)} ago ({info.lease.owner})"
        )
        if not args.yes:
            sys.stderr.write(f"{line}\ncontinue it? [y/N] ")
            sys.stderr.flush()
            answer = await asyncio.to_thread(sys.stdin.readline)
            if answer.strip().lower() not in ("y", "yes"):
                print(f"thread {info.thread_id}: left as it is")
                continue
        else:
            print(line)
        [result] = await recover(app.aresume, [info.thread_id])
        if result.skipped:  # another process holds it now (recovered it first, or came back): not a failure
            print(f"thread {info.thread_id}: skipped: {result.error}")
        elif result.snapshot is None:
            failed += 1
            print(f"thread {info.thread_id}: not recovered: {result.error}")
        else:
            snap = result.snapshot
            print(f"thread {info.thread_id}: {snap.status} at step {snap.step} (checkpoint {snap.checkpoint_id})")
    if failed:
        raise CliError(f"{failed} crashed thread{'s' if failed != 1 else ''} could not be recovered (see above)")
    return 0


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
