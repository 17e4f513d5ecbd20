"""Pages of threads: the keyset order every saver lists threads in, its opaque cursor, and the filters.

Order: newest created first, ties by thread id, descending: ``(created_at, thread_id) DESC``. Neither column changes
after a thread is created, so a thread never moves between pages; threads created while a caller pages through the
list go to the front (the first page), never between pages already read. A cursor names the last thread a page
read; the next page starts after it, so a thread deleted meanwhile costs nothing and none is read twice.

Each SQL saver answers a page with one indexed read: ``threads_by_created`` (``created_at, thread_id``),
``threads_by_status`` (``status, created_at, thread_id``), ``threads_by_parent`` (``parent_thread_id, created_at,
thread_id``) walked backwards from the cursor, ``LIMIT``-bounded. A metadata filter is evaluated on those rows in SQL
(the same rule as :func:`~graphckpt.savers.base.metadata_matches`), so its cost grows with the rows walked until
``limit`` match: the thread's metadata changes at every step, and an index on it (a GIN on PostgreSQL) would turn
every head move from an in-place (HOT) update into one writing index entries.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from graphckpt.errors import InvalidCursorError
from graphckpt.savers._checks import check_filter, metadata_matches
from graphckpt.savers._rows import Status, ThreadRecord

__all__ = ["ThreadPage", "decode_cursor", "encode_cursor", "page_of", "sealed_page", "thread_key"]

MAX_PAGE = 10_000
"""The largest ``limit`` a page may ask for (a bound on one read's memory)."""


@dataclass(frozen=True)
class ThreadPage:
    """One page of :meth:`~graphckpt.savers.base.Saver.page_threads`: the threads matching, in keyset order, and
    the cursor of the next page (``None`` when this page read the last thread). A page may hold fewer than
    ``limit`` threads and still have a ``next`` (``crashed`` and ``running`` are told apart after the read)."""

    threads: list[ThreadRecord]
    next: str | None


def thread_key(record: ThreadRecord) -> tuple[float, str]:
    """The keyset sort key (sorted descending)."""
    return (record.created_at, record.thread_id)


def encode_cursor(created_at: float, thread_id: str) -> str:
    """The opaque cursor naming the thread ``(created_at, thread_id)``: URL-safe text."""
    raw = json.dumps([created_at, thread_id], separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(raw.encode("utf-8", "surrogatepass")).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """The ``(created_at, thread_id)`` of ``cursor``; :class:`InvalidCursorError` when it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, tid = json.loads(raw.decode("utf-8", "surrogatepass"))
        if isinstance(created, bool) or not isinstance(created, int | float) or not isinstance(tid, str):
            raise ValueError("not a (number, text) pair")
        return float(created), tid
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError) as exc:
        shown = cursor if len(cursor) <= 40 else cursor[:40] + "..."
        raise InvalidCursorError(
            f"thread page cursor {shown!r} is not one a page of threads returned (pass the `next` of a page)"
        ) from exc


def check_limit(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidCursorError(f"limit must be an integer from 1 to {MAX_PAGE}, got {limit!r}")


def page_of(
    records: Iterable[ThreadRecord],
    *,
    limit: int,
    after: str | None,
    status: Status | None,
    metadata: Mapping[str, Any] | None,
    parent_thread_id: str | None,
) -> ThreadPage:
    """The page of ``records`` (every thread, any order) that the arguments select: the rule every saver implements,
    used as it is by a saver without an index (the memory saver)."""
    check_limit(limit)
    if metadata:
        check_filter(metadata)
    bound = decode_cursor(after) if after is not None else None
    chosen = sorted(
        (
            r
            for r in records
            if (bound is None or thread_key(r) < bound)
            and (status is None or r.status == status)
            and (parent_thread_id is None or r.parent_thread_id == parent_thread_id)
            and (not metadata or metadata_matches(r.metadata, metadata))
        ),
        key=thread_key,
        reverse=True,
    )
    page = chosen[:limit]
    more = len(chosen) > limit
    return ThreadPage(page, encode_cursor(*thread_key(page[-1])) if more else None)


def page_from_rows(records: list[ThreadRecord], *, limit: int, status: Status | None) -> ThreadPage:
    """The page made of ``records``, the rows one ``LIMIT limit + 1`` read returned in keyset order (a row past
    ``limit`` says that there is a next page): the ``crashed`` and ``running`` statuses are told apart here (a dead
    owner on this host is known only to the reader), and the next cursor is the last row of the page read, whatever
    was kept."""
    page = records[:limit]
    nxt = encode_cursor(*thread_key(page[-1])) if len(records) > limit else None
    if status in ("crashed", "running"):
        page = [r for r in page if r.status == status]
    return ThreadPage(page, nxt)


async def sealed_page(
    read: Callable[[int, str | None], Awaitable[ThreadPage]],
    *,
    limit: int,
    after: str | None,
    metadata: Mapping[str, Any],
) -> ThreadPage:
    """A page filtered on encrypted metadata: ``read(n, cursor)`` reads the pages that SQL can select (the filter's
    plain keys), and the whole ``metadata`` filter is matched here on the opened records, page after page, until
    ``limit`` threads match and one more is seen (so the last page has no ``next``, as without encryption). The
    cursor is the last thread returned: a page boundary falls between matches, whatever rows were walked. The cost
    grows with the rows walked (a sealed key cannot be indexed)."""
    found: list[ThreadRecord] = []
    cursor = after
    batch = min(MAX_PAGE, max(limit + 1, 200))
    while True:
        page = await read(batch, cursor)
        for record in page.threads:
            if metadata_matches(record.metadata, metadata):
                if len(found) == limit:
                    return ThreadPage(found, encode_cursor(*thread_key(found[-1])))
                found.append(record)
        if page.next is None:
            return ThreadPage(found, None)
        cursor = page.next
