"""The UI's thread list, one keyset page at a time (``GET /ui/?status=&graph=&q=&after=&per=``).

A page is read with :meth:`~graphckpt.savers.base.Saver.page_threads` (through
:func:`~graphckpt.listing.iter_threads`): newest created first, the ``status`` filter in SQL, so the first page
costs the same at any number of threads. The page's ``next`` is the cursor of its last row (``?after=``): a thread
never moves between pages, and there is no total or page count (counting every thread is what the list no longer
does).

The graph filter (``tags.graph``, a key inside the tags, which the savers' metadata filter cannot name), the
free-text search (``q``: the thread id and its metadata as JSON) and a server's namespace are applied to the threads
the walk reads, so a rare match could mean reading every thread: a page reads at most :data:`SCAN` threads, and
when they hold fewer matches than a page, the page says so and its ``next`` continues the search from there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

from graphckpt.checkpoint import ThreadInfo
from graphckpt.listing import iter_threads
from graphckpt.plain import graph_of, metadata_of
from graphckpt.savers.base import Saver, Status
from graphckpt.savers.waits import wake_times
from graphckpt.server.ui.filters import statuses_of
from graphckpt.views import thread_info

__all__ = ["SCAN", "ThreadPage", "walk_page"]

R = TypeVar("R")

SCAN = 2000
"""At most this many threads are read for one page of a text search (or of a namespace's threads)."""


@dataclass(frozen=True, slots=True)
class ThreadPage(Generic[R]):
    """One keyset page of the filtered threads list, and what the filters can offer."""

    rows: list[R]
    statuses: list[str]
    """The statuses of the rows shown (the filter offers these and the known ones)."""
    graphs: list[str]
    """The graphs the backend loaded and those of the rows shown."""
    after: str | None = None
    """This page's cursor (``None``: the first page)."""
    next: str | None = None
    """The cursor of the next page, ``None`` on the last one."""
    read: int = 0
    """How many threads were read to fill the page."""
    cut: bool = False
    """The walk stopped after :data:`SCAN` threads with fewer matches than a page (``next`` goes on from there)."""


async def walk_page(
    saver: Saver,
    *,
    status: str | None,
    after: str | None,
    per_page: int,
    keep: Callable[[ThreadInfo], bool],
    searching: bool,
    row: Callable[[ThreadInfo], Awaitable[R]],
    graphs: Iterable[str] = (),
) -> ThreadPage[R]:
    """The threads after the cursor ``after``: at most ``per_page`` that pass ``keep`` (``searching``: it drops
    some, so larger pages are read), made rows by
    ``row``; ``graphs`` are offered by the graph filter with those of the rows. Raises
    :class:`~graphckpt.errors.InvalidCursorError` for a cursor no page returned, ``ValueError`` for an unknown
    status."""
    shown: list[ThreadInfo] = []
    read, last, more, cut = 0, after, False, False
    walk = iter_threads(
        saver,
        status=cast("Status | None", "interrupted" if status == "waiting" else status),  # waiting: interrupted, held
        after=after,
        page=200 if searching else per_page + 1,  # a search reads on: larger pages, fewer queries
    )
    async for record in walk:  # stopping early leaves nothing open: each page is one finished query
        wake = (await wake_times(saver, [record])).get(record.thread_id) if record.status == "interrupted" else None
        info = thread_info(record, wake)
        read, last = read + 1, info.cursor
        if keep(info):
            if len(shown) == per_page:
                more = True
                break
            shown.append(info)
        if read >= SCAN and len(shown) < per_page:
            cut = True
            break
    nxt = shown[-1].cursor if more and shown else (last if cut else None)
    rows = list(await asyncio.gather(*(row(info) for info in shown)))
    statuses = statuses_of(shown)
    offered = sorted(set(graphs) | {g for i in shown if (g := graph_of(metadata_of(i))) is not None})
    return ThreadPage(rows, statuses, offered, after, nxt, read, cut)
