"""The limits of the served process (``graphckpt serve``): its uvicorn configuration and the connection protocol that
drops a client which opens a connection and never sends a request.

Bounds, with the defaults: at most :data:`MAX_CONNECTIONS` connections and tasks at once (uvicorn answers 503
beyond); a request's head must arrive within :data:`HEAD_TIMEOUT` seconds of the connection (else it is closed,
whether nothing or half a head came); an idle kept-alive connection closes after :data:`KEEP_ALIVE` seconds; a
request head is at most :data:`MAX_HEAD` bytes (h11 refuses a longer one with 431/400). Bodies are bounded by the
app (``--max-body``), streams by their stall timeout.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn import Config
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HEAD_TIMEOUT", "KEEP_ALIVE", "MAX_CONNECTIONS", "MAX_HEAD", "HeadTimeoutProtocol", "uvicorn_config"]

MAX_CONNECTIONS = 2000
HEAD_TIMEOUT = 10.0
KEEP_ALIVE = 5
MAX_HEAD = 64 << 10


class HeadTimeoutProtocol(H11Protocol):
    """h11, plus: a connection whose first request head has not arrived within ``HEAD_TIMEOUT`` is closed."""

    head_timeout = HEAD_TIMEOUT

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.head_timer = asyncio.get_running_loop().call_later(self.head_timeout, self.head_overdue)

    def head_overdue(self) -> None:
        if getattr(self, "cycle", None) is None and not self.transport.is_closing():  # no request head yet
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.head_timer.cancel()
        super().connection_lost(exc)


def uvicorn_config(
    app: Any,
    host: str,
    port: int,
    *,
    graceful_timeout: float,
    max_connections: int = MAX_CONNECTIONS,
    head_timeout: float = HEAD_TIMEOUT,
) -> Config:
    """The uvicorn configuration of ``graphckpt serve`` with the bounds above."""
    protocol = type("Protocol", (HeadTimeoutProtocol,), {"head_timeout": head_timeout})
    return Config(
        app,
        host=host,
        port=port,
        http=protocol,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=graceful_timeout,  # type: ignore[arg-type]  # uvicorn waits a float fine
        limit_concurrency=max_connections,
        timeout_keep_alive=KEEP_ALIVE,
        h11_max_incomplete_event_size=MAX_HEAD,
    )
