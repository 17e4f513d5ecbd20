"""The sync facade's engine room: one long-lived event loop on a background thread.

Every sync call (``app.invoke``, ``app.history``, ...) submits its coroutine to this loop and waits. Savers opened by
one call serve all later ones, whatever thread the calls come from.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

from graphckpt.errors import SyncCallError

__all__ = ["Portal"]

_CLOSED_CHECK = 1.0
"""Seconds between checks, while a sync call waits, that the loop it was sent to has not been closed meanwhile."""

T = TypeVar("T")


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
                closer = getattr(stream, "aclose", None)
                if closer is not None:
                    with contextlib.suppress(Exception):
                        await closer()
            await final

        self._cancelled = True
        try:
            asyncio.run_coroutine_threadsafe(cancel_then_final(), loop).result()
        finally:
            self.close()

    def iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        """Drive an async iterator on the portal loop, one item per ``next()``."""

        async def step() -> tuple[bool, T | None]:
            try:
                return True, await agen.__anext__()
            except StopAsyncIteration:
                return False, None

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
            self._streams.discard(agen)
            closer = getattr(agen, "aclose", None)
            loop = self._loop
            if closer is not None and loop is not None and not self._cancelled and self._generation == generation:
                if threading.current_thread() is self._thread:  # collected there (by the cyclic GC): cannot wait
                    loop.create_task(self._tracked(closer()))
                else:
                    self.call(closer())  # a stream abandoned midway stops its run now, not at garbage collection

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
