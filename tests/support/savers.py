"""Opening each saver kind on a fresh store: the matrix of ``conftest.py``'s ``saver`` fixtures, for tests that open
savers themselves (e.g. once per hypothesis example)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support.postgres import PG_DSN

__all__ = ["SAVER_KINDS", "open_saver"]

SAVER_KINDS = ["memory", "sqlite", "postgres"]


async def open_saver(kind: str, tmp_path: Path, schema: str | None = None) -> Any:
    if kind == "memory":
        from graphckpt.savers.memory import MemorySaver

        return MemorySaver()
    if kind == "sqlite":
        from graphckpt.savers.sqlite import SqliteSaver

        return SqliteSaver(tmp_path / "checkpoints.db")
    from graphckpt.savers.postgres import PostgresSaver

    return PostgresSaver(PG_DSN, schema=schema)
