"""``SqliteSaver``: the shared conformance suite, plus what only a file-backed, multi-process SQLite saver promises:
the durability setting is applied, WAL is on, a held write lock turns into a clear ``SaverError``, data survives
close and reopen, and several processes writing one file lose nothing."""

from __future__ import annotations

import asyncio
import copy
import gc
import json
import pickle
import signal
import sqlite3
import sys
import textwrap
import threading
import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from graphckpt.errors import SaverError, SerializationError, ThreadConflictError
from graphckpt.ids import new_id
from graphckpt.savers import _sqlite_schema
from graphckpt.savers.base import BlobRange
from graphckpt.savers.sqlite import SqliteSaver
from graphckpt.testing import SaverConformance, make_checkpoint


class TestSqliteSaver(SaverConformance):
    @pytest.fixture
    async def saver(self, tmp_path: Path) -> AsyncIterator[SqliteSaver]:
        async with SqliteSaver(tmp_path / "c.db") as s:
            yield s


async def _writer_pragma(saver: SqliteSaver, name: str) -> object:
    """A pragma as the saver's own writer connection sees it (white box: pragmas are per connection)."""
    await saver.setup()
    conn = saver._io.writer
    assert conn is not None
    return await saver._io.on_writer(lambda: conn.execute(f"PRAGMA {name}").fetchone()[0])


@pytest.mark.parametrize(("mode", "value"), [("FULL", 2), ("NORMAL", 1), ("OFF", 0)])
async def test_synchronous_setting_is_applied(tmp_path: Path, mode: str, value: int) -> None:
    async with SqliteSaver(tmp_path / "c.db", synchronous=mode) as saver:  # type: ignore[arg-type]
        assert await _writer_pragma(saver, "synchronous") == value


async def test_default_is_full_durability_in_wal_mode(tmp_path: Path) -> None:
    async with SqliteSaver(tmp_path / "c.db") as saver:
        assert await _writer_pragma(saver, "synchronous") == 2
        assert await _writer_pragma(saver, "journal_mode") == "wal"
    with sqlite3.connect(tmp_path / "c.db") as other:  # WAL is persistent: any connection sees it
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert other.execute("PRAGMA user_version").fetchone()[0] == len(_sqlite_schema.MIGRATIONS)
    other.close()


def test_invalid_options_are_refused_at_construction(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SqliteSaver(tmp_path / "c.db", synchronous="EXTRA")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="busy_timeout"):
        SqliteSaver(tmp_path / "c.db", busy_timeout=-1)


async def test_missing_directory_is_a_clear_saver_error(tmp_path: Path) -> None:
    path = tmp_path / "nope" / "c.db"
    saver = SqliteSaver(path)
    with pytest.raises(SaverError, match="does not exist") as info:
        await saver.get_thread("t")
    assert str(path) in str(info.value)
    await saver.aclose()


async def test_data_survives_close_and_reopen_and_the_file_is_intact(tmp_path: Path) -> None:
    path, run = tmp_path / "c.db", new_id()
    a = make_checkpoint("t", 0, metadata={"source": "input", "tags": ["x"]}, channels={"x": b"\x00a"})
    b = make_checkpoint("t", 1, parent=a, status="done", channels={"x": b"\xffb"})
    async with SqliteSaver(path) as saver:
        await saver.commit(a, expected_head=None, run_id=run)
        await saver.commit(b, expected_head=a.checkpoint_id, run_id=run)
    async with SqliteSaver(path) as saver:
        thread = await saver.get_thread("t")
        assert thread is not None and (thread.head_checkpoint_id, thread.status) == (b.checkpoint_id, "done")
        assert [cp.checkpoint_id for cp in await saver.list_checkpoints("t")] == [b.checkpoint_id, a.checkpoint_id]
        assert [blob.data for blob in await saver.get_blobs([BlobRange("t", "x", 0, 1)])] == [b"\x00a", b"\xffb"]
        assert await _writer_pragma(saver, "integrity_check") == "ok"


