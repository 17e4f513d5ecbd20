"""What every handler shares: the service and namespace of a request, the server's limits, JSON responses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse

from graphckpt.server.auth import Tokens
from graphckpt.server.service import Service

__all__ = ["Config", "json_response", "scope_of"]


@dataclass(frozen=True)
class Config:
    tokens: Tokens
    max_body: int = 1 << 20
    """Largest request body accepted, in bytes (413 beyond)."""
    keepalive: float = 15.0
    """Seconds between SSE keep-alive comments."""
    stall_timeout: float = 30.0
    """Seconds a stream's write may wait for a client that stopped reading before the client is dropped."""
    queue_limit: int = 100
    """Most runs one namespace may have queued or running at once (429 beyond)."""
    webhook_hosts: frozenset[str] = frozenset()
    """The hosts a run's ``webhook`` may name (see :mod:`graphckpt.server.webhooks`); any other is 422."""


def scope_of(conn: HTTPConnection) -> tuple[Service, str, Config]:
    """The service, the caller's namespace (401 without a valid token) and the config."""
    config: Config = conn.app.state.config
    return conn.app.state.service, config.tokens.namespace(conn), config


def json_response(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(data, status_code=status, headers=headers)
