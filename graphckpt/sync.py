"""The sync bridge: the sync API runs the async one on one long-lived event loop on a background thread.

- :class:`Portal`: the loop's thread and a way to run coroutines on it from other threads. Savers opened by one call
  serve all later ones, whatever thread the calls come from.
- :class:`SyncFacade` (mixed into ``App``) with :func:`sync_twin` / :func:`sync_iter_twin`: the sync twins of
  ``App``'s methods (``invoke = sync_twin(ainvoke)``, ...), typed from the async signatures.
- :class:`InlineRunner`: the app's node runner. A super-step whose only task is a *fast* sync node, in a run started
  by the only sync call in flight, calls the node inline on the portal loop instead of hopping to a worker thread.
- The sync ``fork``'s lazy values (:meth:`SyncFacade.load_later`): fetched on first access, through the portal.

This is the only module that uses asyncio's private API.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import inspect
import math
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from graphckpt.errors import SyncCallError
from graphckpt.runner import timed

if TYPE_CHECKING:
    from graphckpt.codec import Body, Codec
    from graphckpt.compiled import NodeSpec
    from graphckpt.records import LoadLater
    from graphckpt.savers.base import BlobRange, Saver, StoredCheckpoint

__all__ = [
    "INLINE_MAX_MS",
    "SYNC_FACADE",
    "InlineRunner",
    "Portal",
    "SyncFacade",
    "note_sync_call",
    "sync_iter_twin",
    "sync_twin",
]

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")
F = TypeVar("F", bound="SyncFacade")
C = TypeVar("C", bound=Callable[..., Any])

_CLOSED_CHECK = 1.0
"""Seconds between checks, while a sync call waits, that the loop it was sent to has not been closed meanwhile."""

SYNC_FACADE: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar(
    "graphckpt_sync_facade", default=None
)
"""Set while a run was started through the sync API: a check that says whether this is the only sync call in flight
on its app. Then a super-step whose only task is a *fast* sync node (measured under ``INLINE_MAX_MS`` on average)
without ``ctx`` and without ``timeout`` calls the node directly on the portal loop instead of hopping to a worker
thread (~0.05 ms a step), as a plain function call: the caller is blocked anyway and nothing else runs on that loop.
The node sees no running event loop (so it may call ``asyncio.run``). Everything else (slow or unmeasured nodes,
sync nodes that take ``ctx``, have a timeout or have called the app's sync API, tasks beside other tasks, and any
task while another sync call or a stream is in flight) runs in worker threads, and runs started through the async
API never block their loop."""

INLINE_MAX_MS = 0.5
"""A sync node whose calls took less than this (milliseconds, moving average) may run inline (see SYNC_FACADE)."""

_SYNC_NODE: contextvars.ContextVar[tuple[dict[str, float], str] | None] = contextvars.ContextVar(
    "graphckpt_sync_node", default=None
)
"""Set in a sync node's worker thread: the ``node_ms`` of its run and the node's name (see :func:`note_sync_call`)."""


def note_sync_call(node_ms: dict[str, float]) -> None:
    """Called by each sync call of the app whose sync nodes' durations are ``node_ms``: when a sync node of that app
    makes it (from its worker thread, where it works), the node is never run inline again. On the loop that call
    needs it could not be made (:class:`~graphckpt.errors.SyncCallError`), so a node that does so fine in a thread
    must not start failing once it has been measured fast."""
    running = _SYNC_NODE.get()
    if running is not None and running[0] is node_ms:
        node_ms[running[1]] = math.inf


class InlineRunner:
    """The app's :class:`~graphckpt.engine.NodeRunner`: sync nodes run in worker threads, or inline (see
    :data:`SYNC_FACADE`); ``node_ms`` is the moving average of each sync node's duration, shared by the app's runs."""

    def __init__(self, node_ms: dict[str, float]) -> None:
        self.node_ms = node_ms

    def run_sync(
        self, spec: NodeSpec, args: tuple[Any, ...], *, alone: bool, streamed: bool, span: list[float]
    ) -> Awaitable[Any]:
        if alone and not streamed and not spec.takes_ctx and spec.timeout is None and self._may_inline(spec.name):
            return self._inline(spec, args)
        return self._threaded(spec, args, span)

    def _may_inline(self, name: str) -> bool:
        average = self.node_ms.get(name)
        if average is None or average >= INLINE_MAX_MS:
            return False
        only_caller = SYNC_FACADE.get()
        return only_caller is not None and only_caller()

    async def _inline(self, spec: NodeSpec, args: tuple[Any, ...]) -> Any:
        started = time.perf_counter()
        out = _call_as_plain_function(spec.fn, *args)
        self._note(spec.name, time.perf_counter() - started)
        return out

    async def _threaded(self, spec: NodeSpec, args: tuple[Any, ...], span: list[float]) -> Any:
        context = contextvars.copy_context()
        context.run(_SYNC_NODE.set, (self.node_ms, spec.name))  # see note_sync_call
        run = functools.partial(context.run, spec.fn, *args)
        out = await asyncio.get_running_loop().run_in_executor(None, timed, run, span)
        self._note(spec.name, span[1] - span[0])
        return out

    def _note(self, name: str, seconds: float) -> None:
        took, average = seconds * 1000, self.node_ms.get(name)
        self.node_ms[name] = took if average is None else 0.8 * average + 0.2 * took


def _call_as_plain_function(fn: Callable[..., Any], *args: Any) -> Any:
    """Call a sync node on the loop's thread as if no event loop were running there (see ``SYNC_FACADE``)."""
    loop = asyncio.get_running_loop()
    asyncio._set_running_loop(None)
    try:
        return contextvars.copy_context().run(fn, *args)
    finally:
        asyncio._set_running_loop(loop)


