"""Fair claiming between namespaces through the real server (issue 24 M8): one token's flood of queued runs does
not make another token's run wait behind all of it."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Callable

import httpx
import pytest

pytest.importorskip("uvicorn")

from support.serving import Served, wait_for

from graphckpt.savers.sqlite import SqliteSaver

TOKENS = {"GRAPHCKPT_TOKENS": "tok-a=alice,tok-b=bob", "SERVE_TEST_DELAY": "0.5"}
COUNTER = "support.server_graphs:counter"


def _runs_by_start(db: str) -> list[str]:
    """Thread ids of the runs that were claimed, in the order they started."""

    async def read() -> list[str]:
        saver = SqliteSaver(db)
        try:
            runs = [r for r in await saver.list_runs() if r.started_at is not None]
        finally:
            await saver.aclose()
        return [r.thread_id for r in sorted(runs, key=lambda r: (r.started_at, r.run_id))]

    return asyncio.run(read())


def test_one_tokens_150_queued_runs_do_not_delay_anothers_run(serve: Callable[..., Served]) -> None:
    """Alice queues 150 runs, then Bob one; a worker with 4 slots starts: Bob's is the second run claimed (before,
    it was the 151st)."""
    server = serve([COUNTER], env=TOKENS, args=["--no-workers", "--queue-limit", "200"])
    alice = httpx.Client(base_url=server.url, timeout=60, headers={"Authorization": "Bearer tok-a"})
    bob = httpx.Client(base_url=server.url, timeout=60, headers={"Authorization": "Bearer tok-b"})
    with alice, bob:
        for i in range(150):
            alice.post(f"/threads/a{i}/runs", json={"input": {"limit": 1}}).raise_for_status()
        run = bob.post("/threads/b0/runs", json={"input": {"limit": 1}}).json()
        argv = [sys.executable, "-m", "graphckpt", "--db", server.db, "worker", "--graph", COUNTER]
        with open(server.tmp_path / "worker.log", "ab") as log:
            worker = subprocess.Popen(
                [*argv, "--concurrency", "4"], env=server.env, stdout=log, stderr=subprocess.STDOUT
            )
        try:
            wait_for(
                lambda: bob.get(f"/threads/b0/runs/{run['run_id']}").json()["status"] == "success",
                timeout=60,
                interval=0.2,
                what="bob's run to succeed",
            )
        finally:
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(30) == 0
    started = _runs_by_start(server.db)
    assert started[:1] == ["alice/a0"]  # nothing runs yet: the oldest
    assert started[1] == "bob/b0", started[:5]  # alice has a running run, bob none
