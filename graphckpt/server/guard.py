"""The server's front door: what a request must be before any route sees it (an ASGI middleware, :class:`Guard`).

A web page the user happens to browse can make their browser send requests to a server on their own machine, and a
page on a domain that rebinds to 127.0.0.1 can even read the answers. So, before routing:

- the ``Host`` header must name this server: a loopback name (``localhost``, ``127.0.0.1``, ``[::1]``, any port) or
  a name the user allowed (``--allow-host``). This check is on without tokens (where the network is the only
  protection) and whenever names were allowed; a refused host is 400 (a rebinding page never reads an answer);
- a state-changing request (``POST``, ``PUT``, ``PATCH``, ``DELETE``) that sends an ``Origin`` must send this
  server's own origin (or a configured CORS origin): 403 otherwise;
- a state-changing request to the JSON API with a body must say ``Content-Type: application/json`` (JSON lines,
  ``application/x-ndjson``, for an import; 415 otherwise): a page can post ``text/plain`` or a form without a CORS
  preflight, never JSON. A write without a body (a cancel, a delete) needs no type: a browser sends ``Origin``
  with it, checked above. The UI's form posts carry a CSRF
  token instead (:mod:`~graphckpt.server.ui.csrf`);
- an id in the path holds no control character (422 naming the field) and, for the JSON API's thread ids, obeys
  the rules a body's ``thread_id`` does (at most 512 characters, no whitespace).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

__all__ = ["LOOPBACK_NAMES", "MAX_ID", "Guard", "host_name", "path_problem"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
MAX_ID = 512
"""Longest id a path may carry (as a body's ``thread_id``)."""
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON_TYPES = frozenset({"application/json", "application/x-ndjson", "application/jsonl"})
"""What a write's body may say it is (JSON lines for ``POST /threads/import``): none is a type a page can post
without a CORS preflight."""


def host_name(host: str) -> str:
    """The name of a ``Host`` header's value (``[::1]:8123`` -> ``::1``, ``Example.com:80`` -> ``example.com``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def _field(segments: list[str], index: int) -> str:
    """The name of the path segment ``index`` of ``/threads/{thread_id}/runs/{run_id}`` and the like."""
    names = {("threads", 1): "thread_id", ("assistants", 1): "assistant_id", ("runs", 3): "run_id"}
    head = segments[0] if segments else ""
    if index == 3 and len(segments) > 2 and segments[2] == "runs":
        head = "runs"
    return "path." + names.get((head, index), "path")


def path_problem(path: str) -> str | None:
    """What is wrong with the (decoded) path, or ``None``: a control character anywhere; for the JSON API's ids, one
    longer than :data:`MAX_ID` or holding whitespace."""
    segments = path.strip("/").split("/")
    for index, segment in enumerate(segments):
        if any(ord(c) < 32 or ord(c) == 127 for c in segment):
            return f"{_field(segments, index)}: control characters are not allowed in ids"
    if segments[0] in ("threads", "assistants") and len(segments) > 1 and segments[0] != "ui":
        ident = segments[1]
        if len(ident) > MAX_ID:
            return f"{_field(segments, 1)}: at most {MAX_ID} characters"
        if any(c.isspace() for c in ident):
            return f"{_field(segments, 1)}: whitespace is not allowed in ids"
    return None


class Guard:
    """The checks above around ``app``. ``check_host``: refuse a ``Host`` outside loopback and ``allowed_hosts``;
    ``cors_origins``: origins allowed besides the server's own; ``ui_prefix``: where the UI (form posts) lives."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        check_host: bool,
        allowed_hosts: Iterable[str] = (),
        cors_origins: Iterable[str] = (),
        ui_prefix: str = "/ui",
    ) -> None:
        self.app = app
        self.check_host = check_host
        self.hosts = LOOPBACK_NAMES | {host_name(h) for h in allowed_hosts}
        self.origins = {o.rstrip("/").lower() for o in cors_origins}
        self.ui_prefix = ui_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, error, message = refusal
        body = json.dumps({"error": error, "message": message}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def refusal(self, scope: Scope) -> tuple[int, str, str] | None:
        """``(status, error, message)`` when the request is refused, else ``None``."""
        headers: dict[str, str] = {}
        for key, value in scope.get("headers", []):
            headers.setdefault(key.decode("latin-1").lower(), value.decode("latin-1"))
        host = headers.get("host")
        if self.check_host and host is not None and host_name(host) not in self.hosts:
            return (
                400,
                "HostNotAllowed",
                f"the Host {host[:100]!r} is not this server's: it answers loopback names and the names given "
                "with --allow-host",
            )
        path: str = scope.get("path", "")
        problem = path_problem(path)
        if problem is not None:
            return 422, "ValidationError", problem
        if scope.get("method", "GET") not in WRITES:
            return None
        origin = headers.get("origin")
        if origin is not None and not self.same_origin(origin, host, scope):
            return (
                403,
                "CrossOrigin",
                f"a request from the origin {origin[:100]!r} may not change anything here (not this server's origin)",
            )
        if path == self.ui_prefix or path.startswith(self.ui_prefix + "/"):
            return None  # the UI's forms: a CSRF token each
        kind = headers.get("content-type")
        has_body = headers.get("content-length", "0") not in ("", "0") or "transfer-encoding" in headers
        media = (kind or "").partition(";")[0].strip().lower()
        if (kind is not None or has_body) and media not in JSON_TYPES:
            return (
                415,
                "UnsupportedMediaType",
                f"the request body must be 'Content-Type: application/json', not {(kind or 'none')[:100]!r}",
            )
        return None

    def same_origin(self, origin: str, host: str | None, scope: Scope) -> bool:
        origin = origin.strip().rstrip("/").lower()
        if origin in self.origins:
            return True
        if host is None or origin == "null":
            return False
        parts = urlsplit(origin)
        scheme = scope.get("scheme", "http")
        return parts.scheme == scheme and parts.netloc == host.strip().lower()
