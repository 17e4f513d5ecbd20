"""Group commit of SQLite writes (graphckpt/savers/_sqlite_group.py): writes queued together commit in one
transaction, a write that fails is rolled back alone and gets its own error, order is kept; and through a real
``SqliteSaver`` with ``commit_inline=False``, concurrent commits of many threads all land, a lost compare-and-set
among them fails alone."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from graphckpt.errors import SaverError, ThreadConflictError
from graphckpt.ids import new_id
from graphckpt.savers._sqlite_group import GroupCommit
from graphckpt.savers.sqlite import SqliteSaver
from graphckpt.testing import make_checkpoint


def _open(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    return conn


async def test_waiting_writes_commit_in_one_transaction_and_a_failing_one_rolls_back_alone(tmp_path: Path) -> None:
    conn = _open(tmp_path / "g.db")
    lock = threading.Lock()
    group = GroupCommit(lambda: conn, lock, lambda exc: SaverError(f"store: {exc}"), "FULL")
    executor = ThreadPoolExecutor(max_workers=1)
    gate = threading.Event()
    executor.submit(gate.wait)  # the writer thread is busy: the writes below queue up behind it
    order: list[int] = []

    def insert(k: int) -> object:
        def body(c: sqlite3.Connection) -> int:
            order.append(k)
            c.execute("INSERT INTO t VALUES (?, ?)", (k, f"v{k}"))
            if k == 7:
                raise ValueError("seven refused after its insert")
            if k == 9:
                c.execute("INSERT INTO t VALUES (1, 'duplicate')")  # a constraint error: a SaverError
            return k * 10

        return group.write(executor, body, relaxed=False)

    futures = [asyncio.ensure_future(insert(k)) for k in range(1, 13)]
    await asyncio.sleep(0)  # each has queued its write
    gate.set()
    results = await asyncio.gather(*futures, return_exceptions=True)
    executor.shutdown(wait=True)
    assert order == list(range(1, 13))  # in the order they were queued
    assert isinstance(results[6], ValueError)
    assert isinstance(results[8], SaverError) and isinstance(results[8].__cause__, sqlite3.IntegrityError)
    assert [r for i, r in enumerate(results) if i not in (6, 8)] == [k * 10 for k in range(1, 13) if k not in (7, 9)]
    rows = conn.execute("SELECT k, v FROM t ORDER BY k").fetchall()
    assert rows == [(k, f"v{k}") for k in range(1, 13) if k not in (7, 9)]  # 7's and 9's inserts rolled back
    assert group.groups == 1  # all twelve in one transaction
    conn.close()


async def test_a_write_alone_that_fails_rolls_back_and_the_next_one_commits(tmp_path: Path) -> None:
    conn = _open(tmp_path / "g.db")
    group = GroupCommit(lambda: conn, threading.Lock(), lambda exc: SaverError(str(exc)), "FULL")
    executor = ThreadPoolExecutor(max_workers=1)

    def bad(c: sqlite3.Connection) -> None:
        c.execute("INSERT INTO t VALUES (1, 'a')")
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        await group.write(executor, bad, relaxed=True)
    assert await group.write(executor, lambda c: c.execute("INSERT INTO t VALUES (2, 'b')").rowcount, relaxed=True) == 1
    executor.shutdown(wait=True)
    assert conn.execute("SELECT k FROM t").fetchall() == [(2,)]
    assert conn.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL again after a relaxed write
    assert group.groups == 0
    conn.close()


async def test_concurrent_commits_of_many_threads_through_the_writer_thread(tmp_path: Path) -> None:
    async with SqliteSaver(tmp_path / "s.db", commit_inline=False) as saver:
        run = new_id()
        heads = [make_checkpoint(f"t{i}", 0) for i in range(24)]
        await asyncio.gather(*(saver.commit(cp, expected_head=None, run_id=run) for cp in heads))
        nexts = [make_checkpoint(f"t{i}", 1, parent=heads[i]) for i in range(24)]
        stale = make_checkpoint("t3", 1, parent=heads[3])  # a second writer of t3 that read the same head
        outcomes = await asyncio.gather(
            *(saver.commit(cp, expected_head=heads[i].checkpoint_id, run_id=run) for i, cp in enumerate(nexts)),
            saver.commit(stale, expected_head=heads[3].checkpoint_id, run_id=run),
            return_exceptions=True,
        )
        assert [o for o in outcomes[:24] if isinstance(o, BaseException)] == []
        assert isinstance(outcomes[24], ThreadConflictError)
        for i in range(24):
            record = await saver.get_thread(f"t{i}")
            assert record is not None and record.head_checkpoint_id == nexts[i].checkpoint_id
