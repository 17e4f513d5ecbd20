"""Slow and idle clients against the real server: a stream reader that stops reading is dropped after the stall
timeout and loses nothing when it reconnects with its ``Last-Event-ID``; idle sockets neither stop the server from
answering nor grow its memory past a stated bound. The numbers are printed (``-s``) for the record."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import h11
import httpx
import pytest
from support.serving import Served, SseFrames, read_events
from support.waiting import wait_for

COUNTER = ["support.server_graphs:counter"]
STALL = 2.0
RSS_BOUND_MB = 60
"""Growth of the server's RSS allowed under 20 stalled readers or 1,000 idle sockets."""


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _stalled(server: Served, path: str) -> socket.socket:
    """A client that asks for ``path`` and then reads nothing (a tiny receive buffer, so the server feels it)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", server.port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    return sock


def _drain(sock: socket.socket) -> list[tuple[str | None, str, object]]:
    """Everything the server sent before it closed the connection, as SSE events (a cut one is left out)."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))  # only to set h11's state
    conn.send(h11.EndOfMessage())
    sock.settimeout(30)
    body = bytearray()
    while True:
        data = sock.recv(1 << 20)
        conn.receive_data(data)
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError:  # the connection ended mid-chunk: what came so far counts
                event = h11.NEED_DATA
                data = b""
            if isinstance(event, h11.Data):
                body += event.data
            elif event is h11.NEED_DATA or isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                break
        if not data or isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            break
    frames, out = SseFrames(), []
    for line in body.decode("utf-8", "replace").splitlines():
        if (found := frames.feed(line)) is not None:
            out.append(found)
    return out


@pytest.mark.slow
def test_a_stalled_reader_is_dropped_and_resumes_by_last_event_id_without_loss(serve: Callable[..., Served]) -> None:
    server = serve(COUNTER, args=["--stall-timeout", str(STALL)])
    path = "/threads/big/stream?stream_mode=values"
    with httpx.Client(base_url=server.url, timeout=120) as client:
        client.post("/threads/big/runs/wait", json={"input": {"limit": 2000}}).raise_for_status()
        reference = [e for e in read_events(client, path) if e[0]]
    assert len(reference) == 2001  # the input's checkpoint and one per step, each with the whole log so far
    assert server.proc is not None
    base = _rss_mb(server.proc.pid)
    stalled = [_stalled(server, path) for _ in range(20)]
    time.sleep(STALL + 3)  # the contract under test is a timeout: it has to elapse (nobody reads meanwhile)
    pinned = _rss_mb(server.proc.pid)
    assert httpx.get(f"{server.url}/ok", timeout=5).status_code == 200  # still answering
    got = _drain(stalled[0])
    for sock in stalled:
        sock.close()
    durable = [e for e in got if e[0]]
    assert 0 < len(durable) < len(reference), len(durable)  # it was dropped partway
    assert durable == reference[: len(durable)]
    with httpx.Client(base_url=server.url, timeout=120) as client:
        rest = [e for e in read_events(client, path, last_id=durable[-1][0]) if e[0]]
    assert durable + rest == reference  # nothing lost, nothing twice
    print(f"\nRSS {base:.1f} MB before, {pinned:.1f} MB with 20 stalled readers (+{pinned - base:.1f} MB)")
    assert pinned - base < RSS_BOUND_MB


@pytest.mark.slow
def test_a_thousand_idle_sockets_neither_stop_the_server_nor_stay_open(serve: Callable[..., Served]) -> None:
    server = serve(COUNTER, args=["--head-timeout", "3"])
    assert server.proc is not None
    base = _rss_mb(server.proc.pid)
    idle = []
    for n in range(1000):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        if n % 2:
            sock.sendall(b"GET /ok HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # half a head, never finished
        idle.append(sock)
    held = _rss_mb(server.proc.pid)
    started = time.monotonic()
    assert httpx.get(f"{server.url}/ok", timeout=5).status_code == 200
    assert time.monotonic() - started < 2

    def all_closed() -> bool:
        for sock in idle:
            sock.settimeout(0.001)
            try:
                if sock.recv(1) != b"":
                    return False
            except (TimeoutError, BlockingIOError):
                return False
            except ConnectionError:
                pass
        return True

    wait_for(all_closed, 30, interval=0.5, what="the server to close the idle sockets")
    for sock in idle:
        sock.close()
    print(f"\nRSS {base:.1f} MB before, {held:.1f} MB with 1000 idle sockets (+{held - base:.1f} MB)")
    assert held - base < RSS_BOUND_MB
