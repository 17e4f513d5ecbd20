"""A stand-in for ``graphckpt.Context`` to unit-test nodes without the engine.

It keeps the effect journal in a dict keyed by call index, as the engine does per task: :meth:`FakeContext.rerun`
gives the next run of the same task (after a crash, a retry or an interrupt) with the same journal, so a test can
check that a recorded effect is not executed again. Results must be plain data, as the engine requires.
"""

from __future__ import annotations

import contextvars
import copy
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["FakeContext", "Interrupted"]

_MISSING: Any = object()
_CURRENT_EFFECT: contextvars.ContextVar[tuple[Any, int] | None] = contextvars.ContextVar("fake_effect", default=None)


class Interrupted(Exception):
    """Raised by :meth:`FakeContext.interrupt` when no answer is given: the thread would stop here."""

    def __init__(self, payload: Any) -> None:
        super().__init__(payload)
        self.payload = payload


class FakeContext:
    """Implements the node-facing context API with an in-memory journal."""

    def __init__(
        self,
        *,
        thread_id: str = "t1",
        node: str = "node",
        task_id: str = "task-1",
        step: int = 1,
        attempt: int = 1,
        journal: dict[int, Any] | None = None,
        answer: Any = _MISSING,
    ) -> None:
        self.thread_id = thread_id
        self.node = node
        self.task_id = task_id
        self.step = step
        self.attempt = attempt
        self.journal: dict[int, Any] = {} if journal is None else journal
        self.usage: list[tuple[str, int, int]] = []
        self.interrupts: list[Any] = []
        self.executed = 0
        """How many effects this run executed (rather than read from the journal)."""
        self._effects = 0
        self._answer = answer

    @property
    def idempotency_key(self) -> str:
        current = _CURRENT_EFFECT.get()
        index = current[1] if current is not None and current[0] is self else self._effects
        return f"{self.thread_id}:{self.task_id}:{index}"

    def rerun(self, *, answer: Any = _MISSING) -> FakeContext:
        """The same task run again, sharing this run's journal."""
        return FakeContext(
            thread_id=self.thread_id,
            node=self.node,
            task_id=self.task_id,
            step=self.step,
            attempt=self.attempt + 1,
            journal=self.journal,
            answer=answer,
        )

    async def aeffect(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        index = self._effects  # taken when the call is made, as the engine does: concurrent calls get their own
        self._effects += 1
        if index not in self.journal:
            token = _CURRENT_EFFECT.set((self, index))  # the key read inside the call names this call
            try:
                result = fn(*args, **kwargs)
                if inspect.isawaitable(result):
                    result = await result
            finally:
                _CURRENT_EFFECT.reset(token)
            self._record(index, result)
        return copy.deepcopy(self.journal[index])

    def effect(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        index = self._effects
        if index not in self.journal:
            self._record(index, fn(*args, **kwargs))
        self._effects += 1
        return copy.deepcopy(self.journal[index])

    def report_usage(self, model: str, prompt_tokens: int = 0, completion_tokens: int = 0) -> None:
        self.usage.append((model, prompt_tokens, completion_tokens))

    def interrupt(self, payload: Any) -> Any:
        self.interrupts.append(payload)
        if self._answer is _MISSING:
            raise Interrupted(payload)
        return self._answer

    def _record(self, index: int, result: Any) -> None:
        _check_plain(result, f"effect {index}")
        self.executed += 1
        self.journal[index] = copy.deepcopy(result)


def _check_plain(value: Any, where: str) -> None:
    if value is None or isinstance(value, str | int | float | bool | bytes):
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where}: dict key {key!r} is not a str")
            _check_plain(item, f"{where}.{key}")
        return
    raise TypeError(f"{where}: {type(value).__name__} is not plain data")