async def test_filter_keys_and_values_are_data(tmp_path: Path) -> None:
    """Keys a JSON path could not express (quotes, backslashes, non-ASCII) and values full of SQL stay data."""
    meta = {'a"b': 1, "a\\b": 2, "é": "ü", "x'); DROP TABLE threads; --": "'; --", "nested": {"b": [1, None], "a": 1}}
    async with SqliteSaver(tmp_path / "c.db") as saver:
        cp = make_checkpoint("t", 0, metadata=meta)
        await saver.commit(cp, expected_head=None, run_id=new_id())
        for key, value in meta.items():
            got = await saver.list_checkpoints("t", filter={key: value})
            assert [c.checkpoint_id for c in got] == [cp.checkpoint_id], key
        assert await saver.list_checkpoints("t", filter={"nested": {"a": 1, "b": [1]}}) == []
        assert await saver.list_checkpoints("t", filter={'a"b': 1.0}) != []  # numbers compare as numbers
        assert await saver.get_thread("t") is not None


async def test_metadata_that_is_not_json_is_refused_before_writing(tmp_path: Path) -> None:
    async with SqliteSaver(tmp_path / "c.db") as saver:
        with pytest.raises(SerializationError, match="metadata"):
            await saver.commit(make_checkpoint("t", 0, metadata={"bad": {1, 2}}), expected_head=None, run_id="r")
        assert await saver.get_thread("t") is None


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()
    saver = SqliteSaver(path)
    with pytest.raises(SaverError, match="schema version 99"):
        await saver.setup()
    await saver.aclose()


async def test_in_memory_database_works(tmp_path: Path) -> None:
    async with SqliteSaver(":memory:") as saver:
        cp = make_checkpoint("t", 0, channels={"x": b"1"})
        await saver.commit(cp, expected_head=None, run_id="r")
        got = await saver.get_checkpoint("t")
        assert got is not None and got.checkpoint_id == cp.checkpoint_id
        assert len(await saver.get_blobs([BlobRange("t", "x", 0, 0)])) == 1


async def test_saver_collected_while_open_warns(tmp_path: Path) -> None:
    saver = SqliteSaver(tmp_path / "c.db")
    await saver.setup()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del saver
        gc.collect()
    ours = [w for w in caught if issubclass(w.category, ResourceWarning) and "SqliteSaver" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "threads"])
async def test_a_process_that_never_closes_its_saver_still_exits(tmp_path: Path, inline: bool) -> None:
    """Like a script with a module-level app that never calls close(): it must exit, not hang on a saver thread
    (with ``inline=False`` the reads go through the reader thread, which must not block exit either)."""
    script = textwrap.dedent(f"""
        import asyncio
        from graphckpt.savers.sqlite import SqliteSaver
        from graphckpt.testing import make_checkpoint
        saver = SqliteSaver({str(tmp_path / "c.db")!r}, commit_inline={inline}, read_inline={inline})
        asyncio.run(saver.commit(make_checkpoint("t", 0), expected_head=None, run_id="r"))
        asyncio.run(saver.get_thread("t"))
    """)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", script, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()


