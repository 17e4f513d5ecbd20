"""SSE streams of ``graphckpt serve``, against the real server (uvicorn in a subprocess) over loopback.

A stream is the thread's durable event log: each event's id is ``thread:step:seq``, and reconnecting with the last id
received (``Last-Event-ID``) continues exactly after it. So a stream cut anywhere, any number of times, concatenates
to the uncut stream, whether the cuts happen live or after the run, across a server SIGKILL and restart, and across a
fork (the fork's stream holds its source's events up to the fork point, with the source's ids).
"""

from __future__ import annotations

import asyncio
import resource
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.openai_server import FakeOpenAIServer
from support.serving import Served, SseFrames, durable, read_events, wait_for

Event = tuple[str | None, str, Any]


def _position(event_id: str | None) -> tuple[int, int]:
    assert event_id is not None
    _, step, seq = event_id.rsplit(":", 2)
    return int(step), int(seq)


def _run(client: httpx.Client, thread: str, body: dict[str, Any], *, wait: bool = True) -> dict[str, Any]:
    response = client.post(f"/threads/{thread}/runs/wait" if wait else f"/threads/{thread}/runs", json=body)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def _cut_every(client: httpx.Client, path: str, n: int, *, after: str | None = None) -> list[Event]:
    """Read ``n`` events, drop the connection, reconnect with the last id; until the stream ends."""
    got: list[Event] = []
    last = after
    while True:
        part = read_events(client, path, last_id=last, limit=n)
        assert not any(e[1] == "stream.reset" for e in part), part[:2]
        got += durable(part)
        if (part and part[-1][1] == "end") or not durable(part):
            return got
        last = got[-1][0]


def test_cut_streams_concatenate_to_the_uncut_stream_for_every_n(serve: Callable[..., Served]) -> None:
    server = serve(["support.server_graphs:counter"])
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert _run(client, "t", {"input": {"limit": 20}})["n"] == 20
        whole = read_events(client, "/threads/t/stream")
        assert whole[-1][1] == "end"
        reference = durable(whole)
        kinds = [k for _, k, _ in reference]
        assert kinds[:2] == ["run.started", "checkpoint"] and kinds[-1] == "run.done"
        assert kinds.count("task.finished") == 20 and kinds.count("checkpoint") == 21
        positions = [_position(i) for i, _, _ in reference]
        assert positions == sorted(set(positions))  # strictly increasing, no duplicate
        for n in range(1, len(reference) + 1):
            assert _cut_every(client, "/threads/t/stream", n) == reference, f"cut every {n}"
            first = durable(read_events(client, "/threads/t/stream", limit=n))
            rest = durable(read_events(client, "/threads/t/stream", last_id=first[-1][0]))
            assert first + rest == reference, f"cut once after {n}"


def test_cuts_while_the_run_is_live(serve: Callable[..., Served]) -> None:
    server = serve(["support.server_graphs:counter"], env={"SERVE_TEST_DELAY": "0.03"})
    with httpx.Client(base_url=server.url, timeout=30) as client:
        client.post("/threads", json={"thread_id": "live"}).raise_for_status()
        _run(client, "live", {"input": {"limit": 20}}, wait=False)
        got = _cut_every(client, "/threads/live/stream", 4)
        assert got == durable(read_events(client, "/threads/live/stream"))
        assert got[-1][1] == "run.done"


def test_a_run_stream_starts_at_the_run_and_ends_with_it(serve: Callable[..., Served]) -> None:
    server = serve(["support.server_graphs:counter"])
    with httpx.Client(base_url=server.url, timeout=30) as client:
        _run(client, "m", {"input": {"limit": 2}})
        events = read_events(client, "/threads/m/runs/stream", method="POST", json_body={"input": {"limit": 4}})
        assert events[0][1] == "metadata" and events[-1][1] == "end"
        kinds = [k for _, k, _ in durable(events)]
        assert kinds[0] == "run.started" and kinds[-1] == "run.done" and kinds.count("task.finished") == 2


def test_fork_stream_positions(serve: Callable[..., Served]) -> None:
    server = serve(["support.server_graphs:counter"])
    with httpx.Client(base_url=server.url, timeout=30) as client:
        _run(client, "src", {"input": {"limit": 8}})
        source = durable(read_events(client, "/threads/src/stream"))
        forked = client.post("/threads/src/fork", json={"step": 5, "new_thread_id": "br", "values": {"limit": 7}})
        assert forked.status_code == 201, forked.text
        assert forked.json()["thread_id"] == "br"
        client.post("/threads/br/runs/wait", json={"command": {}}).raise_for_status()
        whole = durable(read_events(client, "/threads/br/stream"))
        inherited = [e for e in source if _position(e[0])[0] <= 5]
        assert whole[: len(inherited)] == inherited  # the source's ids up to the fork point
        assert all(e[0] is not None and e[0].startswith("br:") for e in whole[len(inherited) :])
        for cut in range(1, len(inherited) + 1):  # any source id <= f is a position in the fork's stream
            tail = durable(read_events(client, "/threads/br/stream", last_id=inherited[cut - 1][0]))
            assert inherited[:cut] + tail == whole
        later = next(e for e in source if _position(e[0])[0] == 6)
        reset = read_events(client, "/threads/br/stream", last_id=later[0])
        assert reset[0][1] == "stream.reset" and "lineage" in reset[0][2]["reason"]
        assert durable(reset) == whole  # said so, then replayed from the start


