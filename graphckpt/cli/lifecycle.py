"""The data-lifecycle commands: ``stats`` (where the disk went) and ``prune`` (retention and expiry)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any, get_args

from graphckpt.cli.session import Session, UsageError
from graphckpt.errors import InvalidUpdateError
from graphckpt.prune import PruneReport, parse_duration, prune
from graphckpt.savers.base import Status

__all__ = ["add_parsers", "cmd_prune", "cmd_stats"]


def add_parsers(command: Any, positive_int: Any) -> None:
    """Add ``stats`` and ``prune`` with ``command(name, help, description)`` (the CLI's parser factory)."""
    p = command(
        "stats",
        "bytes per table and the biggest threads",
        "Show where the store's bytes went: the size of each table (indexes included; on PostgreSQL dead tuples "
        "too, until VACUUM) and the threads whose rows take the most bytes.",
    )
    p.add_argument("--top", type=positive_int, default=10, metavar="N", help="how many threads to list (default 10)")

    p = command(
        "prune",
        "remove threads by retention policy or expiry",
        "Remove the threads that match every policy given: --older-than (last activity), --status, --thread, "
        "--expired (their tag ttl ran out); with --keep-last N the threads chosen (all, without another policy) "
        "keep their last N checkpoints instead of going. A running thread is never removed; its subgraphs' threads "
        "go with a thread; a thread a surviving fork depends on keeps its lineage up to the fork point. --dry-run "
        "prints what "
        "would go (threads, checkpoints, bytes); otherwise it asks first on a terminal and needs --yes elsewhere.",
    )
    p.add_argument("--older-than", metavar="DURATION", help="last activity older than this: seconds, 90m, 12h, 30d")
    p.add_argument("--status", metavar="S[,S]", help="only threads with one of these statuses (done,failed,...)")
    p.add_argument("--thread", action="append", metavar="ID", help="only this thread (repeatable)")
    p.add_argument("--expired", action="store_true", help="threads whose ttl (a run's tag) has run out")
    p.add_argument(
        "--keep-last", type=positive_int, metavar="N", help="keep the last N checkpoints of each thread chosen"
    )
    p.add_argument("--dry-run", action="store_true", help="only print what would be removed")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"  # pragma: no cover


def _policy(args: argparse.Namespace) -> dict[str, Any]:
    statuses = None
    if args.status is not None:
        statuses = [s.strip() for s in args.status.split(",") if s.strip()]
        unknown = sorted(set(statuses) - set(get_args(Status)))
        if unknown or not statuses:
            raise UsageError(
                f"--status: unknown status {unknown or args.status!r}; one of {', '.join(get_args(Status))}"
            )
    if args.older_than is not None:
        try:
            parse_duration(args.older_than, what="--older-than")
        except InvalidUpdateError as exc:
            raise UsageError(str(exc)) from None
    policy = {"older_than": args.older_than, "status": statuses, "thread_ids": args.thread, "expired": args.expired}
    if not any(v for v in policy.values()) and args.keep_last is None:
        raise UsageError("prune needs a policy: --older-than, --status, --thread, --expired or --keep-last")
    return {**policy, "keep_last": args.keep_last}


async def cmd_prune(args: argparse.Namespace, s: Session) -> int:
    """Prune by policy: a dry run first (printed, or asked about on a terminal), then the removal."""
    saver = s.saver()
    policy = _policy(args)
    planned = await prune(saver, **policy, dry_run=True)
    if args.dry_run or not planned.threads:
        _report(planned, args.json)
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError(f"not pruning {len(planned.threads)} thread(s) without confirmation: pass --yes")
        what = f"{planned.checkpoints} checkpoint(s), {_size(planned.bytes)}"
        if planned.keep_last is not None:
            what = f"{what} from {len(planned.threads)} thread(s), keeping the last {planned.keep_last} of each"
        else:
            what = f"{len(planned.threads)} thread(s), {what}"
        sys.stderr.write(f"remove {what}? [y/N] ")
        sys.stderr.flush()
        if (await asyncio.to_thread(sys.stdin.readline)).strip().lower() not in ("y", "yes"):
            sys.stderr.write("graphckpt: nothing pruned\n")
            return 1
    _report(await prune(saver, **policy), args.json)
    return 0


def _report(report: PruneReport, as_json: bool) -> None:
    if as_json:
        print(json.dumps(report.as_json(), indent=2, ensure_ascii=False))
        return
    verb = "would remove" if report.dry_run else "removed"
    if report.keep_last is not None:
        print(
            f"{verb} {report.checkpoints} checkpoint(s), {_size(report.bytes)}, from {len(report.threads)} thread(s)"
            f" (keeping the last {report.keep_last} of each)"
        )
    else:
        print(f"{verb} {len(report.threads)} thread(s), {report.checkpoints} checkpoint(s), {_size(report.bytes)}")
    for thread_id in report.threads:
        print(f"  {thread_id}")


async def cmd_stats(args: argparse.Namespace, s: Session) -> int:
    """Print :meth:`Saver.storage_usage`."""
    usage = await s.saver().storage_usage(top=args.top)
    if args.json:
        print(json.dumps(usage.as_json(), indent=2, ensure_ascii=False))
        return 0
    print(f"total {_size(usage.total)} in {usage.thread_count} thread(s)")
    for table, size in sorted(usage.tables.items(), key=lambda kv: -kv[1]):
        print(f"  {table:<24} {_size(size):>12}")
    if usage.threads:
        print(f"biggest threads (of {usage.thread_count}):")
        for t in usage.threads:
            print(f"  {t.thread_id:<40} {_size(t.bytes):>12}  {t.checkpoints} checkpoint(s)")
    return 0
