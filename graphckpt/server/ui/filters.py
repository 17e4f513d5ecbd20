"""The threads list's filters: a status (``waiting``: the interrupted threads a durable wait holds), a graph and a
free-text search over the thread id and its metadata, and the statuses the list can offer."""

from __future__ import annotations

import json
from collections.abc import Sequence

from graphckpt.checkpoint import ThreadInfo
from graphckpt.plain import graph_of, metadata_of, to_jsonable

__all__ = ["kept", "statuses_of"]


def statuses_of(infos: Sequence[ThreadInfo]) -> list[str]:
    """The statuses of ``infos``, sorted, with ``waiting`` when a durable wait holds one of them."""
    return sorted({str(i.status) for i in infos} | ({"waiting"} if any(i.waiting for i in infos) else set()))


def kept(info: ThreadInfo, status: str | None, graph: str | None, q: str | None) -> bool:
    """Whether the list shows ``info`` under these filters (each ``None`` or empty: no filter)."""
    if status == "waiting":
        if not info.waiting:
            return False
    elif status and info.status != status:
        return False
    if graph and graph_of(metadata_of(info)) != graph:
        return False
    if q:
        needle = q.lower()
        meta = json.dumps(to_jsonable(dict(metadata_of(info) or {})), ensure_ascii=False, sort_keys=True)
        hay = f"{info.thread_id} {meta}".lower()  # as JSON: a search for "team": "t1" finds that tag
        return needle in hay
    return True