def test_unknown_and_malformed_ids(serve: Callable[..., Served]) -> None:
    server = serve(["support.server_graphs:counter"])
    with httpx.Client(base_url=server.url, timeout=30) as client:
        _run(client, "u", {"input": {"limit": 2}})
        for bad in ("nonsense", "u:x:1", "u:1", ":1:2", "u:-1:0"):
            response = client.get("/threads/u/stream", headers={"Last-Event-ID": bad})
            assert response.status_code == 400 and response.json()["error"] == "BadRequest", bad
        for unknown in ("u:99:0", "other:1:0", "u:1:77"):
            events = read_events(client, "/threads/u/stream", last_id=unknown)
            assert events[0][1] == "stream.reset" and events[0][0] is None, unknown
        header_wins = read_events(client, "/threads/u/stream", last_id="u:1:1", params={"after": "u:0:0"})
        assert _position(durable(header_wins)[0][0]) > (1, 1)
        filtered = read_events(client, "/threads/u/stream", params={"kinds": "checkpoint,run.done"})
        assert {k for _, k, _ in durable(filtered)} == {"checkpoint", "run.done"}
        response = client.get("/threads/u/stream")
        assert response.headers["cache-control"] == "no-store"
        assert response.headers["x-accel-buffering"] == "no"
        assert response.headers.get("content-encoding", "identity") == "identity"


def test_a_16_way_fan_out_has_strictly_increasing_ids(serve: Callable[..., Served]) -> None:
    server = serve(["support.server_graphs:fanout"])
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for thread in ("f1", "f2"):
            assert sorted(_run(client, thread, {"input": {"width": 16}})["done"]) == list(range(16))
            events = durable(read_events(client, f"/threads/{thread}/stream"))
            positions = [_position(i) for i, _, _ in events]
            assert positions == sorted(positions) and len(set(positions)) == len(positions)
            assert all(i is not None and i.startswith(f"{thread}:") for i, _, _ in events)


def test_task_finished_events_carry_each_tasks_update(serve: Callable[..., Served]) -> None:
    """One ``task.finished`` per task, each with its update: a step's only task (whose update the event reads back
    from its checkpoint) and each of 16 Sends in one step (stored in the events), as over SSE and after a
    reconnect in the middle."""
    server = serve(["support.server_graphs:counter", "support.server_graphs:fanout"])
    with httpx.Client(base_url=server.url, timeout=30) as client:
        _run(client, "c", {"input": {"limit": 5}})
        finished = [e for e in durable(read_events(client, "/threads/c/stream")) if e[1] == "task.finished"]
        expected = [{"n": i, "log": [f"tick {i}"]} for i in range(1, 6)]
        assert [(e[2]["node"], e[2]["update"]) for e in finished] == [("tick", u) for u in expected]
        assert all("update_in" not in e[2] for e in finished)
        again = durable(
            read_events(client, "/threads/c/stream", last_id=finished[1][0], params={"kinds": "task.finished"})
        )
        assert [e[2]["update"] for e in again] == expected[2:]
        body = {"assistant_id": "support.server_graphs:fanout", "input": {"width": 16}}
        _run(client, "w", body)
        events = durable(read_events(client, "/threads/w/stream", params={"kinds": "task.finished"}))
        assert sorted(e[2]["update"]["done"][0] for e in events if e[2]["node"] == "leaf") == list(range(16))
        assert len({e[2]["task_id"] for e in events}) == len(events) == 16


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


class Opened:
    """Counts the streams whose response started; :attr:`all` is set when ``n`` did."""

    def __init__(self, n: int) -> None:
        self.n, self.count, self.all = n, 0, asyncio.Event()

    def add(self) -> None:
        self.count += 1
        if self.count >= self.n:
            self.all.set()


async def _subscribe(client: httpx.AsyncClient, path: str, opened: Opened) -> list[Event]:
    out: list[Event] = []
    async with client.stream("GET", path) as response:
        assert response.status_code == 200
        opened.add()
        frames = SseFrames()
        async for line in response.aiter_lines():
            if (event := frames.feed(line)) is not None:
                out.append(event)
    return out


