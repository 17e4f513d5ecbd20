"""Retrying a node: the policy, and the backoff it computes."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["RetryPolicy"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently a failing node is retried before the thread is marked ``failed``.

    A retry re-runs the node function in the same task: effects it journaled before failing are returned from the
    journal, not repeated. Interrupts, timeouts of the whole run and invalid updates are never retried.
    """

    max_attempts: int = 3
    """Total attempts, the first included. ``1`` disables retrying."""
    initial_interval: float = 0.5
    """Seconds before the second attempt."""
    backoff_factor: float = 2.0
    """Each wait is this many times the previous one."""
    max_interval: float = 30.0
    """No wait is longer than this."""
    jitter: bool = True
    """Randomize each wait between half and all of its value, so retrying workers do not stampede."""
    retry_on: type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool] = Exception
    """Exception types to retry, or a predicate deciding per exception."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"RetryPolicy.max_attempts must be at least 1, not {self.max_attempts}")
        if self.initial_interval < 0 or self.max_interval < 0 or self.backoff_factor < 1:
            raise ValueError("RetryPolicy intervals must be >= 0 and backoff_factor >= 1")

    def should_retry(self, exc: BaseException, attempt: int) -> bool:
        """Whether to try again after ``attempt`` (1-based) failed with ``exc``."""
        if attempt >= self.max_attempts:
            return False
        if isinstance(self.retry_on, (type, tuple)):
            return isinstance(exc, self.retry_on)
        return bool(self.retry_on(exc))

    def wait(self, attempt: int) -> float:
        """Seconds to wait after ``attempt`` (1-based) failed."""
        base = min(self.initial_interval * self.backoff_factor ** (attempt - 1), self.max_interval)
        return base * random.uniform(0.5, 1.0) if self.jitter else base
