"""``graphckpt threads``: a first page of threads (newest created first), the next page after a cursor, or every
thread page by page in flat memory."""

from __future__ import annotations

import argparse
import json
import sys

from graphckpt import plain
from graphckpt.checkpoint import ThreadInfo
from graphckpt.cli.output import prices_of, print_json, renderer
from graphckpt.cli.session import Session
from graphckpt.listing import PAGE as LIST_PAGE
from graphckpt.listing import iter_threads
from graphckpt.views import thread_info

__all__ = ["cmd_threads"]


async def cmd_threads(args: argparse.Namespace, s: Session) -> int:
    """List threads, newest created first: a page of ``--limit`` (after ``--after``'s thread), or ``--all`` of them
    page by page (memory stays flat: each page is printed and dropped)."""
    reader = s.reader()
    if args.status == "waiting":  # the threads a durable wait holds, with when each wakes
        from graphckpt.cli.waits import cmd_threads_waiting

        return await cmd_threads_waiting(args, reader.saver, s.db.display)
    if args.all:
        return await _all_threads(args, s)
    infos = await reader.athreads(args.status, limit=args.limit + 1, after=args.after)
    more, infos = len(infos) > args.limit, infos[: args.limit]
    await _print_threads(args, s, infos, empty=not infos)
    if more:
        hint = f"(the {args.limit} newest shown; next page: --after {infos[-1].cursor}, or --all)"
        print(hint, file=sys.stderr if args.json else sys.stdout)
    return 0


async def _all_threads(args: argparse.Namespace, s: Session) -> int:
    """``--all``: one query, table and JSON chunk per page of threads; ``--json`` is still one array."""
    page: list[ThreadInfo] = []
    shown = 0
    if args.json:
        sys.stdout.write("[")
    async for record in iter_threads(s.reader().saver, status=args.status, after=args.after, page=LIST_PAGE):
        page.append(thread_info(record))
        if len(page) == LIST_PAGE:
            await _print_threads(args, s, page, empty=False, first=shown == 0)
            shown, page = shown + len(page), []
    if page or not shown:
        await _print_threads(args, s, page, empty=not page and not shown, first=shown == 0)
    if args.json:
        print("]")
    return 0


async def _print_threads(
    args: argparse.Namespace, s: Session, infos: list[ThreadInfo], *, empty: bool, first: bool = True
) -> None:
    reader = s.reader()
    prices = prices_of(args)
    spends = {i.thread_id: await reader.aspend(i.thread_id, prices=prices) for i in infos}
    if args.json:
        records = [plain.thread_record(i, spends[i.thread_id]) for i in infos]
        if not args.all:
            print_json(records)
        elif records:
            text = json.dumps(plain.to_jsonable(records), indent=2, ensure_ascii=False, allow_nan=False)
            sys.stdout.write(("" if first else ",") + text[1:-1].rstrip("\n"))
        return
    render = renderer()
    out = render.console()
    if empty:
        out.print(f"no threads{f' with status {args.status}' if args.status else ''} in {s.db.display}", markup=False)
    elif infos:
        out.print(render.threads_table(infos, out.width, spends))
