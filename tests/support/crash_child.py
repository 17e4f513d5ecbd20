"""Child process for the crash and concurrency tests (``test_crash.py``, ``test_concurrency.py``).

Run as ``python tests/crash_child.py MODE --backend sqlite|postgres --db PATH-OR-DSN [--schema S] ...``:

``crash``
    runs thread ``--thread`` of the looping graph to the end: ``invoke`` when the thread does not exist yet, else
    ``resume``. Prints ``commit <step>`` after every committed checkpoint and ``done <status>`` at the end. The
    environment variables ``CRASH_HOOK`` and ``CRASH_N`` make it SIGKILL itself at one deterministic point of the
    step whose state has ``n == CRASH_N`` (it prints ``hook <kind> <n>`` first):

    ``node``            inside the node, before its effect is called
    ``effect``          after the effect's function returned (its line is in the side file), before the journal
                        commit: a wrapper around the saver's ``put_writes`` kills before calling the real one
    ``routed``          after the node returned: inside the router, before the checkpoint commit starts
    ``commit``          inside the checkpoint commit transaction. SQLite: after the INSERTs/UPDATE of the commit
                        body ran, before ``COMMIT`` (the body runs inside ``_transaction``). PostgreSQL, when the
                        saver pipelines its commit as several statements: all are sent and flushed to the server,
                        no Sync yet (the implicit transaction is open: the server must roll it back; detail
                        ``pipeline-unsynced``); when it sends one autocommit statement: the statement is sent and
                        flushed, the result not read (detail ``statement-sent``: the server may commit)
    ``commit_synced``   PostgreSQL only: with a pipelined commit, as ``commit`` but the pipeline's Sync is sent and
                        flushed too, so the server may commit (``pipeline-synced``); one statement: as ``commit``.
                        Either way the process dies before reading any result (the outcome is unknown to the
                        client, as in a real crash)

``race``
    prints ``ready``, blocks until a line arrives on stdin (the parent's barrier), then resumes ``--thread``.
    Prints ``ok <status>`` (exit 0) or ``conflict <message>`` (exit 3) on :class:`ThreadConflictError`.

``many``
    prints ``ready``, waits for the barrier, then starts the given ``--threads`` concurrently on one saver.

The effect of every step appends ``<value>\\t<ctx.idempotency_key>`` to ``--side`` (flushed and fsynced) and returns
``value``: ``r<n>``, or with ``--nonce`` ``r<n>#<8 random hex digits>`` (so the state shows which call's result
was used).
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from pydantic import BaseModel

from graphckpt import END, START, Context, StateGraph, ThreadConflictError, ThreadNotFoundError, append
from graphckpt.lease import LEASE_ENV
from graphckpt.savers.base import Saver, StoredCheckpoint, StoredWrite
from support import child_env
from support.leasing import wait_unleased

EXIT_CONFLICT = 3
CHILD_LEASE = "0.5"
"""The lease length of the children (seconds): a killed child's thread is crashed, so resumable, that soon."""


class CrashState(BaseModel):
    n: int = 0
    results: Annotated[list[str], append] = []


_SAY = threading.Lock()


def say(line: str) -> None:
    """One whole line on stdout, flushed (``print`` from two threads can interleave its text and newline)."""
    with _SAY:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class _Hooks:
    """Where this process kills itself (from the environment) and the ``n`` of the step being run."""

    def __init__(self) -> None:
        self.kind = os.environ.get("CRASH_HOOK", "")
        self.n = int(os.environ.get("CRASH_N", "-1"))
        self.current = -1

    def fire(self, kind: str, n: int, detail: str = "") -> None:
        if self.kind == kind and self.n == n:
            say(f"hook {kind} {n}{' ' + detail if detail else ''}")
            os.kill(os.getpid(), signal.SIGKILL)


HOOKS = _Hooks()