_LOCKER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()  # hold the write lock until the test closes our stdin
conn.execute("ROLLBACK")
"""


@pytest.mark.slow
async def test_busy_timeout_expiry_is_a_saver_error_naming_the_file(tmp_path: Path) -> None:
    path, run = tmp_path / "c.db", new_id()
    async with SqliteSaver(path, busy_timeout=0.2) as saver:
        a = make_checkpoint("t", 0)
        await saver.commit(a, expected_head=None, run_id=run)
        locker = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _LOCKER, str(path), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        assert locker.stdin is not None and locker.stdout is not None
        try:
            assert await locker.stdout.readline() == b"locked\n"
            b = make_checkpoint("t", 1, parent=a)
            with pytest.raises(SaverError) as info:
                await saver.commit(b, expected_head=a.checkpoint_id, run_id=run)
            message = str(info.value)
            assert str(path) in message and "busy_timeout=0.2" in message
            assert isinstance(info.value.__cause__, sqlite3.OperationalError)
            assert (await saver.get_thread("t")) is not None  # in WAL mode readers do not wait for a writer
        finally:
            locker.stdin.close()
            assert await asyncio.wait_for(locker.wait(), 10) == 0
        await saver.commit(b, expected_head=a.checkpoint_id, run_id=run)  # the lock is gone: it goes through
        head = await saver.get_checkpoint("t")
        assert head is not None and head.checkpoint_id == b.checkpoint_id


async def _lock_new_file(path: Path) -> asyncio.subprocess.Process:
    """Another process creates ``path`` in rollback-journal mode and holds its write lock until its stdin closes."""
    locker = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _LOCKER, str(path), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert locker.stdout is not None
    assert await locker.stdout.readline() == b"locked\n"
    return locker


@pytest.mark.slow
async def test_opening_a_file_another_process_is_creating_waits_for_its_lock(tmp_path: Path) -> None:
    # SQLite refuses the switch to WAL at once (no busy handler) while another connection holds the write lock of a
    # rollback-mode file: processes creating one file together used to fail with "database is locked" at open.
    path = tmp_path / "c.db"
    locker = await _lock_new_file(path)
    assert locker.stdin is not None
    saver = SqliteSaver(path, busy_timeout=30)
    opening = asyncio.create_task(saver.setup())
    try:
        await asyncio.sleep(0.3)  # a window in which the open must NOT finish: the sleep is the check, not a wait
        assert not opening.done(), opening.exception() if opening.done() else None  # still waiting, not failed
    finally:
        locker.stdin.close()
        assert await asyncio.wait_for(locker.wait(), 10) == 0
    await asyncio.wait_for(opening, 30)
    try:
        await saver.commit(make_checkpoint("t", 0), expected_head=None, run_id="r")
        assert await _writer_pragma(saver, "journal_mode") == "wal"
    finally:
        await saver.aclose()


@pytest.mark.slow
async def test_opening_a_file_locked_past_the_busy_timeout_is_a_saver_error(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    locker = await _lock_new_file(path)
    assert locker.stdin is not None
    try:
        with pytest.raises(SaverError, match=r"busy_timeout=0\.2") as info:
            await SqliteSaver(path, busy_timeout=0.2).setup()
        assert str(path) in str(info.value)
    finally:
        locker.stdin.close()
        assert await asyncio.wait_for(locker.wait(), 10) == 0


_MIB = 1024 * 1024


def _wal(path: Path) -> bytes:
    return Path(f"{path}-wal").read_bytes()


def _wal_size(path: Path) -> int:
    return Path(f"{path}-wal").stat().st_size


@pytest.mark.parametrize(
    ("kwargs", "grown"),
    [({}, True), ({"preallocate_wal": 0}, False), ({"synchronous": "NORMAL"}, False), ({"synchronous": "OFF"}, False)],
)
async def test_the_first_write_preallocates_the_wal_with_synchronous_full(
    tmp_path: Path, kwargs: dict[str, object], grown: bool
) -> None:
    path = tmp_path / "c.db"
    async with SqliteSaver(path, **kwargs) as saver:  # type: ignore[arg-type]
        await saver.list_threads()  # reads do not preallocate
        assert _wal_size(path) < _MIB
        await saver.commit(make_checkpoint("t", 0), expected_head=None, run_id="r")
        assert (_wal_size(path) >= 4 * _MIB) is grown


async def test_preallocating_the_wal_never_overwrites_another_connections_frames(tmp_path: Path) -> None:
    path, run = tmp_path / "c.db", new_id()
    async with SqliteSaver(path, preallocate_wal=0) as first:
        parent = None
        for step in range(30):  # frames in the WAL, not checkpointed while `first` keeps the file open
            cp = make_checkpoint("a", step, parent=parent, channels={"x": b"%d" % step})
            await first.commit(cp, expected_head=parent.checkpoint_id if parent else None, run_id=run)
            parent = cp
        before = _wal(path)
        assert 0 < len(before) < _MIB
        async with SqliteSaver(path) as second:
            await second.commit(make_checkpoint("b", 0), expected_head=None, run_id=run)
            assert _wal_size(path) >= 4 * _MIB
            assert _wal(path)[: len(before)] == before  # appended past the end only
            assert [cp.step for cp in await second.list_checkpoints("a")] == list(range(29, -1, -1))
        await first.commit(make_checkpoint("a", 30, parent=parent), expected_head=parent.checkpoint_id, run_id=run)
        assert await _writer_pragma(first, "integrity_check") == "ok"
    async with SqliteSaver(path) as reopened:
        assert [cp.step for cp in await reopened.list_checkpoints("a")] == list(range(30, -1, -1))
        assert len(await reopened.get_blobs([BlobRange("a", "x", 0, 29)])) == 30
        assert {t.thread_id for t in await reopened.list_threads()} == {"a", "b"}


async def test_the_wal_preallocated_is_this_databases_after_a_chdir(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    async with SqliteSaver("c.db") as saver, SqliteSaver(tmp_path / "b" / "c.db", preallocate_wal=0) as other:
        await saver.list_threads()  # opened in a/
        await other.commit(make_checkpoint("o", 0), expected_head=None, run_id="r")
        before = _wal(tmp_path / "b" / "c.db")
        monkeypatch.chdir(tmp_path / "b")  # "c.db" now names the other database
        await saver.commit(make_checkpoint("t", 0), expected_head=None, run_id="r")
        assert _wal_size(tmp_path / "a" / "c.db") >= 4 * _MIB
        assert _wal(tmp_path / "b" / "c.db") == before


_KILLED_AFTER_COMMITS = """
import asyncio, os, signal, sys
from graphckpt.savers import _sqlite_schema
from graphckpt.savers.sqlite import SqliteSaver
from graphckpt.testing import make_checkpoint

