"""Bounded waits: a condition polled until it holds or a timeout passes, never a bare sleep that hopes.

    wait_for(lambda: path.exists(), 10, what="the child's ready file")
    info = await await_for(lambda: app.athread(tid), 10, what="the thread")   # the condition may be async

Both return the condition's first truthy value and raise ``AssertionError`` naming ``what`` after ``timeout`` s.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["await_for", "wait_for"]


def wait_for(condition: Callable[[], Any], timeout: float, *, interval: float = 0.02, what: str = "") -> Any:
    """``condition()``'s first truthy value, polled every ``interval`` s; AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(interval)


async def await_for(
    condition: Callable[[], Any | Awaitable[Any]],
    timeout: float,  # noqa: ASYNC109 (a bound on polling, not a cancel scope)
    *,
    interval: float = 0.02,
    what: str = "",
) -> Any:
    """The async twin of :func:`wait_for`: ``condition`` may be a plain or an async callable; the loop keeps running
    between polls."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        await asyncio.sleep(interval)
