"""Pages of threads (``page_threads``): keyset order, cursors, filters."""

from __future__ import annotations

from typing import Any

import pytest

from graphckpt.errors import InvalidCursorError
from graphckpt.ids import new_id
from graphckpt.savers.base import Saver, Status, StoredCheckpoint, ThreadPage, ThreadRecord
from graphckpt.testing._records import make_checkpoint, new_thread_id


async def _thread(
    saver: Saver, name: str, marker: str, *, status: Status = "running", parent: StoredCheckpoint | None = None
) -> StoredCheckpoint:
    step = 0 if parent is None else parent.step + 1
    cp = make_checkpoint(new_thread_id(name), step, parent=parent, status=status, metadata={"suite": marker, "n": name})
    await saver.commit(cp, expected_head=None, run_id=new_id())
    return cp


async def _all_pages(saver: Saver, limit: int, **filters: Any) -> list[ThreadPage]:
    pages = [await saver.page_threads(limit=limit, **filters)]
    while pages[-1].next is not None:
        pages.append(await saver.page_threads(limit=limit, after=pages[-1].next, **filters))
        assert len(pages) < 10_000, "the cursor does not advance"
    return pages


def _ids(pages: list[ThreadPage]) -> list[str]:
    return [r.thread_id for p in pages for r in p.threads]


def _key_order(records: list[ThreadRecord]) -> list[str]:
    return [r.thread_id for r in sorted(records, key=lambda r: (r.created_at, r.thread_id), reverse=True)]


class PageCases:
    """Cases of :class:`~graphckpt.testing.SaverConformance`; needs its ``saver`` fixture."""

    async def test_page_threads_newest_created_first_each_thread_once(self, saver: Saver) -> None:
        """Pages of 2 walk the threads newest created first, every thread on exactly one page, and the last
        page says there is no next; a commit to an old thread does not move it (the order is by creation)."""
        marker = new_id()
        heads = [await _thread(saver, f"p{i}", marker) for i in range(5)]
        rows = [r for r in [await saver.get_thread(h.thread_id) for h in heads] if r is not None]
        expected = _key_order(rows)
        pages = await _all_pages(saver, 2, metadata={"suite": marker})
        assert [len(p.threads) for p in pages] == [2, 2, 1]
        assert _ids(pages) == expected
        assert pages[-1].next is None
        old = heads[0]
        step = make_checkpoint(old.thread_id, 1, parent=old, metadata={"suite": marker, "n": "p0"})
        await saver.commit(step, expected_head=old.checkpoint_id, run_id=rows[0].run_id)
        assert _ids(await _all_pages(saver, 2, metadata={"suite": marker})) == expected

    async def test_page_threads_created_while_paging_are_neither_repeated_nor_skipped(self, saver: Saver) -> None:
        """Threads created between two pages go to the front: the pages still read each earlier thread once."""
        marker = new_id()
        for i in range(4):
            await _thread(saver, f"q{i}", marker)
        first = await saver.page_threads(limit=2, metadata={"suite": marker})
        newer = [(await _thread(saver, f"new{i}", marker)).thread_id for i in range(3)]
        rest = await _all_pages(saver, 2, metadata={"suite": marker}, after=first.next)
        seen = [r.thread_id for r in first.threads] + _ids(rest)
        assert len(seen) == len(set(seen)) == 4
        assert not set(seen) & set(newer)
        assert _ids(await _all_pages(saver, 3, metadata={"suite": marker}))[:3] == list(reversed(newer))

    async def test_page_threads_without_filters_pages_the_whole_store(self, saver: Saver) -> None:
        """With no filter every live thread of the store is on one page, deleted ones on none, in keyset order."""
        marker = new_id()
        mine = [(await _thread(saver, f"w{i}", marker)).thread_id for i in range(3)]
        gone = await _thread(saver, "gone", marker)
        await saver.delete_thread(gone.thread_id)
        pages = await _all_pages(saver, 2)
        every = [r for p in pages for r in p.threads]
        assert len({r.thread_id for r in every}) == len(every)
        assert [r.thread_id for r in every] == _key_order(every)
        assert gone.thread_id not in _ids(pages)
        assert sorted(t for t in _ids(pages) if t in mine) == sorted(mine)

    async def test_page_threads_filters_by_status_and_parent(self, saver: Saver) -> None:
        """``status`` and ``parent_thread_id`` select in the store; combined with a metadata filter and paging."""
        marker = new_id()
        done = [(await _thread(saver, f"d{i}", marker, status="done")).thread_id for i in range(3)]
        root = await _thread(saver, "root", marker)
        forks = [(await _thread(saver, f"f{i}", marker, parent=root)).thread_id for i in range(3)]
        mine = {"suite": marker}
        assert sorted(_ids(await _all_pages(saver, 2, metadata=mine, status="done"))) == sorted(done)
        running = _ids(await _all_pages(saver, 2, metadata=mine, status="running"))
        assert sorted(running) == sorted([root.thread_id, *forks])
        assert _ids(await _all_pages(saver, 2, metadata=mine, status="failed")) == []
        by_parent = await _all_pages(saver, 2, parent_thread_id=root.thread_id)
        assert sorted(_ids(by_parent)) == sorted(forks)
        assert all(r.parent_thread_id == root.thread_id for p in by_parent for r in p.threads)
        both = await _all_pages(saver, 1, parent_thread_id=root.thread_id, metadata={"suite": marker, "n": "f1"})
        assert _ids(both) == [forks[1]]
        assert _ids(await _all_pages(saver, 2, metadata={"suite": marker, "n": "nope"})) == []

    async def test_page_threads_refuses_a_foreign_cursor_and_a_bad_limit(self, saver: Saver) -> None:
        for cursor in ("not-a-cursor", "", "W10", "WzEsMl0"):
            with pytest.raises(InvalidCursorError, match="cursor"):
                await saver.page_threads(after=cursor)
        for limit in (0, -1, 10_001):
            with pytest.raises(InvalidCursorError, match="limit"):
                await saver.page_threads(limit=limit)
