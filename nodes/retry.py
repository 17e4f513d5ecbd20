"""The retry policy for model calls, and a per-process counter of the model calls actually made.

Model calls are retried *inside* the journaled effect, so the journal only ever holds the final answer. The policy is
explicit: exponential backoff with jitter, a server's ``Retry-After`` honoured up to a bound, and an injectable
``sleep`` and ``random`` so tests can check the delays without waiting for them.
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

__all__ = ["RETRYABLE_STATUSES", "LLMCallCounter", "LLMRetry", "is_retryable_status", "llm_calls", "parse_retry_after"]

RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""HTTP statuses worth retrying besides every 5xx. Any other 4xx fails at once."""


def is_retryable_status(status: int) -> bool:
    """True for 408, 409, 429 and 5xx."""
    return status in RETRYABLE_STATUSES or status >= 500


@dataclass(frozen=True)
class LLMRetry:
    """How a model call is retried after 429, 5xx, a timeout or a connection error.

    Retry ``n`` (1-based) waits ``min(max_delay, initial_delay * multiplier ** (n - 1))``, reduced by a random
    fraction of at most ``jitter``. When the response carries ``Retry-After`` (or ``retry-after-ms``), that delay is
    used instead; a server asking for more than ``max_retry_after`` seconds is not retried at all.
    """

    max_retries: int = 4
    """Retries after the first attempt; 0 disables retrying."""
    initial_delay: float = 0.5
    """Seconds before the first retry (before jitter)."""
    multiplier: float = 2.0
    """Growth of the delay per retry."""
    max_delay: float = 30.0
    """Upper bound of a computed delay."""
    jitter: float = 0.25
    """Up to this fraction of the delay is randomly removed, so many clients do not retry in lockstep."""
    max_retry_after: float = 60.0
    """The longest server-requested wait that is honoured; longer ones fail the call."""
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, repr=False, compare=False)
    """How to wait (patch in tests)."""
    random: Callable[[], float] = field(default=random.random, repr=False, compare=False)
    """A number in [0, 1) for the jitter (patch in tests)."""

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter must be within [0, 1], got {self.jitter}")

    def backoff(self, retry: int) -> float:
        """The computed delay in seconds before retry number ``retry`` (1-based), jitter applied."""
        base = min(self.max_delay, self.initial_delay * self.multiplier ** (retry - 1))
        return max(0.0, base * (1 - self.jitter * self.random()))

    def delay(self, retry: int, retry_after: float | None) -> float | None:
        """The delay before retry ``retry``: ``retry_after`` when the server sent one, else :meth:`backoff`.

        ``None`` means "do not retry": the server asked for a wait longer than ``max_retry_after``.
        """
        if retry_after is None:
            return self.backoff(retry)
        if retry_after > self.max_retry_after:
            return None
        return max(0.0, retry_after)


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait as asked by ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date); ``None`` if absent.

    ``headers`` must be case-insensitive (``httpx.Headers``) or use lower-case names.
    """
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            import email.utils  # here: an HTTP date is rare, and the module costs start-up time (bench W5C)

            parsed = email.utils.parsedate_tz(value)
            if parsed is None:
                continue
            seconds = email.utils.mktime_tz(parsed) - time.time()
        if math.isfinite(seconds):
            return max(0.0, seconds)
        return math.inf
    return None


class LLMCallCounter:
    """Counts the model calls this process really made: calls answered from the journal are not counted.

    ``calls`` counts model calls (one per journaled effect that ran), ``requests`` the HTTP requests they took
    (retries included; an offline call counts one), and the token counters add up the usage of successful calls.
    Thread-safe. The demo reads :data:`llm_calls` to show "0 new model calls" on resume.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0
        self.requests = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    def record_call(self) -> None:
        """A model call started (its effect was not in the journal)."""
        with self._lock:
            self.calls += 1

    def record_request(self) -> None:
        """One request was sent to the model (first attempt or a retry)."""
        with self._lock:
            self.requests += 1

    def record_usage(self, prompt_tokens: int, completion_tokens: int) -> None:
        """A call succeeded with this usage."""
        with self._lock:
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens

    def reset(self) -> None:
        """Set every counter back to 0."""
        with self._lock:
            self.calls = self.requests = self.prompt_tokens = self.completion_tokens = 0

    def __repr__(self) -> str:
        return (
            f"LLMCallCounter(calls={self.calls}, requests={self.requests}, "
            f"prompt_tokens={self.prompt_tokens}, completion_tokens={self.completion_tokens})"
        )


llm_calls = LLMCallCounter()
"""The process-wide counter every ``chat_node`` / ``ChatModel`` call updates."""
