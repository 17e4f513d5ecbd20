"""The ``import-langgraph`` command: a LangGraph SqliteSaver database copied into graphckpt through the compat saver
(see :mod:`graphckpt.compat.lgimport`)."""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path
from typing import Any

from graphckpt.errors import GraphckptError
from graphckpt.targets import Database

__all__ = ["add_parser", "cmd_import_langgraph"]


def add_parser(command: Any) -> None:
    """Add ``import-langgraph`` with ``command(name, help, description)`` (the CLI's parser factory)."""
    p = command(
        "import-langgraph",
        "copy a LangGraph SqliteSaver or PostgresSaver database in",
        "Read every thread of a LangGraph SqliteSaver file (its checkpoints and writes tables) or PostgresSaver "
        "database (a postgresql:// URL, ?schema=NAME for another schema; only read) and write it to --db "
        "through graphckpt's LangGraph checkpointer (GraphckptSaver), so the same graphs continue on it with "
        "compile(checkpointer=GraphckptSaver...). Values are read by LangGraph's serializer restricted to its safe "
        "types (messages, Send, Interrupt, Command, dates, ...) plus the classes given with --allow; any other type "
        "stops the import, naming it. Needs the langgraph extra (pip install 'graphckpt[langgraph]'). Reports "
        "threads, checkpoints and bytes before and after.",
    )
    p.add_argument(
        "source",
        metavar="SOURCE",
        help="the LangGraph SQLite file (a path or sqlite:///path) or PostgreSQL database (postgresql://...)",
    )
    p.add_argument(
        "--allow", action="append", default=[], metavar="MODULE:CLASS", help="also allow this class (repeatable)"
    )


def _class(spec: str) -> type:
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise GraphckptError(f"--allow {spec!r}: give MODULE:CLASS")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise GraphckptError(f"--allow {spec!r}: {exc}") from None
    if not isinstance(found, type):
        raise GraphckptError(f"--allow {spec!r} is not a class")
    return found


def cmd_import_langgraph(args: argparse.Namespace) -> int:
    from graphckpt.compat.langgraph import GraphckptSaver
    from graphckpt.compat.lgimport import import_langgraph

    source = args.source.removeprefix("sqlite:///") if args.source.startswith("sqlite:///") else args.source
    allow = [_class(spec) for spec in args.allow]
    db = Database(getattr(args, "db", None))
    target = GraphckptSaver(db.saver(create=True), types=allow)
    try:
        report = import_langgraph(source, target, allow=allow)
    finally:
        target.close()
    if not db.is_postgres:  # (on PostgreSQL: see `graphckpt stats`)
        report.bytes_after = sum(p.stat().st_size for p in (Path(db.url), Path(f"{db.url}-wal")) if p.exists())
    out = {
        "threads": report.threads,
        "checkpoints": report.checkpoints,
        "writes": report.writes,
        "bytes_before": report.bytes_before,
        "bytes_after": report.bytes_after,
        "thread_ids": report.thread_ids,
    }
    if getattr(args, "json", False):
        print(json.dumps(out, indent=2, ensure_ascii=False))
    else:
        print(
            f"imported {report.threads} thread(s), {report.checkpoints} checkpoint(s), {report.writes} write(s); "
            f"{report.bytes_before} bytes in the LangGraph file, {report.bytes_after} bytes in {db.url}"
        )
    return 0
