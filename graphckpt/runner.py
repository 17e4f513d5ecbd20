"""How a run calls sync nodes: the :class:`NodeRunner` seam, its default :class:`ThreadRunner` (the loop's
executor), and :func:`timed`, which notes when a call ran in the thread that made it. The sync bridge's
``InlineRunner`` is the other implementation (see :mod:`graphckpt.sync`).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from graphckpt.compiled import NodeSpec

__all__ = ["NodeRunner", "ThreadRunner", "timed"]


class NodeRunner(Protocol):
    """How sync nodes are called. ``alone``: the task is the only one of its step; ``span`` receives the start and
    end of the call in the thread that made it (so time spent waiting for a worker is not the node's)."""

    def run_sync(
        self, spec: NodeSpec, args: tuple[Any, ...], *, alone: bool, streamed: bool, span: list[float]
    ) -> Awaitable[Any]: ...


class ThreadRunner:
    """The default :class:`NodeRunner`: each sync node call runs in the loop's default executor."""

    def run_sync(
        self, spec: NodeSpec, args: tuple[Any, ...], *, alone: bool, streamed: bool, span: list[float]
    ) -> asyncio.Future[Any]:
        run = functools.partial(contextvars.copy_context().run, spec.fn, *args)
        return asyncio.get_running_loop().run_in_executor(None, timed, run, span)


def timed(run: Callable[[], Any], span: list[float]) -> Any:
    """``run()``, noting in ``span`` when it started and ended."""
    span.append(time.perf_counter())
    try:
        return run()
    finally:
        span.append(time.perf_counter())
