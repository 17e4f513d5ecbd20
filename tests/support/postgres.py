"""The PostgreSQL server the tests use (127.0.0.1:5432, database ``test``): its DSN and whether it is reachable.

Tests that need it call :func:`require_postgres`, which fails under CI (``CI`` set) and skips elsewhere; each test
works in a fresh schema of its own (the ``pg_schema`` fixtures of ``conftest.py``), so parallel tests never collide.
"""

from __future__ import annotations

import os
import socket

import pytest

__all__ = ["PG_DSN", "postgres_reachable", "require_postgres"]

PG_DSN = os.environ.get("GRAPHCKPT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def postgres_reachable(host: str = "127.0.0.1", port: int = 5432) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def require_postgres() -> None:
    """Fail under CI, skip elsewhere, when the PostgreSQL server is not reachable."""
    if postgres_reachable():
        return
    message = "PostgreSQL is not reachable on 127.0.0.1:5432"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI needs it (.ci/run starts it)")
    pytest.skip(f"{message} (start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start)")
