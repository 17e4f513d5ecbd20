"""Telemetry spans of a run (:class:`RunSpans`, mixed into :class:`~graphckpt.engine.Run`): the run's span around
its loop, each step's and each task's. With telemetry off (no tracer registered in :mod:`graphckpt._hook`) each is a
no-op context manager."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from graphckpt import _hook
from graphckpt.context import Context, NodeInterrupt

if TYPE_CHECKING:
    from graphckpt.codec import Codec
    from graphckpt.records import Head

__all__ = ["RunSpans"]

_UNTRACED: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
"""A step's or task's span while telemetry is off: enters and exits for free (reusable)."""


class RunSpans:
    """The spans of one run: what the tracer needs of the run (its tags, codec, head, thread and step)."""

    _tracing: _hook.Tracing | None
    _span: Any
    _step_span: Any
    tags: dict[str, Any] | None
    codec: Codec
    head: Head
    thread_id: str

    @property
    def step(self) -> int:  # overridden by the run
        raise NotImplementedError

    @contextlib.contextmanager
    def _run_span(self) -> Iterator[None]:
        """With telemetry on, the run's span around the loop (a consumer that stops early ends it without error)."""
        tracing = _hook.TRACING
        if tracing is None:
            yield
            return
        graph = str((self.tags or {}).get("graph") or getattr(self.codec.state.schema, "__name__", "graph"))
        self._tracing = tracing
        self._span = tracing.run_span(graph, self.thread_id, self.head.cp.metadata.get("trace"))
        try:
            yield
        except GeneratorExit:
            tracing.end(self._span)
            raise
        except BaseException as exc:
            tracing.end(self._span, exc)
            raise
        tracing.end(self._span)

    def _step_span_of(self) -> contextlib.AbstractContextManager[None]:
        """With telemetry on, the step's span around running its frontier and committing it (off: nothing, cheaply:
        this runs every step, where a generator-based manager costs measurably)."""
        return _UNTRACED if self._tracing is None else self._step_span_traced(self._tracing)

    @contextlib.contextmanager
    def _step_span_traced(self, tracing: _hook.Tracing) -> Iterator[None]:
        self._step_span = tracing.step_span(self._span, self.thread_id, self.step)
        try:
            yield
        except BaseException as exc:
            tracing.end(self._step_span, exc)
            raise
        tracing.end(self._step_span)

    def _task_span_of(self, ctx: Context) -> contextlib.AbstractContextManager[None]:
        """With telemetry on, the task's span around the node call (the current span meanwhile, so the node's calls
        nest in it); an interrupt ends it without error."""
        return _UNTRACED if self._tracing is None else self._task_span_traced(self._tracing, ctx)

    @contextlib.contextmanager
    def _task_span_traced(self, tracing: _hook.Tracing, ctx: Context) -> Iterator[None]:
        task_span = tracing.task_span(self._step_span, ctx.task, ctx.attempt, self.thread_id, self.step)
        token = tracing.activate(task_span)
        try:
            yield
        except NodeInterrupt:
            tracing.end(task_span)
            raise
        except BaseException as exc:
            tracing.end(task_span, exc)
            raise
        finally:
            tracing.deactivate(token)
        tracing.end(task_span)
