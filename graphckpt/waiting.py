"""What a durable wait is made of, as a node sees it: the answers the waker resumes a thread with, and what an
interrupt does when its deadline passes (:class:`OnTimeout`).

A node waits with ``ctx.sleep(seconds)`` / ``ctx.wait_until(when)`` or ``ctx.interrupt(question, timeout=...)``.
The wake-up time is journaled as an effect of the task (a re-run waits for the same time, not a new one), a ``waits``
row records it (:mod:`graphckpt.savers.waits`) and the thread stops ``interrupted``: nothing holds a process or a
lease. At the time, a worker's sweep fires the wait once and queues a resume run whose answer is :data:`WOKE` (a
sleep: the node goes on) or :data:`TIMED_OUT` (an interrupt: its :class:`OnTimeout` decides). A resume before the
time (a person, ``graphckpt resume``) re-runs the node, which sees the time has not come and waits again.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

from graphckpt.errors import GraphckptError

__all__ = ["TIMED_OUT", "WOKE", "InterruptTimeoutError", "OnTimeout", "Routed", "wake_time"]

WOKE: dict[str, Any] = {"graphckpt": "woke"}
"""The answer a fired sleep resumes its thread with."""
TIMED_OUT: dict[str, Any] = {"graphckpt": "timed_out"}
"""The answer a fired interrupt deadline resumes its thread with."""


class InterruptTimeoutError(GraphckptError, TimeoutError):
    """An interrupt's deadline passed with ``on_timeout=OnTimeout.fail()``: the node (and the thread) fails."""


class Routed(BaseException):
    """Raised by ``ctx.interrupt`` when its deadline passed with ``OnTimeout.goto(node)``: the engine ends the task
    as if it had returned ``Command(goto=node)``. A ``BaseException`` so node code does not catch it."""

    def __init__(self, node: str) -> None:
        super().__init__(node)
        self.node = node


@dataclass(frozen=True, slots=True)
class OnTimeout:
    """What an interrupt with a deadline does when nobody answered in time: ``OnTimeout.answer(value)`` (the
    interrupt returns ``value``), ``OnTimeout.goto(node)`` (the task ends and the graph goes to ``node``) or
    ``OnTimeout.fail()`` (the node raises :class:`InterruptTimeoutError`: the thread fails, naming the deadline)."""

    action: str
    value: Any = None

    @classmethod
    def answer(cls, value: Any) -> OnTimeout:
        return cls("answer", value)

    @classmethod
    def goto(cls, node: str) -> OnTimeout:
        if not isinstance(node, str) or not node:
            raise GraphckptError(f"OnTimeout.goto needs a node name, not {node!r}")
        return cls("goto", node)

    @classmethod
    def fail(cls) -> OnTimeout:
        return cls("fail")

    def apply(self, node: str, deadline: float) -> Any:
        """The interrupt's return value (or the exception) once its deadline passed."""
        if self.action == "answer":
            return self.value
        if self.action == "goto":
            raise Routed(str(self.value))
        when = dt.datetime.fromtimestamp(deadline, dt.UTC).isoformat()
        raise InterruptTimeoutError(f"node {node!r}: nobody answered its interrupt before its deadline {when}")


def wake_time(now: float, *, seconds: float | None = None, when: dt.datetime | float | None = None) -> float:
    """The wake-up time (seconds since the epoch) of a wait of ``seconds`` from ``now``, or until ``when`` (an aware
    datetime, or seconds since the epoch)."""
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
            raise GraphckptError(f"a wait needs a finite number of seconds, not {seconds!r}")
        return now + max(0.0, float(seconds))
    if isinstance(when, dt.datetime):
        if when.tzinfo is None:
            raise GraphckptError(f"wait_until needs an aware datetime (with a time zone), not {when!r}")
        return when.timestamp()
    if isinstance(when, int | float) and not isinstance(when, bool) and math.isfinite(when):
        return float(when)
    raise GraphckptError(f"wait_until needs an aware datetime or seconds since the epoch, not {when!r}")


def wait_payload(kind: str, wake: float, question: Any = None) -> Any:
    """What the thread's open interrupt shows while it waits."""
    until = dt.datetime.fromtimestamp(wake, dt.UTC).isoformat()
    if kind == "sleep":
        return {"graphckpt_wait": {"until": until, "wake_at": wake}}
    return question