def test_100_subscribers_each_get_every_event_once(serve: Callable[..., Served]) -> None:
    server = serve(["support.server_graphs:counter"], env={"SERVE_TEST_DELAY": "0.02"})
    assert server.proc is not None
    before = _rss_kib(server.proc.pid)

    async def main() -> tuple[list[list[Event]], list[Event]]:
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(base_url=server.url, timeout=60, limits=limits) as client:
            (await client.post("/threads", json={"thread_id": "many"})).raise_for_status()
            opened = Opened(100)
            subscribers = [asyncio.create_task(_subscribe(client, "/threads/many/stream", opened)) for _ in range(100)]
            await asyncio.wait_for(opened.all.wait(), 30)
            (await client.post("/threads/many/runs", json={"input": {"limit": 20}})).raise_for_status()
            results = await asyncio.wait_for(asyncio.gather(*subscribers), 60)
            reference = await _subscribe(client, "/threads/many/stream", Opened(1))
            return results, reference

    results, reference = asyncio.run(main())
    assert reference[-1][1] == "end" and len(reference) > 40
    for got in results:
        assert got == reference
    grown = _rss_kib(server.proc.pid) - before
    assert grown < 64 * 1024, f"server memory grew by {grown} KiB for 100 subscribers"


def test_sigterm_with_50_open_streams_exits_within_the_graceful_timeout(serve: Callable[..., Served]) -> None:
    server = serve(["support.server_graphs:counter"], args=["--graceful-timeout", "3"])
    import time

    async def main() -> list[list[Event]]:
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(base_url=server.url, timeout=30, limits=limits) as client:
            (await client.post("/threads", json={"thread_id": "open"})).raise_for_status()
            opened = Opened(50)
            streams = [asyncio.create_task(_subscribe(client, "/threads/open/stream", opened)) for _ in range(50)]
            await asyncio.wait_for(opened.all.wait(), 30)
            server.signal(15)
            return await asyncio.wait_for(asyncio.gather(*streams), 10)  # each ends cleanly: no exception

    start = time.monotonic()
    results = asyncio.run(main())
    assert server.proc is not None
    assert server.proc.wait(10) in (0, -15)  # uvicorn re-raises the signal once it has shut down
    assert time.monotonic() - start < 3 + 2.0
    assert len(results) == 50


def test_sigkill_mid_run_then_restart_continues_with_the_identical_tail(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    with FakeOpenAIServer() as model:
        env = {"OPENAI_BASE_URL": model.base_url, "SERVE_TEST_DELAY": "0.15", "GRAPHCKPT_LEASE_SECONDS": "1.5"}
        first = serve(["support.server_graphs:asking"], env=env)
        with httpx.Client(base_url=first.url, timeout=30) as client:
            client.post("/threads", json={"thread_id": "k"}).raise_for_status()
            _run(client, "k", {"input": {"limit": 10}}, wait=False)
            head = durable(read_events(client, "/threads/k/stream", limit=9))  # a few steps in
        first.kill()
        assert model.request_count < 10
        second = serve(["support.server_graphs:asking"], env=env, db=first.db)
        with httpx.Client(base_url=second.url, timeout=30) as client:
            tail = read_events(client, "/threads/k/stream", last_id=head[-1][0])
            assert tail[-1][1] == "end" and not any(k == "stream.reset" for _, k, _ in tail)
            whole = durable(read_events(client, "/threads/k/stream"))
            assert head + durable(tail) == whole
            state = client.get("/threads/k/state").json()
            assert state["values"]["n"] == 10 and state["status"] == "done"
        kinds = [k for _, k, _ in whole]
        assert kinds.count("run.started") == 2  # the takeover after the restart is on record
        wait_for(lambda: True, 0)
        assert model.request_count == 10  # no model call was made twice


def test_resource_limit_is_high_enough_for_the_stream_tests() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft >= 256


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_run_by_another_process_streams_live(
    serve: Callable[..., Served], tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    """The stream wakes on the store, not on this server's own runs: a fork resumed by ``graphckpt resume`` in
    another process streams live (SQLite: the change counter; PostgreSQL: LISTEN/NOTIFY)."""
    import subprocess
    import sys
    import threading

    db = str(tmp_path / "shared.db")
    if store == "postgres":
        schema = request.getfixturevalue("pg_schema_name")
        db = f"postgresql://postgres@127.0.0.1:5432/test?schema={schema}"
    server = serve(["support.server_graphs:counter"], db=db)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        _run(client, "o", {"input": {"limit": 3}})
        client.post("/threads/o/fork", json={"step": 1, "new_thread_id": "of", "values": {"limit": 6}})
        seen = durable(read_events(client, "/threads/of/stream", limit=5))  # the source's events, then the fork's
        assert seen[-1][0] == "of:2:0"

        def resume() -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "graphckpt", "--db", db, "resume", "of"],
                env=server.env,
                capture_output=True,
                text=True,
                timeout=60,
            )

        done: list[subprocess.CompletedProcess[str]] = []
        other = threading.Thread(target=lambda: done.append(resume()))
        other.start()
        tail = read_events(client, "/threads/of/stream", last_id=seen[-1][0])
        other.join(60)
        assert done and done[0].returncode == 0, done and done[0].stderr
        assert tail[-1][1] == "end" and durable(tail)[-1][1] == "run.done"
        assert [k for _, k, _ in durable(tail)].count("task.finished") == 5
        assert client.get("/threads/of/state").json()["values"]["n"] == 6
