"""LangGraph's ``messages`` stream mode (not ``messages-tuple``): a model's answer as whole messages so far.

For each message (a model call's answer, by its id) a stream in this mode sends ``messages/metadata`` once
(``{id: {"metadata": ...}}``: node, step, thread, task), then ``messages/partial`` after each piece with the message
so far (``[{"type": "ai", "content": text so far, "id": ...}]``), and ``messages/complete`` with the whole message
when its task has finished (or its step has been committed). A subgraph's events carry its namespace as the other
modes do (``messages/partial|node:task_id``). The pieces are the same ephemeral ``messages`` events
``messages-tuple`` sends one by one; the assembly belongs to one stream (a reconnect that continues after a piece
assembles from there on: its first ``messages/partial`` holds the rest of the message only)."""

from __future__ import annotations

from typing import Any

from sse_starlette import ServerSentEvent

from graphckpt.server.events.render import dump

__all__ = ["PARTIAL", "TUPLE", "MessageAssembly"]

PARTIAL = "messages/partial"
"""The mode marker of a stream that asked for LangGraph's ``messages`` (see :func:`~.streams.parse_modes`)."""
TUPLE = "messages/tuple"
"""The mode marker of a stream that asked for ``messages-tuple``."""

_TYPES = {"assistant": "ai", "user": "human", "system": "system", "tool": "tool"}


class MessageAssembly:
    """The messages one stream is assembling: text so far, by message id."""

    def __init__(self) -> None:
        self.open: dict[str, tuple[dict[str, Any], str, str]] = {}
        """Message id -> (the message so far, its task id, its event-name suffix)."""

    def add(self, chunk: Any, metadata: Any, eid: str, suffix: str) -> bytes:
        """A piece: ``messages/metadata`` when its message is new, then ``messages/partial``."""
        if not isinstance(chunk, dict):
            return b""
        mid = str(chunk.get("id") or "")
        out = bytearray()
        found = self.open.get(mid)
        if found is None:
            meta = metadata if isinstance(metadata, dict) else {}
            message = {k: v for k, v in chunk.items() if k != "type"}
            message["type"] = _TYPES.get(str(chunk.get("role")), "ai")
            message["content"] = ""
            found = self.open[mid] = (message, str(meta.get("task_id") or ""), suffix)
            data = dump({mid: {"metadata": meta}})
            out += ServerSentEvent(id=eid, event=f"messages/metadata{suffix}", data=data).encode()
        message = found[0]
        piece = chunk.get("content")
        message["content"] += piece if isinstance(piece, str) else ""
        out += ServerSentEvent(id=eid, event=f"{PARTIAL}{suffix}", data=dump([message])).encode()
        return bytes(out)

    def close(self, kind: str, payload: Any) -> bytes:
        """``messages/complete`` for the messages a durable event of ``kind`` ends: a ``task.finished`` those of
        its task, a ``checkpoint`` or a run's end every one still open."""
        if not self.open:
            return b""
        task = payload.get("task_id") if kind == "task.finished" and isinstance(payload, dict) else None
        if kind == "task.finished" and not task:
            return b""
        if kind not in ("task.finished", "checkpoint") and not kind.startswith("run."):
            return b""
        out = bytearray()
        for mid, (message, task_id, suffix) in list(self.open.items()):
            if task is None or task_id == task:
                out += ServerSentEvent(event=f"messages/complete{suffix}", data=dump([message])).encode()
                del self.open[mid]
        return bytes(out)