def _append_line(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def build_graph(
    *, steps: int = 200, side: str | None = None, nonce: bool = False, async_node: bool = False, delay: float = 0.0
) -> StateGraph:
    """One node ``work`` looping on itself ``steps`` times; each run journals one effect."""

    def effect_fn(n: int, key: str) -> str:
        value = f"r{n}#{os.urandom(4).hex()}" if nonce else f"r{n}"
        if side is not None:
            _append_line(side, f"{value}\t{key}\n")
        return value

    def work_sync(s: CrashState, ctx: Context) -> dict[str, Any]:
        HOOKS.current = s.n
        HOOKS.fire("node", s.n)
        if delay:
            time.sleep(delay)
        value = ctx.effect(lambda: effect_fn(s.n, ctx.idempotency_key))
        return {"n": s.n + 1, "results": [value]}

    async def work_async(s: CrashState, ctx: Context) -> dict[str, Any]:
        HOOKS.current = s.n
        HOOKS.fire("node", s.n)
        if delay:
            await asyncio.sleep(delay)
        value = await ctx.aeffect(lambda: effect_fn(s.n, ctx.idempotency_key))
        return {"n": s.n + 1, "results": [value]}

    def router(s: CrashState) -> str:
        HOOKS.fire("routed", s.n - 1)
        return END if s.n >= steps else "work"

    g = StateGraph(CrashState)
    g.add_node("work", work_async if async_node else work_sync)
    g.add_edge(START, "work")
    g.add_conditional_edges("work", router)
    return g


# -- savers with kill points inside their transactions ----------------------------------------------------------------


def _put_writes_hook(real: Callable[..., Any]) -> Callable[..., Any]:
    async def put_writes(thread_id: str, checkpoint_id: str, writes: Sequence[StoredWrite], **kw: Any) -> None:
        if any(w.kind == "effect" for w in writes):
            HOOKS.fire("effect", HOOKS.current)  # the effect's fn has returned; its journal commit has not started
        await real(thread_id, checkpoint_id, writes, **kw)

    return put_writes


def make_saver(backend: str, db: str, schema: str | None) -> Saver:
    if backend == "sqlite":
        return _make_sqlite(db)
    return _make_postgres(db, schema)


def _make_sqlite(path: str) -> Saver:
    import sqlite3

    from graphckpt.savers.sqlite import SqliteSaver

    class KillingSqliteSaver(SqliteSaver):
        """Kills inside the ``BEGIN IMMEDIATE`` transaction of a commit, after its statements ran, before COMMIT."""

        _kill_in_txn = False

        async def commit(
            self, checkpoint: StoredCheckpoint, *, expected_head: str | None, run_id: str, **kw: Any
        ) -> None:
            self._kill_in_txn = HOOKS.kind == "commit" and checkpoint.step == HOOKS.n + 1
            await super().commit(checkpoint, expected_head=expected_head, run_id=run_id, **kw)

        async def _write(self, body: Callable[[sqlite3.Connection], Any], **kw: Any) -> Any:
            if not self._kill_in_txn:
                return await super()._write(body, **kw)

            def killing_body(conn: sqlite3.Connection) -> Any:
                result = body(conn)  # the UPDATE of the head, the INSERTs, the DELETE of pending writes
                assert conn.in_transaction
                HOOKS.fire("commit", HOOKS.n)
                return result

            return await super()._write(killing_body, **kw)

    saver = KillingSqliteSaver(path)
    saver.put_writes = _put_writes_hook(saver.put_writes)  # type: ignore[method-assign]
    return saver


def _make_postgres(dsn: str, schema: str | None) -> Saver:
    import contextlib
    from collections.abc import AsyncIterator

    from psycopg.pq import TransactionStatus

    from graphckpt.savers.postgres import PostgresSaver

    def flush_all(pgconn: Any) -> None:
        while pgconn.flush() == 1:  # everything queued is on the wire before we die
            select.select([], [pgconn.socket], [], 1.0)

    class _KillingPipeline:
        """A commit pipelined as several statements: kill at the end of the block, before any result is read."""

        def __init__(self, owner: _KillingConnection) -> None:
            self._owner = owner
            self._real = owner._conn.pipeline()

        async def __aenter__(self) -> Any:
            self._owner._in_pipeline = True
            return await self._real.__aenter__()

        async def __aexit__(self, *exc: Any) -> Any:
            if exc[0] is None:
                pgconn, kind = self._owner._conn.pgconn, self._owner._kind
                if kind == "commit_synced":
                    pgconn.pipeline_sync()  # COMMIT point of the implicit transaction: the server may now commit
                flush_all(pgconn)
                HOOKS.fire(kind, HOOKS.n, "pipeline-synced" if kind == "commit_synced" else "pipeline-unsynced")
            return await self._real.__aexit__(*exc)

    class _KillingConnection:
        def __init__(self, conn: Any, kind: str) -> None:
            self._conn, self._kind = conn, kind
            self._in_pipeline = False

        def pipeline(self) -> _KillingPipeline:
            return _KillingPipeline(self)

        async def execute(self, *args: Any, **kwargs: Any) -> Any:
            return await self._killing(self._conn.execute(*args, **kwargs))

        def cursor(self, *args: Any, **kwargs: Any) -> Any:  # the savers run their statements on the cursor's
            real, owner = self._conn.cursor(*args, **kwargs), self

            class _KillingCursor:
                async def execute(self, *a: Any, **kw: Any) -> Any:
                    return await owner._killing(real.execute(*a, **kw))

                def __getattr__(self, name: str) -> Any:
                    return getattr(real, name)

            return _KillingCursor()

        async def _killing(self, statement: Any) -> Any:
            if self._in_pipeline:
                return await statement
            # A commit sent as one statement (autocommit): let psycopg send it, then kill before the result is read.
            task = asyncio.ensure_future(statement)
            pgconn = self._conn.pgconn
            for _ in range(10_000):
                await asyncio.sleep(0)
                if task.done() or pgconn.transaction_status == TransactionStatus.ACTIVE:
                    break
            flush_all(pgconn)
            HOOKS.fire(self._kind, HOOKS.n, "result-read" if task.done() else "statement-sent")
            return await task

        def __getattr__(self, name: str) -> Any:
            return getattr(self._conn, name)

    class KillingPostgresSaver(PostgresSaver):
        """Kills inside the pipelined commit: after the statements were sent, before any result was read."""

        _kill_kind: str | None = None

        async def commit(
            self, checkpoint: StoredCheckpoint, *, expected_head: str | None, run_id: str, **kw: Any
        ) -> None:
            hit = HOOKS.kind in ("commit", "commit_synced") and checkpoint.step == HOOKS.n + 1
            self._kill_kind = HOOKS.kind if hit else None
            await super().commit(checkpoint, expected_head=expected_head, run_id=run_id, **kw)

        @contextlib.asynccontextmanager
        async def _connection(self) -> AsyncIterator[Any]:
            async with super()._connection() as conn:
                yield _KillingConnection(conn, self._kill_kind) if self._kill_kind else conn

    saver = KillingPostgresSaver(dsn, schema=schema, pool_min=1, pool_max=2)
    saver.put_writes = _put_writes_hook(saver.put_writes)  # type: ignore[method-assign]
    return saver


# -- the parent's side: a child process with its stdout as a queue of lines -----------------------------------------


class Child:
    """``python crash_child.py *args`` with its stdout lines readable with a timeout (a reader thread feeds a queue).

    Every wait is bounded; :meth:`stop` SIGKILLs the child if it is still alive (call it in ``finally``)."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, stdin: bool = False) -> None:
        import queue
        import subprocess

        self.lines: queue.Queue[str | None] = queue.Queue()
        self.out: list[str] = []
        self.err: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), *args],
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(**{LEASE_ENV: CHILD_LEASE, **(env or {})}),
        )

        def pump() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.put(line.rstrip("\n"))
            self.lines.put(None)

        def drain() -> None:
            assert self.proc.stderr is not None
            self.err.extend(self.proc.stderr)

        self._threads = [threading.Thread(target=f, daemon=True) for f in (pump, drain)]
        for t in self._threads:
            t.start()
        self._eof = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def next_line(self, timeout: float = 30.0) -> str | None:
        """The next stdout line; ``None`` at end of output. Raises ``TimeoutError`` after ``timeout`` seconds."""
        import queue

        if self._eof:
            return None
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"child {self.pid} printed nothing for {timeout} s; so far: {self.out[-5:]}") from None
        if line is None:
            self._eof = True
        else:
            self.out.append(line)
        return line

    def wait_for(self, prefix: str, timeout: float = 30.0) -> str:
        """Read lines until one starts with ``prefix``."""
        deadline = time.monotonic() + timeout
        while (line := self.next_line(max(0.01, deadline - time.monotonic()))) is not None:
            if line.startswith(prefix):
                return line
        raise AssertionError(f"child {self.pid} ended without printing {prefix!r}: {self.describe()}")

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)

    def finish(self, timeout: float = 60.0) -> int:
        """Read the rest of the output and wait for the exit code (bounded). On timeout the child dumps its
        threads' stacks (``faulthandler`` on SIGUSR1) into the error."""
        import subprocess

        deadline = time.monotonic() + timeout
        try:
            while self.next_line(max(0.01, deadline - time.monotonic())) is not None:
                pass
            rc = self.proc.wait(max(0.01, deadline - time.monotonic()))
        except (TimeoutError, subprocess.TimeoutExpired) as exc:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGUSR1)
                time.sleep(1.0)  # give faulthandler a moment; this is diagnostics on a failure path only
            self.kill()
            raise AssertionError(f"child {self.pid} hung: {exc}; {self.describe()}") from None
        for t in self._threads:
            t.join(5)
        return rc

    def stop(self) -> None:
        """SIGKILL the child if it still runs and reap it."""
        self.kill()
        try:
            self.proc.wait(10)
            for t in self._threads:  # they end at EOF, which the dead child's pipes reach at once
                t.join(5)
        finally:
            for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()

    def describe(self) -> str:
        return f"rc={self.proc.poll()} stdout tail={self.out[-5:]} stderr={''.join(self.err)[-2000:]!r}"


