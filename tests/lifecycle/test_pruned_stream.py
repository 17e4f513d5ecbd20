"""An SSE client reconnecting with a ``Last-Event-ID`` whose event was pruned gets ``event: stream.reset`` with
``"lost": "pruned"`` and the first id still available, then the events still stored: never a silent gap.

The old checkpoints (and their events) are removed by a real retention prune (``keep_last``) of the SQLite file of a
real ``graphckpt serve``, from another process's saver as ``graphckpt prune --keep-last`` would."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable

import httpx
from support.serving import Served, durable, read_events

from graphckpt.prune import PruneReport, prune
from graphckpt.savers.sqlite import SqliteSaver


async def _keep_last(db: str, keep: int) -> PruneReport:
    async with SqliteSaver(db) as saver:
        return await prune(saver, keep_last=keep)


def test_a_pruned_last_event_id_gets_a_reset_naming_the_first_available_id(serve: Callable[..., Served]) -> None:
    server = serve(["support.server_graphs:counter"])
    with httpx.Client(base_url=server.url, timeout=30) as client:
        response = client.post("/threads/p/runs/wait", json={"input": {"limit": 8}})
        assert response.status_code == 200, response.text
        # No stream is read before the delete: the server shares reads of the log between streams until its event
        # counter moves, which an out-of-band DELETE does not move.
        with sqlite3.connect(server.db) as conn:
            rows = conn.execute("SELECT step, seq FROM events WHERE thread_id = 'p' ORDER BY step, seq").fetchall()
            (head,) = conn.execute("SELECT head_step FROM threads WHERE thread_id = 'p'").fetchone()
        report = asyncio.run(_keep_last(server.db, head - 3))  # the checkpoints under step 4 go, with their events
        assert report.threads == ["p"] and report.checkpoints == 4
        old = [f"p:{step}:{seq}" for step, seq in rows if step == 2][-1]
        whole = durable(read_events(client, "/threads/p/stream"))
        assert whole[0][0] == "p:4:0" and len(whole) == len([r for r in rows if r[0] >= 4])
        left = whole
        events = read_events(client, "/threads/p/stream", last_id=old)
        reset = events[0]
        assert reset[0] is None and reset[1] == "stream.reset", events[:2]
        assert reset[2]["lost"] == "pruned" and reset[2]["last_event_id"] == old
        assert reset[2]["first_available"] == left[0][0] and "pruned" in reset[2]["reason"]
        assert durable(events) == left  # said so, then everything still stored, from its first event
        kept = read_events(client, "/threads/p/stream", last_id=left[2][0])
        assert not any(k == "stream.reset" for _, k, _ in kept) and durable(kept) == left[3:]
        never = read_events(client, "/threads/p/stream", last_id="p:5:999")
        assert never[0][1] == "stream.reset" and "lost" not in never[0][2]
        assert never[0][2]["first_available"] == left[0][0]
