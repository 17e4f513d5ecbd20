"""``graphckpt serve`` on an encrypted database (keys from ``GRAPHCKPT_ENCRYPTION_KEYS``, as a deployment gives
them): runs, interrupts, answers and the SSE stream work as without encryption, the stream carries the marker
decrypted, the database files never hold it, and an export stays encrypted unless ``?decrypt=true``."""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Callable
from pathlib import Path

import httpx
from support.sealed_world import MARKER, build
from support.serving import Served, read_events

from graphckpt.encryption import Keyring
from graphckpt.savers.sqlite import SqliteSaver
from graphckpt.transfer import import_thread


def test_a_served_encrypted_database_streams_decrypted_and_stores_ciphertext(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    key = os.urandom(32)
    keys = f"k1:{base64.b64encode(key).decode()}"
    server = serve(["sealed=support.sealed_world:graph"], env={"GRAPHCKPT_ENCRYPTION_KEYS": keys})
    with httpx.Client(base_url=server.url, timeout=60) as c:
        c.post("/threads/t/runs/wait", json={"assistant_id": "sealed", "input": {}}).raise_for_status()
        state = c.get("/threads/t/state").json()
        assert MARKER in str(state["values"]["doc"]) and state["interrupts"]
        events = read_events(c, "/threads/t/stream")
        finished = [data for _, kind, data in events if kind in ("updates", "task.finished")]
        assert any(MARKER in str(data) for data in finished), events
        answered = c.post("/threads/t/answer", json={"answer": f"ok {MARKER}"})
        assert answered.status_code == 202
        c.get(f"/threads/t/runs/{answered.json()['run_id']}/join").raise_for_status()
        assert c.get("/threads/t/state").json()["values"]["answer"] == f"ok {MARKER}"
        sealed = c.get("/threads/t/export")  # stays encrypted
        assert sealed.status_code == 200 and MARKER not in sealed.text and '"kind":"checkpoint"' in sealed.text
        decrypted = c.get("/threads/t/export", params={"decrypt": "true"})
        assert decrypted.status_code == 200 and MARKER in decrypted.text
    on_disk = b"".join(p.read_bytes() for p in tmp_path.glob("serve.db*"))
    assert on_disk and MARKER.encode() not in on_disk
    asyncio.run(_import_elsewhere(tmp_path / "other.db", Keyring({"k1": key}), sealed.text))


async def _import_elsewhere(path: Path, ring: Keyring, export: str) -> None:
    """The sealed export imports into another store holding the key, and reads as the served thread."""
    async with SqliteSaver(path, encryption=ring) as saver:
        assert await import_thread(saver, export.splitlines()) == "t"
        assert (await build(saver).aget_state("t")).values.answer == f"ok {MARKER}"
