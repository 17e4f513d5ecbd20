"""Errors across the HTTP boundary, in one place: every :class:`~graphckpt.errors.GraphckptError` class maps to a
status code, and every response body is ``{"error": class name, "message": one line}`` (the message the CLI prints).
No stack trace leaves the process: an unexpected exception is logged here and answered with a bare 500.

Two points of the mapping are deliberate: a thread of another namespace is :class:`ThreadNotFoundError` (404, never
403: it does not exist for that token), and a stored value that cannot be decoded is a 500 naming the thread and the
checkpoint (the data is bad, not the request).
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from graphckpt import errors as e

__all__ = ["STATUS", "ApiError", "as_api", "error_response", "handle_error", "handle_http", "status_of"]

logger = logging.getLogger("graphckpt.server")


class ApiError(Exception):
    """A request the server refuses by itself (not an engine error): ``status``, the error name and the message."""

    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error = error


STATUS: dict[type[e.GraphckptError], int] = {
    e.ThreadNotFoundError: 404,
    e.CheckpointNotFoundError: 404,
    e.ThreadConflictError: 409,
    e.ThreadStateError: 409,
    e.InvalidUpdateError: 422,
    e.InvalidArgumentError: 422,
    e.SerializationError: 422,
    e.GraphSetupError: 422,
    e.NodeError: 500,
    e.NodeTimeoutError: 500,
    e.RecursionLimitError: 500,
    e.CorruptCheckpointError: 500,
    e.StoreNotSetUpError: 503,
    e.SaverError: 503,
    e.SyncCallError: 500,
}
"""Status of each error class; a subclass takes its nearest listed ancestor's (``NodeError`` before
``InvalidUpdateError`` for :class:`InvalidNodeUpdateError`: a node's bad update is the run failing, not the
request)."""


def status_of(exc: e.GraphckptError) -> int:
    """The status for ``exc``: the first class of its MRO listed in :data:`STATUS` (500 when none is)."""
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def error_response(status: int, error: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": error, "message": " ".join(message.split())}, status_code=status, headers=headers)


async def handle_error(request: Request, exc: Exception) -> JSONResponse:
    """The exception handler of the app: known errors to their status, anything else to a logged 500."""
    if isinstance(exc, ApiError):
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return error_response(exc.status, exc.error, as_api(request, str(exc)), headers)
    if isinstance(exc, e.GraphckptError):
        return error_response(status_of(exc), type(exc).__name__, as_api(request, str(exc)))
    logger.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(500, "InternalError", "the server failed; its log has the details")


def as_api(request: Request, message: str) -> str:
    """``message`` with the caller's thread ids as the API names them (``'mine'``, not the stored
    ``'alice/mine'``)."""
    config = getattr(request.app.state, "config", None)
    namespaces = getattr(getattr(config, "tokens", None), "namespaces", None)
    if not namespaces:
        return message
    try:
        ns = config.tokens.namespace(request)  # type: ignore[union-attr]
    except ApiError:
        return message
    for quote in ("'", '"'):
        message = message.replace(f"{quote}{ns}/", quote)
    return message


async def handle_http(request: Request, exc: Any) -> JSONResponse:
    """Starlette's own refusals (unknown route 404, wrong method 405) in the same body shape."""
    assert isinstance(exc, HTTPException)
    names = {404: "NotFound", 405: "MethodNotAllowed", 413: "PayloadTooLarge"}
    return error_response(exc.status_code, names.get(exc.status_code, "HTTPError"), str(exc.detail))
