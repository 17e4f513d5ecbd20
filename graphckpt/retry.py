"""Retrying a node: the policy, the backoff it computes, and which errors are worth retrying by default."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["RetryPolicy", "default_retry_on"]

_BUGS: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    ArithmeticError,
    ImportError,
    LookupError,
    NameError,
    SyntaxError,
    RuntimeError,
    ReferenceError,
    StopIteration,
    StopAsyncIteration,
    OSError,
)
"""Errors that say the code or its input is wrong (or, for ``OSError``, the machine): another attempt fails the same
way. ``ConnectionError`` is an ``OSError`` but transient, and is checked first."""


def default_retry_on(exc: BaseException) -> bool:
    """The default of :attr:`RetryPolicy.retry_on`, the same verdicts as LangGraph's default.

    Retried: ``ConnectionError`` (refused, reset, aborted), graphckpt's own
    :class:`~graphckpt.errors.NodeTimeoutError` (the node's ``timeout`` ran out: the classic transient failure), an
    HTTP error of ``httpx`` or ``requests`` whose response status is 5xx (a ``requests`` error without a response
    too), and any error not listed below. Not retried: ``ValueError``, ``TypeError``, ``ArithmeticError``,
    ``ImportError``, ``LookupError``, ``NameError``, ``SyntaxError``, ``RuntimeError``, ``ReferenceError``,
    ``StopIteration``, ``StopAsyncIteration`` and other ``OSError`` s (a plain ``TimeoutError`` among them, as in
    LangGraph), and HTTP 4xx errors. httpx and requests are recognized without importing them."""
    from graphckpt.errors import NodeTimeoutError

    if isinstance(exc, (ConnectionError, NodeTimeoutError)):
        return True
    status = _http_status(exc)
    if status is not None:
        return status is _NO_RESPONSE or 500 <= status < 600
    return not isinstance(exc, _BUGS)


_NO_RESPONSE: Any = -1


def _http_status(exc: BaseException) -> int | None:
    """The response status of an ``httpx.HTTPStatusError`` or a ``requests.HTTPError`` (``_NO_RESPONSE`` for one
    of requests without a response); ``None`` for any other error."""
    for cls in type(exc).__mro__:
        module, name = cls.__module__.split(".")[0], cls.__name__
        if (module, name) == ("httpx", "HTTPStatusError") or (module, name) == ("requests", "HTTPError"):
            response = getattr(exc, "response", None)
            status = getattr(response, "status_code", None)
            if isinstance(status, int):
                return status
            return _NO_RESPONSE if module == "requests" else None
    return None


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
    retry_on: type[BaseException] | tuple[type[BaseException], ...] | Callable[[BaseException], bool] = default_retry_on
    """Exception types to retry, or a predicate deciding per exception. The default, :func:`default_retry_on`,
    retries transient errors (connections, timeouts of the node, HTTP 5xx) and not the ones that are bugs
    (``ValueError``, ``TypeError``, ``KeyError``, ...): pass ``retry_on=Exception`` to retry everything."""

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