class SyncFacade:
    """What an async app needs for its sync twins: the portal loop its sync calls run on, the count of sync calls in
    flight (see :data:`SYNC_FACADE`), its sync nodes' durations and the :class:`InlineRunner` that measures them.
    The twins themselves are made in the app's class body with :func:`sync_twin` and :func:`sync_iter_twin`."""

    def __init__(self) -> None:
        self._portal = Portal()
        self._sync_lock = threading.Lock()
        self._sync_calls = 0  # sync calls in flight (see SYNC_FACADE)
        self._node_ms: dict[str, float] = {}  # sync nodes' average duration, shared by this app's runs
        self.runner = InlineRunner(self._node_ms)
        """How the app's runs call sync nodes (in worker threads, or inline: see :data:`SYNC_FACADE`)."""
        self.closes = 0
        """How many times the app was closed (a sync fork's lazy values must not outlive it)."""

    @property
    def portal(self) -> Portal:
        """The loop the app's sync calls run on."""
        return self._portal

    def aclose(self) -> Coroutine[Any, Any, None]:
        """Close the app (provided by the app)."""
        raise NotImplementedError

    def close(self) -> None:
        """Close the saver and stop the background loop. Sync calls other threads still have running end with
        :class:`SyncCallError` (their runs stop as after a crash: every committed checkpoint stays). (After async use
        only, prefer ``await app.aclose()``.)"""
        if self._portal.started:
            self._portal.shutdown(self.aclose())
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(self.aclose())
            return
        raise RuntimeError("App.close() blocks; on a running event loop use `await app.aclose()`")

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the bridge ------------------------------------------------------------------------------------------------

    def sync_call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the portal loop and return its result here (what every sync twin does)."""
        note_sync_call(self._node_ms)
        with self._sync_lock:
            self._sync_calls += 1
        try:
            return self._portal.call(_as_sync_facade(coro, self._only_sync_call))
        except SyncCallError:
            coro.close()  # refused on the portal's own thread: never started (a no-op if it ran and raised this)
            raise
        finally:
            with self._sync_lock:
                self._sync_calls -= 1

    def sync_iter(self, agen: AsyncIterator[T]) -> Iterator[T]:
        """Drive ``agen`` on the portal loop, one item per ``next()`` (what a sync stream does)."""
        note_sync_call(self._node_ms)
        with self._sync_lock:
            self._sync_calls += 1  # a stream in flight: other sync calls must not block the loop meanwhile
        try:
            yield from self._portal.iterate(agen)
        finally:
            with self._sync_lock:
                self._sync_calls -= 1

    def _only_sync_call(self) -> bool:
        return self._sync_calls == 1

    def load_later(self, codec: Codec, saver: Saver) -> LoadLater:
        """For the sync ``fork``: a loader that fetches and folds the source's values when first needed, through the
        portal (the caller is not on that loop). It raises :class:`SyncCallError` if the app was closed since,
        instead of reopening its saver on a new loop that nobody would close."""
        closes = self.closes

        def later(
            src_cp: StoredCheckpoint, src_body: Body, ranges: list[BlobRange], new_thread_id: str
        ) -> Callable[[], list[dict[str, Any]]]:
            def load() -> list[dict[str, Any]]:
                if self.closes != closes:
                    raise SyncCallError(
                        f"the values of fork {new_thread_id!r} are loaded on first access and the app was closed "
                        f"since; read them before closing it, or later with get_state({new_thread_id!r})"
                    )
                return codec.fold_many([(src_cp, src_body)], self.sync_call(saver.get_blobs(ranges)))

            return load

        return later


def sync_twin(method: Callable[Concatenate[F, P], Coroutine[Any, Any, R]]) -> Callable[Concatenate[F, P], R]:
    """The sync twin of the async method ``method`` (``invoke = sync_twin(ainvoke)`` in the app's class body): the
    same parameters, typed from the async signature, and the coroutine's result, run on the app's portal loop."""
    name = method.__name__

    def twin(self: F, /, *args: P.args, **kwargs: P.kwargs) -> R:
        coro: Coroutine[Any, Any, R] = getattr(self, name)(*args, **kwargs)
        return self.sync_call(coro)

    return _named(twin, method)


def sync_iter_twin(method: Callable[Concatenate[F, P], AsyncIterator[R]]) -> Callable[Concatenate[F, P], Iterator[R]]:
    """The sync twin of an async iterator method (``stream = sync_iter_twin(astream)``): an iterator driven on the
    app's portal loop."""
    name = method.__name__

    def twin(self: F, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[R]:
        agen: AsyncIterator[R] = getattr(self, name)(*args, **kwargs)
        return self.sync_iter(agen)

    return _named(twin, method)


def _named(twin: C, method: Callable[..., Any]) -> C:
    """``twin`` named after ``method`` without its ``a``, documented as its sync twin (``help(app.invoke)``), with
    ``method``'s signature (``inspect.signature`` follows ``__wrapped__``)."""
    functools.update_wrapper(twin, method)
    twin.__name__ = method.__name__.removeprefix("a")
    twin.__qualname__ = f"{method.__qualname__.rpartition('.')[0]}.{twin.__name__}".lstrip(".")
    twin.__doc__ = f"Sync :meth:`{method.__name__}`."
    return twin


async def _as_sync_facade(coro: Coroutine[Any, Any, T], only_caller: Callable[[], bool]) -> T:
    SYNC_FACADE.set(only_caller)  # this coroutine runs in its own task: the setting stays in its context
    return await coro


class Portal:
    """A daemon thread running an event loop, and a way to run coroutines on it from other threads."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._calls: set[asyncio.Task[Any]] = set()  # the tasks of calls in flight (touched on the loop only)
        self._streams: set[AsyncIterator[Any]] = set()  # iterators being driven by ``iterate``
        self._cancelled = False  # set by shutdown, until close: a cancelled or new call raises SyncCallError
        self._generation = 0  # loops closed so far: a stream begun on an earlier loop cannot go on
        self._stop = threading.Event()  # the current loop's: set when close() stops it

    @property
    def started(self) -> bool:
        """A loop is running (until :meth:`close`)."""
        return self._loop is not None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    while True:
                        try:
                            loop.run_forever()
                        except (KeyboardInterrupt, SystemExit):
                            # raised by a node: asyncio sets it on the task, then lets it escape the loop. The
                            # task's caller gets it from its future; the loop goes on serving the other calls
                            if not stop.is_set():
                                continue
                        return

                stop = threading.Event()  # set by close(): run_forever ended because it was asked to
                self._stop = stop

                self._thread = threading.Thread(target=run, name="graphckpt-portal", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the portal loop and return its result (or raise its exception) in this thread. Raises
        :class:`SyncCallError` when called from the portal loop's own thread (it would wait for itself forever)."""
        loop = self.loop
        if threading.current_thread() is self._thread:
            coro.close()
            raise SyncCallError("a sync graphckpt call was made from inside a node; use the async API there")
        if self._cancelled:
            coro.close()
            raise SyncCallError("the app is being closed")
        tracked = self._tracked(coro)
        try:
            future = asyncio.run_coroutine_threadsafe(tracked, loop)
        except RuntimeError:
            if not loop.is_closed():
                raise
            tracked.close()  # never started: no "never awaited" warning
            coro.close()
            raise SyncCallError("the app was closed while this call was being made") from None
        while True:
            try:
                return future.result(timeout=_CLOSED_CHECK)
            except concurrent.futures.CancelledError:
                if self._cancelled or loop.is_closed():
                    raise SyncCallError("the app was closed while this call was running") from None
                raise
            except TimeoutError:
                if future.done():  # it finished meanwhile: its result, or its own exception
                    return future.result()
                if loop.is_closed():  # submitted just as the app closed: it will never run
                    if inspect.getcoroutinestate(tracked) == inspect.CORO_CREATED:
                        tracked.close()  # no "never awaited" warning
                    raise SyncCallError("the app was closed while this call was running") from None

    async def _tracked(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._cancelled:  # checked on the loop, where shutdown's cancelling runs: no call slips between them
            coro.close()
            raise SyncCallError("the app is being closed")
        task = asyncio.current_task()
        assert task is not None
        self._calls.add(task)
        try:
            return await coro
        finally:
            self._calls.discard(task)

    def shutdown(self, final: Coroutine[Any, Any, None]) -> None:
        """Cancel the calls other threads have in flight and wait until they have unwound (each raises
        :class:`SyncCallError` in its thread; a run stops as after a crash, its checkpoints durable), stop the
        streams whose readers are between items, run ``final`` (closing the saver), then :meth:`close`."""
        loop = self._loop
        if loop is None or loop.is_closed():
            final.close()
            self.close()
            return
        if threading.current_thread() is self._thread:
            final.close()
            raise SyncCallError("the app was closed from inside a node; use `await app.aclose()` there")

        async def cancel_then_final() -> None:
            calls = list(self._calls)
            for task in calls:
                task.cancel()
            if calls:
                await asyncio.wait(calls)
            for stream in list(self._streams):  # streams whose reader is between items: stop their runs too
                with contextlib.suppress(Exception):
                    await self._close_stream(stream)
            await final

        self._cancelled = True
        try:
            asyncio.run_coroutine_threadsafe(cancel_then_final(), loop).result()
        finally:
            self.close()

    def iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        """Drive an async iterator on the portal loop, one item per ``next()``.

        The iterator is one of the portal's open streams (what :meth:`shutdown` closes) from the first ``next()``
        until it has ended or been closed, and it leaves that set only on the loop, in the same call that ended or
        closed it. A reader that stops midway closes it through the loop, unless a shutdown has begun: then the
        shutdown closes it (it reads the set on the loop after the calls in flight have unwound), so a stream is
        never dropped unclosed by a reader racing the shutdown, nor closed by both."""

        async def step() -> tuple[bool, T | None]:
            try:
                return True, await agen.__anext__()
            except StopAsyncIteration:
                self._streams.discard(agen)
                return False, None
            except BaseException:
                self._streams.discard(agen)  # it raised (or its call was cancelled): it has ended
                raise

        generation = self._generation
        self._streams.add(agen)
        try:
            while True:
                if self._generation != generation:
                    raise SyncCallError("the app was closed while this stream was being read")
                more, item = self.call(step())
                if not more:
                    return
                yield item  # type: ignore[misc]
        finally:
            loop = self._loop
            if agen not in self._streams:
                pass  # it ended (or was closed) on the loop
            elif loop is None or self._generation != generation:
                self._streams.discard(agen)  # its loop is gone: nothing is left to run on it
            elif threading.current_thread() is self._thread:  # collected there (by the cyclic GC): cannot wait
                loop.create_task(self._tracked(self._close_stream(agen)))
            elif not self._cancelled:  # else a shutdown has begun: it closes the streams still open
                self.call(self._close_stream(agen))  # a stream abandoned midway stops its run now, not at GC

    async def _close_stream(self, agen: AsyncIterator[Any]) -> None:
        """Close an open stream (on the loop): its run stops; then it is no longer open."""
        try:
            closer = getattr(agen, "aclose", None)
            if closer is not None:
                await closer()
        finally:
            self._streams.discard(agen)

    def close(self) -> None:
        """Stop the loop and join its thread. The portal starts a new loop if used again."""
        with self._lock:
            loop, thread, stop = self._loop, self._thread, self._stop
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        stop.set()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
        self._generation += 1
        self._cancelled = False