async def main(path):
    saver = SqliteSaver(path)
    parent = None
    for step in range(20):
        cp = make_checkpoint("t", step, parent=parent, channels={"x": b"%d" % step})
        await saver.commit(cp, expected_head=parent.checkpoint_id if parent else None, run_id="r")
        parent = cp
    os.kill(os.getpid(), signal.SIGKILL)  # no close: the WAL keeps its frames and the zeros after them

asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.slow
async def test_a_preallocated_wal_recovers_every_commit_after_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", _KILLED_AFTER_COMMITS, str(path))
    assert await asyncio.wait_for(proc.wait(), 60) == -signal.SIGKILL
    assert _wal_size(path) >= 4 * _MIB
    async with SqliteSaver(path) as saver:
        assert [cp.step for cp in await saver.list_checkpoints("t")] == list(range(19, -1, -1))
        assert len(await saver.get_blobs([BlobRange("t", "x", 0, 19)])) == 20
        assert await _writer_pragma(saver, "integrity_check") == "ok"


@pytest.mark.parametrize("bad", [-1, 1.5, True, "4MB"])
def test_preallocate_wal_must_be_a_byte_count(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ValueError, match="preallocate_wal"):
        SqliteSaver(tmp_path / "c.db", preallocate_wal=bad)  # type: ignore[arg-type]


_WORKER = """
import asyncio, sys
from graphckpt.savers import _sqlite_schema
from graphckpt.savers.sqlite import SqliteSaver
from graphckpt.testing import make_checkpoint

async def main(path, worker):
    async with SqliteSaver(path, busy_timeout=30) as saver:
        parents = {}
        for step in range(10):
            for n in range(5):
                thread_id = f"w{worker}-t{n}"
                cp = make_checkpoint(thread_id, step, parent=parents.get(thread_id), channels={"x": b"%d" % step})
                head = parents[thread_id].checkpoint_id if thread_id in parents else None
                await saver.commit(cp, expected_head=head, run_id=f"run-{worker}")
                parents[thread_id] = cp

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


@pytest.mark.slow
async def test_four_processes_writing_one_file_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", textwrap.dedent(_WORKER), str(path), str(i), stderr=asyncio.subprocess.PIPE
        )
        for i in range(4)
    ]
    for worker in workers:
        _, err = await asyncio.wait_for(worker.communicate(), 120)
        assert worker.returncode == 0, err.decode()
    async with SqliteSaver(path) as saver:
        threads = await saver.list_threads()
        assert sorted(t.thread_id for t in threads) == sorted(f"w{w}-t{n}" for w in range(4) for n in range(5))
        assert {t.head_step for t in threads} == {9}
        total = 0
        for t in threads:
            steps = [cp.step for cp in await saver.list_checkpoints(t.thread_id)]
            assert steps == list(range(9, -1, -1))
            total += len(steps)
            assert len(await saver.get_blobs([BlobRange(t.thread_id, "x", 0, 9)])) == 10
        assert total == 200
        assert await _writer_pragma(saver, "integrity_check") == "ok"


async def test_duplicate_step_from_another_connection_is_a_conflict(tmp_path: Path) -> None:
    """Two savers on one file act like two processes: the compare-and-set holds across connections."""
    path, run = tmp_path / "c.db", new_id()
    async with SqliteSaver(path) as one, SqliteSaver(path) as two:
        a = make_checkpoint("t", 0)
        await one.commit(a, expected_head=None, run_id=run)
        await one.commit(make_checkpoint("t", 1, parent=a), expected_head=a.checkpoint_id, run_id=run)
        with pytest.raises(ThreadConflictError):
            await two.commit(make_checkpoint("t", 1, parent=a), expected_head=a.checkpoint_id, run_id=run)
        with pytest.raises(ThreadConflictError):
            await two.commit(make_checkpoint("t", 0), expected_head=None, run_id=run)


class TestSqliteSaverOnThreads(SaverConformance):
    """The same suite with every write on the writer thread and every read on the reader thread."""

    @pytest.fixture
    async def saver(self, tmp_path: Path) -> AsyncIterator[SqliteSaver]:
        async with SqliteSaver(tmp_path / "c.db", commit_inline=False, read_inline=False) as s:
            yield s


class _ThreadRecordingSaver(SqliteSaver):
    """Records the thread each write transaction's body ran on (through the ``_write`` hook crash_child uses)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.body_threads: list[int] = []

    async def _write(self, body):  # type: ignore[no-untyped-def]
        def recording(conn: sqlite3.Connection) -> object:
            assert conn.in_transaction
            self.body_threads.append(threading.get_ident())
            return body(conn)

        return await super()._write(recording)


