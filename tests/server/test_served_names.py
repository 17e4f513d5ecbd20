"""A graph served as ``NAME=MODULE:ATTR`` owns the threads ``graphckpt run MODULE:ATTR`` made: the thread's recorded
graph (``MODULE:ATTR``) is an alias of ``NAME``, so the server reads, resumes and recovers it, and its UI page is not
read-only."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable

import httpx
from support.serving import Served, wait_for

COUNTER = "support.server_graphs:counter"


def _cli_run(server: Served, thread_id: str, limit: int, **env: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "graphckpt", "--db", server.db, "run", COUNTER, "-q", "--thread", thread_id]
    argv += ["--input", f'{{"limit": {limit}}}']
    with open(server.tmp_path / "cli.log", "ab") as log:
        return subprocess.Popen(
            argv, env={**server.env, **env}, stdout=log, stderr=subprocess.STDOUT, cwd=server.tmp_path
        )


def test_cli_threads_are_served_resumed_and_recovered_by_the_named_graph(serve: Callable[..., Served]) -> None:
    from langgraph_sdk import get_sync_client

    server = serve([f"agent={COUNTER}"])
    client = get_sync_client(url=server.url, timeout=httpx.Timeout(30.0))
    try:
        assert _cli_run(server, "cli-done", 2).wait(60) == 0
        state = client.threads.get_state("cli-done")
        assert state["values"]["n"] == 2
        page = httpx.get(f"{server.url}/ui/threads/cli-done", timeout=10)
        assert page.status_code == 200 and "Read-only" not in page.text
        # resumed (a new turn) through the name it is served as
        assert client.runs.wait("cli-done", "agent", input={"limit": 4})["n"] == 4

        # a CLI run killed mid-way: the server's recovery takes the crashed thread over and finishes it
        cli = _cli_run(server, "cli-crash", 6, SERVE_TEST_DELAY="0.2")
        wait_for(lambda: _step(client, "cli-crash") >= 2, 30, what="the CLI run's second step")
        cli.send_signal(signal.SIGKILL)
        cli.wait(10)

        def finished() -> bool:
            s = client.threads.get_state("cli-crash")
            return s["values"]["n"] == 6 and not s["next"]

        wait_for(finished, 60, interval=0.1, what="the crashed CLI thread recovered by the server")
        runs = client.runs.list("cli-crash")
        assert runs and runs[0]["status"] == "success"
    finally:
        client.close()


def _step(client: object, thread_id: str) -> int:
    try:
        state = client.threads.get_state(thread_id)  # type: ignore[attr-defined]
    except httpx.HTTPStatusError:
        return -1
    return int(state["metadata"]["step"] if state["metadata"] else -1)
