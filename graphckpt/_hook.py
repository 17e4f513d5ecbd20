"""The switch :func:`graphckpt.telemetry.enable` flips. ``TRACING`` is ``None`` unless telemetry was enabled; the
engine and the node contexts test it once per run, step, task and call, which is all tracing costs when it is off.
Kept apart from :mod:`graphckpt.telemetry` so that ``import graphckpt`` never imports opentelemetry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from graphckpt.audit import CallInfo
    from graphckpt.checkpoint import Task

__all__ = ["TRACING", "Tracing"]


class Tracing(Protocol):
    """What the engine asks of the telemetry (implemented by :class:`graphckpt.telemetry.Tracer`)."""

    def run_span(self, graph: str, thread_id: str, resumes: Mapping[str, Any] | None) -> Any: ...
    def step_span(self, parent: Any, thread_id: str, step: int) -> Any: ...
    def task_span(self, parent: Any, task: Task, attempt: int, thread_id: str, step: int) -> Any: ...
    def activate(self, span: Any) -> Any: ...
    def deactivate(self, token: Any) -> None: ...
    def call_span(self, info: CallInfo, key: str, *, replayed: bool) -> Any: ...
    def end_call(self, span: Any, info: CallInfo, result: Any, exc: BaseException | None) -> None: ...
    def end(self, span: Any, exc: BaseException | None = None) -> None: ...
    def trace_context(self, span: Any) -> dict[str, str]: ...


TRACING: Tracing | None = None