async def test_commit_runs_inline_on_the_calling_thread_when_the_lock_is_free(tmp_path: Path) -> None:
    run = new_id()
    async with _ThreadRecordingSaver(tmp_path / "c.db") as saver:
        a = make_checkpoint("t", 0)
        await saver.commit(a, expected_head=None, run_id=run)
        await saver.commit(make_checkpoint("t", 1, parent=a), expected_head=a.checkpoint_id, run_id=run)
        assert saver.body_threads == [threading.get_ident()] * 2
    async with _ThreadRecordingSaver(tmp_path / "c.db", commit_inline=False) as saver:
        await saver.commit(make_checkpoint("u", 0), expected_head=None, run_id=run)
        assert len(saver.body_threads) == 1 and saver.body_threads[0] != threading.get_ident()


async def test_inline_commit_falls_back_to_the_writer_thread_when_another_process_holds_the_lock(
    tmp_path: Path,
) -> None:
    """While another process holds the write lock the commit waits on the writer thread (up to busy_timeout), never
    on the event loop: reads still answer; when the lock is released the commit goes through."""
    path, run = tmp_path / "c.db", new_id()
    async with _ThreadRecordingSaver(path, busy_timeout=30) as saver:
        a = make_checkpoint("t", 0)
        await saver.commit(a, expected_head=None, run_id=run)
        locker = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _LOCKER, str(path), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        assert locker.stdin is not None and locker.stdout is not None
        b = make_checkpoint("t", 1, parent=a)
        try:
            assert await asyncio.wait_for(locker.stdout.readline(), 30) == b"locked\n"
            task = asyncio.create_task(saver.commit(b, expected_head=a.checkpoint_id, run_id=run))
            await asyncio.sleep(0)  # the task's first step: the inline attempt, BUSY at once, hand-off to the thread
            assert not task.done()
            thread = await saver.get_thread("t")  # the loop is free while the commit waits for the lock
            assert thread is not None and thread.head_checkpoint_id == a.checkpoint_id
            assert not task.done()  # it cannot commit while the other process holds the lock
        finally:
            locker.stdin.close()
            assert await asyncio.wait_for(locker.wait(), 30) == 0
        await asyncio.wait_for(task, 30)
        head = await saver.get_checkpoint("t")
        assert head is not None and head.checkpoint_id == b.checkpoint_id
        assert saver.body_threads[0] == threading.get_ident()  # the first commit ran inline
        assert saver.body_threads[1:] == [saver.body_threads[1]] and saver.body_threads[1] != threading.get_ident()
        c = make_checkpoint("t", 2, parent=b)  # with the lock free again, back to the inline path
        await saver.commit(c, expected_head=b.checkpoint_id, run_id=run)
        assert saver.body_threads[-1] == threading.get_ident()


async def test_inline_connection_in_use_sends_writes_and_reads_to_threads(tmp_path: Path) -> None:
    """Another thread using the inline connection (white box: its lock held) is never waited for on the loop."""
    run = new_id()
    async with _ThreadRecordingSaver(tmp_path / "c.db") as saver:
        a = make_checkpoint("t", 0, metadata={"k": 1}, channels={"x": b"1"})
        await saver.commit(a, expected_head=None, run_id=run)
        with saver._io.inline_lock:
            b = make_checkpoint("t", 1, parent=a, channels={"x": b"2"})
            await saver.commit(b, expected_head=a.checkpoint_id, run_id=run)
            assert saver.body_threads[-1] != threading.get_ident()
            thread = await saver.get_thread("t")
            assert thread is not None and thread.head_checkpoint_id == b.checkpoint_id
            assert [cp.step for cp in await saver.list_checkpoints("t", filter={"k": 1})] == [0]
            assert [blob.data for blob in await saver.get_blobs([BlobRange("t", "x", 0, 1)])] == [b"1", b"2"]
        with pytest.raises(ThreadConflictError):  # the compare-and-set holds on the inline path too
            await saver.commit(make_checkpoint("t", 1, parent=a), expected_head=a.checkpoint_id, run_id=run)