# -- modes ------------------------------------------------------------------------------------------------------------


def _wait_barrier() -> None:
    say("ready")
    if not sys.stdin.readline():
        sys.exit("barrier closed without release")


def run_crash(args: argparse.Namespace) -> int:
    graph = build_graph(steps=args.steps, side=args.side, nonce=args.nonce, async_node=args.async_node)
    app = graph.compile(saver=make_saver(args.backend, args.db, args.schema), recursion_limit=args.steps + 10)
    try:
        if _exists(app, args.thread):
            wait_unleased(app, args.thread)
            stream = app.stream(None, thread_id=args.thread, mode="checkpoints", resume=True)
        else:
            stream = app.stream({"n": 0}, thread_id=args.thread, mode="checkpoints")
        for snap in stream:
            say(f"commit {snap.step}")
        say(f"done {app.get_state(args.thread).status}")
    finally:
        app.close()
    return 0


def _exists(app: Any, thread_id: str) -> bool:
    try:
        app.get_state(thread_id)
    except ThreadNotFoundError:
        return False
    return True


def run_race(args: argparse.Namespace) -> int:
    graph = build_graph(steps=args.steps, side=args.side, async_node=args.async_node, delay=args.delay)
    app = graph.compile(saver=make_saver(args.backend, args.db, args.schema), recursion_limit=args.steps + 10)
    try:
        _exists(app, args.thread)  # open the saver (connections, migrations) before the barrier
        wait_unleased(app, args.thread)  # the killed owner's lease expired: both racers may take it over
        _wait_barrier()
        try:
            snap = app.resume(args.thread)
        except ThreadConflictError as exc:
            say(f"conflict {exc}")
            return EXIT_CONFLICT
        say(f"ok {snap.status} {snap.step}")
    finally:
        app.close()
    return 0


async def _many(args: argparse.Namespace) -> None:
    graph = build_graph(steps=args.steps, async_node=True)
    async with graph.compile(saver=make_saver(args.backend, args.db, args.schema)) as app:
        await app.saver.setup()
        await asyncio.to_thread(_wait_barrier)
        snaps = await asyncio.gather(*(app.ainvoke({"n": 0}, thread_id=t) for t in args.threads))
        for snap in snaps:
            say(f"finished {snap.thread_id} {snap.status} {snap.step}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["crash", "race", "many"])
    p.add_argument("--backend", choices=["sqlite", "postgres"], required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--schema")
    p.add_argument("--thread")
    p.add_argument("--threads", nargs="*", default=[])
    p.add_argument("--side")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--nonce", action="store_true")
    p.add_argument("--async-node", action="store_true")
    p.add_argument("--delay", type=float, default=0.0)
    args = p.parse_args(argv)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the parent asks for stacks when we hang
    if args.mode == "crash":
        return run_crash(args)
    if args.mode == "race":
        return run_race(args)
    asyncio.run(_many(args))
    say("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
