"""Group commit: the write transactions queued for a SQLite saver's writer thread commit together.

SQLite serializes the writers of one file, and under ``synchronous="FULL"`` each commit costs an fsync of the WAL.
When many runs write at once (a worker holding many threads, a server), their writes queue on the saver's one writer
thread; instead of one ``BEGIN IMMEDIATE`` ... ``COMMIT`` (and one fsync) each, the writer takes every write waiting
(at most :data:`MAX_GROUP`) and runs them in one transaction, each inside its own ``SAVEPOINT``: a write that raises
(a compare-and-set that lost, a constraint) is rolled back to its savepoint and gets its error, the others commit
together, and no caller sees its result before that ``COMMIT`` returned (durability is the same as one commit each).
A write alone in the queue is one transaction as before. A group commits with ``synchronous=NORMAL`` only when
every write in it asked for that (``relaxed``); else with the saver's setting.

Order is kept: the writes of a group run in the order they were queued, so a caller's second write (queued after
the first returned) never runs before its first. A caller cancelled while its write waits does not stop it: the
write commits or rolls back with its group, as a write handed to a thread always did.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar, cast

from graphckpt.errors import SaverError

__all__ = ["MAX_GROUP", "GroupCommit"]

_T = TypeVar("_T")
Body = Callable[[sqlite3.Connection], Any]

MAX_GROUP = 64
"""At most this many writes commit in one transaction (so one group's latency stays bounded)."""


class _Waiting:
    __slots__ = ("fn", "future", "loop", "relaxed")

    def __init__(self, fn: Body, relaxed: bool, loop: asyncio.AbstractEventLoop) -> None:
        self.fn, self.relaxed, self.loop = fn, relaxed, loop
        self.future: asyncio.Future[Any] = loop.create_future()


class GroupCommit:
    """The writer thread's queue of write transactions. ``connection()`` and ``lock`` are the writer connection and
    its lock; ``error`` turns a :class:`sqlite3.Error` into the saver's :class:`~graphckpt.errors.SaverError`;
    ``synchronous`` is the saver's setting (a relaxed group sets ``NORMAL`` and then this back)."""

    def __init__(
        self,
        connection: Callable[[], sqlite3.Connection | None],
        lock: threading.Lock,
        error: Callable[[sqlite3.Error], SaverError],
        synchronous: str,
    ) -> None:
        self._connection, self._lock, self._error, self._synchronous = connection, lock, error, synchronous
        self._queue: deque[_Waiting] = deque()
        self._guard = threading.Lock()
        self._draining = False
        self.groups = 0
        """How many transactions committed more than one write (for tests and benchmarks)."""

    async def write(self, executor: Executor, fn: Callable[[sqlite3.Connection], _T], relaxed: bool) -> _T:
        """``fn(connection)`` inside a write transaction on the writer thread, perhaps with other writes."""
        waiting = _Waiting(fn, relaxed, asyncio.get_running_loop())
        with self._guard:
            self._queue.append(waiting)
            start = not self._draining
            self._draining = True
        if start:
            try:
                executor.submit(self._drain)
            except BaseException:
                with self._guard:
                    self._draining = False
                raise
        return cast(_T, await waiting.future)

    def _drain(self) -> None:
        """On the writer thread: commit groups until the queue is empty."""
        while True:
            with self._guard:
                if not self._queue:
                    self._draining = False
                    return
                group = [self._queue.popleft() for _ in range(min(len(self._queue), MAX_GROUP))]
            try:
                outcomes = self._commit(group)
            except BaseException as exc:
                failure = self._saver_error(exc) if isinstance(exc, sqlite3.Error) else exc
                outcomes = [(False, failure)] * len(group)
            for waiting, outcome in zip(group, outcomes, strict=True):
                _settle(waiting, *outcome)

    def _commit(self, group: list[_Waiting]) -> list[tuple[bool, Any]]:
        conn = self._connection()
        assert conn is not None
        relaxed = self._synchronous == "FULL" and all(w.relaxed for w in group)
        outcomes: list[tuple[bool, Any]] = []
        with self._lock:
            if relaxed:  # not allowed inside a transaction; set back right after it
                conn.execute("PRAGMA synchronous = NORMAL")
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for waiting in group:
                        outcomes.append(self._one(conn, waiting.fn, alone=len(group) == 1))
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            finally:
                if relaxed:
                    conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        if len(group) > 1:
            self.groups += 1
        return outcomes

    def _saver_error(self, exc: sqlite3.Error) -> SaverError:
        error = self._error(exc)
        error.__cause__ = exc
        return error

    def _one(self, conn: sqlite3.Connection, fn: Body, *, alone: bool) -> tuple[bool, Any]:
        """One write of the group inside its savepoint (none when it is alone: its error rolls back everything)."""
        if alone:
            try:
                return True, fn(conn)
            except sqlite3.Error as exc:
                raise self._saver_error(exc) from exc
        conn.execute("SAVEPOINT graphckpt_write")
        try:
            value = fn(conn)
        except BaseException as exc:
            if not conn.in_transaction:  # SQLite ended the whole transaction (an I/O error, a full disk)
                raise
            conn.execute("ROLLBACK TO graphckpt_write")
            conn.execute("RELEASE graphckpt_write")
            return False, self._saver_error(exc) if isinstance(exc, sqlite3.Error) else exc
        conn.execute("RELEASE graphckpt_write")
        return True, value


def _settle(waiting: _Waiting, ok: bool, value: Any) -> None:
    def settle() -> None:
        if waiting.future.done():  # its caller was cancelled: the write happened (or not) all the same
            return
        if ok:
            waiting.future.set_result(value)
        else:
            waiting.future.set_exception(value)

    with contextlib.suppress(RuntimeError):  # the caller's loop is closed: nobody waits for the answer
        waiting.loop.call_soon_threadsafe(settle)