async def test_in_memory_database_with_its_one_connection_busy(tmp_path: Path) -> None:
    async with SqliteSaver(":memory:") as saver:
        a = make_checkpoint("t", 0, channels={"x": b"1"})
        await saver.commit(a, expected_head=None, run_id="r")
        with saver._io.inline_lock:  # the writer thread waits for the lock: release it from the loop meanwhile
            task = asyncio.create_task(
                saver.commit(make_checkpoint("t", 1, parent=a), expected_head=a.checkpoint_id, run_id="r")
            )
            await asyncio.sleep(0)
            assert not task.done()
        await asyncio.wait_for(task, 30)
        assert [cp.step for cp in await saver.list_checkpoints("t")] == [1, 0]


@pytest.mark.parametrize("mode", ["FULL", "NORMAL"])
async def test_every_connection_has_the_durability_setting_and_new_files_the_page_size(
    tmp_path: Path, mode: str
) -> None:
    async with SqliteSaver(tmp_path / "c.db", synchronous=mode) as saver:  # type: ignore[arg-type]
        await saver.commit(make_checkpoint("t", 0), expected_head=None, run_id="r")
        assert saver._io.inline is not None
        assert saver._io.inline.execute("PRAGMA synchronous").fetchone()[0] == {"FULL": 2, "NORMAL": 1}[mode]
        assert await _writer_pragma(saver, "page_size") == 4096


async def test_metadata_is_a_lazy_read_only_mapping_equal_to_the_stored_dict(tmp_path: Path) -> None:
    meta = {"source": "loop", "step": 3, "tags": {"a": [1, None]}, "é": True}
    async with SqliteSaver(tmp_path / "c.db") as saver:
        await saver.commit(make_checkpoint("t", 0, metadata=meta), expected_head=None, run_id="r")
        (listed,) = await saver.list_checkpoints("t")
        head, thread = await saver.get_checkpoint("t"), await saver.get_thread("t")
        assert head is not None and thread is not None
        for got in (listed.metadata, head.metadata, thread.metadata):
            assert got == meta and meta == got and dict(got) == meta
            assert got.get("step") == 3 and got.get("nope") is None and "tags" in got and len(got) == 4
            assert sorted(got) == sorted(meta) and json.loads(json.dumps(dict(got))) == meta
            assert pickle.loads(pickle.dumps(got)) == meta and copy.deepcopy(got) == meta
            assert got != {**meta, "step": 4}
            with pytest.raises(TypeError):
                got["step"] = 4  # type: ignore[index]
        assert listed == head  # whole checkpoints compare equal


async def test_audit_start_rows_skip_the_fsync_and_every_other_commit_keeps_it(tmp_path: Path) -> None:
    """The audit record's ``started`` rows (written before every journaled call) commit with synchronous=NORMAL
    (SIGKILL-safe, no fsync); every other commit, the call's own ``effect`` row included, stays FULL."""
    from graphckpt.savers.base import StoredWrite
    from graphckpt.testing import make_checkpoint

    async with SqliteSaver(tmp_path / "c.db") as saver:
        run = new_id()
        cp = make_checkpoint("t", step=0)
        await saver.commit(cp, expected_head=None, run_id=run)
        seen: list[str] = []
        for conn in (saver._io.inline, saver._io.writer):
            assert conn is not None
            conn.set_trace_callback(seen.append)
        started = StoredWrite("task", "started", 0, b"s")
        await saver.put_writes("t", cp.checkpoint_id, [started], run_id=run)
        relaxed = [s for s in seen if s.startswith(("PRAGMA", "BEGIN", "COMMIT"))]
        assert relaxed == ["PRAGMA synchronous = NORMAL", "BEGIN IMMEDIATE", "COMMIT", "PRAGMA synchronous = FULL"]
        seen.clear()
        await saver.put_writes("t", cp.checkpoint_id, [StoredWrite("task", "effect", 0, b"e")], run_id=run)
        assert not [s for s in seen if s.startswith("PRAGMA")]
        assert await _writer_pragma(saver, "synchronous") == 2
        assert saver._io.inline is not None and saver._io.inline.execute("PRAGMA synchronous").fetchone()[0] == 2
        assert {w.kind for w in await saver.get_writes("t", cp.checkpoint_id)} == {"started", "effect"}
