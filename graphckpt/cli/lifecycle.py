"""The data-lifecycle commands: ``stats`` (where the disk went) and ``prune`` (retention and expiry)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from graphckpt.cli.session import Session

__all__ = ["add_parsers", "cmd_stats"]


def add_parsers(command: Any, positive_int: Any) -> None:
    """Add ``stats`` and ``prune`` with ``command(name, help, description)`` (the CLI's parser factory)."""
    p = command(
        "stats",
        "bytes per table and the biggest threads",
        "Show where the store's bytes went: the size of each table (indexes included; on PostgreSQL dead tuples "
        "too, until VACUUM) and the threads whose rows take the most bytes.",
    )
    p.add_argument("--top", type=positive_int, default=10, metavar="N", help="how many threads to list (default 10)")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"  # pragma: no cover


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
