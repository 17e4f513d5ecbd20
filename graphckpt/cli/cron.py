"""``graphckpt cron add|list|delete``: schedules of a graph (a new thread per tick) or of a thread (a new turn per
tick), stored in the database and fired by workers (see :mod:`graphckpt.crons`)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import Any

from graphckpt.cli.session import CliError
from graphckpt.crons import CronError, add_cron
from graphckpt.savers.crons import CronRow, CronTable


def _iso(t: float | None) -> str | None:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat() if t is not None else None


def cron_record(row: CronRow) -> dict[str, Any]:
    return {
        "cron_id": row.cron_id,
        "graph": row.graph,
        "thread_id": row.thread_id,
        "schedule": row.schedule,
        "timezone": row.timezone,
        "end_at": _iso(row.end_at),
        "missed": row.missed,
        "next_run_at": _iso(row.next_run_at),
        "last_run_at": _iso(row.last_run_at),
        "runs": row.runs,
        "skipped": row.skipped,
        "metadata": json.loads(row.metadata),
    }


async def cmd_cron(args: argparse.Namespace, s: Any) -> int:
    if args.cron_command == "add":
        app = s.app(args.target, create=True)
        try:
            update = json.loads(args.input)
            metadata = json.loads(args.metadata) if args.metadata else None
        except ValueError as exc:
            raise CliError(f"--input/--metadata must be JSON: {exc}") from None
        end = dt.datetime.fromisoformat(args.end) if args.end else None
        if end is not None and end.tzinfo is None:
            raise CliError(f"--end needs a time zone (e.g. {args.end}+00:00)")
        try:
            row = await add_cron(
                app,
                args.schedule,
                graph=args.target,
                input=update,
                thread_id=args.thread,
                timezone=args.timezone,
                metadata=metadata,
                end_at=end,
                missed=args.missed,
            )
        except CronError as exc:
            raise CliError(str(exc)) from None
        _out(args, [row], f"added cron {row.cron_id}: next run {_iso(row.next_run_at)}")
        return 0
    saver = s.reader().saver
    if not isinstance(saver, CronTable):
        raise CliError(f"{type(saver).__name__} has no schedules")
    if args.cron_command == "delete":
        if not await saver.delete_cron(args.cron_id):
            raise CliError(f"no cron {args.cron_id!r}")
        print(f"deleted cron {args.cron_id}")
        return 0
    rows = await saver.list_crons()
    _out(args, rows, None)
    return 0


def _out(args: argparse.Namespace, rows: list[CronRow], line: str | None) -> None:
    if args.json:
        data: Any = cron_record(rows[0]) if line is not None else [cron_record(r) for r in rows]
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    elif line is not None:
        sys.stdout.write(line + "\n")
    elif not rows:
        sys.stdout.write("no crons\n")
    else:
        for r in rows:
            what = f"thread {r.thread_id}" if r.thread_id else "new thread per tick"
            sys.stdout.write(
                f"{r.cron_id}  {r.schedule!r} {r.timezone}  {r.graph} ({what})  next {_iso(r.next_run_at) or '-'}  "
                f"runs {r.runs}  skipped {r.skipped} (missed: {r.missed})\n"
            )


def add_parser(command: Any, parents: list[Any]) -> None:
    """The ``cron`` command and its three subcommands (``command`` is the CLI's parser factory; ``parents`` give
    each subcommand ``--db`` and ``--json``)."""
    p = command("cron", "schedules: add, list, delete", "Schedules of graphs or threads, fired by workers.")
    sub = p.add_subparsers(dest="cron_command", metavar="SUBCOMMAND", required=True)
    a = sub.add_parser("add", help="add a cron", description="Add a cron of the graph MODULE:ATTR.", parents=parents)
    a.add_argument("target", metavar="MODULE:ATTR", help="the graph workers run at each tick (their --graph)")
    a.add_argument("schedule", help="a cron expression (5 fields, or 6 with seconds last), e.g. '0 9 * * 1-5'")
    a.add_argument("--input", default="{}", metavar="JSON", help="each tick's input (default {})")
    a.add_argument("--thread", metavar="ID", help="a new turn of this thread per tick (default: a new thread)")
    a.add_argument("--timezone", default="UTC", metavar="ZONE", help="IANA time zone of the schedule (default UTC)")
    a.add_argument("--metadata", metavar="JSON", help="the runs' metadata")
    a.add_argument("--end", metavar="ISO", help="no tick after this time (ISO 8601 with a zone)")
    a.add_argument("--missed", choices=("once", "skip"), default="once", help="missed ticks after downtime")
    sub.add_parser("list", help="list crons", description="Every cron with its next run and counts.", parents=parents)
    d = sub.add_parser("delete", help="delete a cron", description="Delete a cron.", parents=parents)
    d.add_argument("cron_id", metavar="ID")
