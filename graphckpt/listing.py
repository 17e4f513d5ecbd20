"""Listing a store's threads page by page: the user's threads (a subgraph's child threads are shown with their
parent, not listed), newest created first, in bounded memory whatever the number of threads."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

from graphckpt.savers.base import Saver, Status, ThreadRecord
from graphckpt.subgraph import link_of

__all__ = ["PAGE", "iter_threads"]

PAGE = int(os.environ.get("GRAPHCKPT_LIST_PAGE") or 200)
"""Threads read per query when the caller sets no limit (``graphckpt threads --all`` prints one table a page);
``$GRAPHCKPT_LIST_PAGE`` sets another."""


async def iter_threads(
    saver: Saver,
    *,
    status: Status | None = None,
    after: str | None = None,
    limit: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    parent_thread_id: str | None = None,
    page: int = PAGE,
) -> AsyncIterator[ThreadRecord]:
    """The threads after the cursor ``after`` in :meth:`~graphckpt.savers.base.Saver.page_threads` order, at most
    ``limit``, one page query at a time (of ``limit`` threads, or ``page`` when larger or unbounded). A caller that
    stops early continues from the last thread's cursor (``ThreadInfo.cursor``)."""
    left, cursor = limit, after
    while left is None or left > 0:
        got = await saver.page_threads(
            limit=page if left is None else min(page, left),
            after=cursor,
            status=status,
            metadata=metadata,
            parent_thread_id=parent_thread_id,
        )
        for record in got.threads:
            if link_of(record.metadata) is None:
                yield record
                if left is not None:
                    left -= 1
                    if left == 0:
                        return
        if got.next is None:
            return
        cursor = got.next
