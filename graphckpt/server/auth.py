"""Bearer tokens, each scoped to a namespace.

Tokens come from a file (one ``TOKEN NAMESPACE`` pair per line; ``#`` starts a comment) or from an environment
variable (``TOKEN=NAMESPACE`` pairs separated by commas). A request's namespace is its token's; without configured
tokens every request is in the namespace ``""``, which sees every thread (the single-user, loopback-only mode).

A namespace ``ns`` stores its threads as ``ns/ID`` (API ids never contain ``/``: it is the path separator), so
another namespace's thread cannot even be named: it is 404 for every endpoint, never 403.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from starlette.requests import HTTPConnection

from graphckpt.server.errors import ApiError

__all__ = ["Tokens", "api_id", "store_id"]


@dataclass(frozen=True)
class Tokens:
    """Token -> namespace. Empty: no authentication (namespace ``""``)."""

    namespaces: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, file: str | os.PathLike[str] | None = None, env: str | None = None) -> Tokens:
        """Tokens from ``file`` and from the environment variable named ``env`` (both optional)."""
        found: dict[str, str] = {}
        if file is not None:
            for number, line in enumerate(Path(file).read_text(encoding="utf-8").splitlines(), 1):
                text = line.split("#", 1)[0].strip()
                if not text:
                    continue
                parts = text.split()
                if len(parts) != 2:
                    raise ValueError(f"token file {str(file)!r} line {number}: expected 'TOKEN NAMESPACE'")
                found[parts[0]] = _namespace(parts[1], f"token file {str(file)!r} line {number}")
        if env is not None and os.environ.get(env):
            for item in os.environ[env].split(","):
                token, sep, namespace = item.strip().partition("=")
                if not sep or not token:
                    raise ValueError(f"${env}: expected TOKEN=NAMESPACE pairs separated by commas")
                found[token] = _namespace(namespace, f"${env}")
        return cls(found)

    def __bool__(self) -> bool:
        return bool(self.namespaces)

    def namespace(self, conn: HTTPConnection) -> str:
        """The namespace of the request's ``Authorization: Bearer`` token; 401 without a valid one."""
        if not self.namespaces:
            return ""
        scheme, _, token = conn.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and token:
            for known, namespace in self.namespaces.items():
                if hmac.compare_digest(known.encode(), token.strip().encode()):
                    return namespace
        raise ApiError(401, "Unauthorized", "a valid 'Authorization: Bearer TOKEN' header is required")


def _namespace(name: str, where: str) -> str:
    if not name or "/" in name or not name.isprintable():
        raise ValueError(f"{where}: namespace {name!r} must be non-empty printable text without '/'")
    return name


def store_id(namespace: str, thread_id: str) -> str:
    """The stored id of the API thread id ``thread_id`` in ``namespace``."""
    return f"{namespace}/{thread_id}" if namespace else thread_id


def api_id(namespace: str, stored: str) -> str | None:
    """The API id of the stored id ``stored`` as ``namespace`` sees it, or ``None`` when it is not its thread."""
    if not namespace:
        return stored
    prefix = namespace + "/"
    return stored[len(prefix) :] if stored.startswith(prefix) else None
