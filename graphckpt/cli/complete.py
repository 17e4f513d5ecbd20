"""Shell completion (``pip install 'graphckpt[completion]'``, then ``eval "$(register-python-argcomplete
graphckpt)"``): commands and options from the parser, thread ids and checkpoint ids from the database the command
line names (``--db``, ``$GRAPHCKPT_DB`` or ``graphckpt.db``). Imported only while the shell asks for completions, so
the command's start-up does not grow; reading the database here never creates or changes it."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Callable
from typing import Any

__all__ = ["autocomplete", "ids"]


def autocomplete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request (argcomplete's protocol) and exit; without argcomplete, do nothing."""
    try:
        import argcomplete
    except ImportError:
        return
    argcomplete.autocomplete(parser)


def ids(kind: str, prefix: str, parsed_args: argparse.Namespace) -> list[str]:
    """Thread ids (``kind`` ``thread``) or the checkpoint ids of the thread already typed, starting with ``prefix``."""
    if kind == "thread":
        return _read(parsed_args, lambda reader: [t.thread_id for t in reader.threads()], prefix)
    thread = getattr(parsed_args, "thread", None)
    if not thread:
        return []
    return _read(parsed_args, lambda reader: [s.checkpoint_id for s in reader.history(thread)], prefix)


def _read(parsed_args: argparse.Namespace, ids: Callable[[Any], list[str]], prefix: str) -> list[str]:
    """``ids`` of the database named on the command line, starting with ``prefix``; nothing when it cannot be read
    (a completion never prints an error)."""
    from graphckpt.reader import RawReader
    from graphckpt.targets import DEFAULT_DB, Database

    url = getattr(parsed_args, "db", None) or os.environ.get("GRAPHCKPT_DB") or DEFAULT_DB
    try:
        db = Database(url)
        asyncio.run(db.require_tables())
        with RawReader(db.saver(create=False)) as reader:
            return [i for i in ids(reader) if i.startswith(prefix)]
    except Exception:
        return []
