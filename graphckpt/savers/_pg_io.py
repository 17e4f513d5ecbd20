"""How :class:`~graphckpt.savers.postgres.PostgresSaver` reaches its server: one dedicated connection, a pool for the
calls that overlap it, and the driver's errors turned into :class:`~graphckpt.errors.SaverError`.

:meth:`PostgresConnections.connection` is the seam every saver call goes through: the dedicated connection while it
is free (taken without yielding to the event loop, no pool check-out on the hot path; its statements are prepared on
first use), else one from the pool, so concurrent commits still run in parallel. A dedicated connection found broken
is dropped and the next call reconnects it.

Error messages name the server as ``host:port`` and carry the server's one-line message and SQLSTATE, never the
password (however the connection string spelled it), the statement's text or the values bound to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import weakref
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from graphckpt.errors import SaverError
from graphckpt.savers._pg_schema import compose, migrate
from graphckpt.savers._pg_sql import SQL
from graphckpt.savers._pg_wire import configure, register_adapters
from graphckpt.savers.dsn import scrub_password

__all__ = ["PostgresConnections", "cursor_of"]

_CURSORS: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], psycopg.AsyncCursor[Any]] = (
    weakref.WeakKeyDictionary()
)


def cursor_of(conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncCursor[Any]:
    """The one binary cursor of ``conn`` that every statement of the savers runs on. A new cursor per statement
    (``conn.execute``) looks up the dumper of every parameter's type again; this one keeps them: about a quarter of
    the client's CPU per statement (bench: a worker with many runs at once is bound by it). A connection serves one
    statement at a time (the dedicated connection's lock, the pool), so its cursor does too."""
    cur = _CURSORS.get(conn)
    if cur is None or cur.closed:
        cur = _CURSORS[conn] = conn.cursor(binary=True)
    return cur


_MESSAGE_MAX = 300
"""At most this many characters of a driver's message go into a :class:`SaverError`."""


class PostgresConnections:
    """The connections of one :class:`~graphckpt.savers.postgres.PostgresSaver`: opened by :meth:`open` (which also
    applies missing migrations and prepares the saver's statements for ``schema``), released by :meth:`close`, and
    opened again by a later :meth:`open` (possibly on another event loop)."""

    def __init__(self, dsn: str, *, schema: str | None, pool_min: int, pool_max: int) -> None:
        self.dsn = dsn
        self.schema = schema
        self.pool_min = pool_min
        self.pool_max = pool_max
        self.where, self._password = _describe(dsn)
        """``host:port`` for messages, and the password to scrub from them."""
        self.conn: psycopg.AsyncConnection[Any] | None = None
        """The dedicated connection; ``None`` after it broke (the next call reconnects it)."""
        self.queries: dict[str, bytes] = {}
        """The saver's statements (:data:`~graphckpt.savers._pg_sql.SQL`) by name, composed for ``schema``."""
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None
        self._conn_lock: asyncio.Lock | None = None
        self._open_lock: asyncio.Lock | None = None

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` succeeded and :meth:`close` has not been called since."""
        return self._pool is not None

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    async def open(self, create: bool) -> None:
        """Connect, apply missing migrations (creating the schema when ``create``) and open the pool. Concurrent
        calls open once; a call on an open instance does nothing."""
        if self._pool is None:
            if self._open_lock is None:
                self._open_lock = asyncio.Lock()
            async with self._open_lock:
                if self._pool is None:  # not opened by a concurrent first use while we waited
                    await self._open(create)

    async def _open(self, create: bool) -> None:
        with self.errors("connect and set up"):
            # A direct first connection reports an unreachable server at once (a pool would retry in background);
            # it stays open as the dedicated connection.
            conn = await self._connect()
            try:
                await migrate(conn, schema=self.schema, where=self.where, create=create)
                self.queries = {name: compose(text, self.schema).as_bytes(conn) for name, text in SQL.items()}
                pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
                    self.dsn,
                    min_size=self.pool_min,
                    max_size=self.pool_max,
                    kwargs={"autocommit": True, "client_encoding": "UTF8", "prepare_threshold": 0},  # as _connect
                    configure=configure,
                    open=False,
                    name="graphckpt",
                )
                await pool.open()
            except BaseException:
                await conn.close()
                raise
        self.conn, self._conn_lock = conn, asyncio.Lock()
        self._pool = pool

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        # prepare_threshold=0: every statement is prepared on its first use.
        conn = await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, prepare_threshold=0, client_encoding="UTF8"
        )
        register_adapters(conn)
        return conn

    async def close(self) -> None:
        """Close the dedicated connection and the pool. Idempotent."""
        pool, self._pool = self._pool, None
        conn, self.conn = self.conn, None
        self._open_lock = self._conn_lock = None  # a later reopen may run on another event loop
        with self.errors("close"):
            if conn is not None:
                await conn.close()
            if pool is not None:
                await pool.close()

    # -- the seam ----------------------------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """The dedicated connection when it is free, else one from the pool. Only while open."""
        lock = self._conn_lock
        if lock is not None and not lock.locked():
            async with lock:  # free: taken without yielding to the loop
                conn = self.conn
                if conn is None or conn.closed:
                    conn = self.conn = await self._connect()
                try:
                    yield conn
                finally:
                    self._drop_if_broken(conn)
            return
        assert self._pool is not None, "PostgresConnections.connection() before open()"
        async with self._pool.connection() as conn:
            yield conn

    def _drop_if_broken(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if (conn.broken or conn.closed) and self.conn is conn:
            self.conn = None  # the next call reconnects
            with contextlib.suppress(Exception):
                conn.pgconn.finish()

    # -- errors ------------------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def errors(self, action: str) -> Iterator[None]:
        """Turn driver errors raised in the block into :class:`SaverError` (see :meth:`error`)."""
        try:
            yield
        except psycopg.Error as exc:
            raise self.error(action, exc) from exc

    def error(self, action: str, exc: psycopg.Error) -> SaverError:
        """The :class:`SaverError` for ``exc`` raised by ``action``, naming the server (never the password)."""
        # The server's one-line message and its error code, never its detail, context or the statement's text (they
        # quote our SQL and the values bound to it: a megabyte thread id, say).
        primary = exc.diag.message_primary if isinstance(exc, psycopg.DatabaseError) and exc.sqlstate else None
        message = f"{primary} (SQLSTATE {exc.sqlstate})" if primary else _first_line(exc)
        message = message if len(message) <= _MESSAGE_MAX else message[:_MESSAGE_MAX] + "…"
        if self._password:
            message = message.replace(self._password, "***")
        message = scrub_password(message, self.dsn)  # also as written in a URL (percent-encoded)
        return SaverError(f"PostgreSQL at {self.where}: {action} failed: {message}")


def _first_line(exc: psycopg.Error) -> str:
    """libpq's own text of ``exc`` as one line: its first (``server closed the connection unexpectedly``), without
    the indented lines that follow (``This probably means the server terminated abnormally ...``); a lost
    connection says so."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    first = lines[0] if lines else type(exc).__name__
    conn = getattr(exc, "pgconn", None)
    if isinstance(exc, psycopg.OperationalError) and "connection" not in first and conn is not None:
        first += " (the connection was lost)"
    return first


def _describe(dsn: str) -> tuple[str, str | None]:
    """``host:port`` for messages, and the password to scrub from them."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<unparsable dsn>", None
    host = params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST") or "localhost"
    port = params.get("port") or os.environ.get("PGPORT") or "5432"
    password = params.get("password")
    return f"{host}:{port}", str(password) if password else None
