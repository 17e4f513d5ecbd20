"""Hostile requests against the real server (``graphckpt serve`` on loopback, real HTTP): each is refused with a
4xx naming what was wrong, before anything is queued, and none is ever a 500 or a dropped connection."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from support.serving import Served
from support.waiting import wait_for

COUNTER = ["support.server_graphs:counter"]
TOKENS = {"GRAPHCKPT_TOKENS": "tok-a=alice,tok-b=bob"}


def _raw(server: Served, request: bytes) -> bytes:
    """``request`` sent as is over a socket; the whole answer (the server must answer, not drop it)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


def test_unicode_ids_are_encoded_in_location_and_control_characters_refused(serve: Callable[..., Served]) -> None:
    server = serve(COUNTER)
    runs: list[str] = []
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for tid in ("线程", "🧵x", "a%b"):
            r = client.post(f"/threads/{tid}/runs", json={"input": {"limit": 1}})
            assert r.status_code == 200, (tid, r.status_code, r.text)
            assert r.headers["location"].isascii() and "/runs/" in r.headers["location"]
            assert httpx.URL(r.headers["location"]).path.split("/")[2] == tid  # decodes back to the id
            runs.append(f"/threads/{tid}/runs/{r.json()['run_id']}")
        for location in runs:  # the snapshot below must not race the runs' own progress
            wait_for(lambda at=location: client.get(at).json()["status"] == "success", timeout=60, what=location)
        before = client.post("/threads/search", json={"limit": 100}).json()
    for raw_id in (b"a%0D%0Ab", b"a%00b", b"a%0Ab", b"a%7Fb"):
        body = b'{"input": {"limit": 1}}'
        head = b"POST /threads/" + raw_id + b"/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        answer = _raw(server, head + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        assert answer.startswith(b"HTTP/1.1 422"), answer[:200]
        assert b"path.thread_id" in answer and b"control characters" in answer
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.post("/threads/search", json={"limit": 100}).json() == before  # nothing new was queued
        r = client.get("/threads/" + "x" * 600)
        assert r.status_code == 422 and "path.thread_id" in r.json()["message"] and "512" in r.json()["message"]
        r = client.get("/threads/a b/state")
        assert r.status_code == 422 and "whitespace" in r.json()["message"]


@pytest.mark.parametrize(
    ("path", "wrap"),
    [
        ("/threads", lambda deep: {"thread_id": "d", "metadata": {"x": deep}}),
        ("/threads/d/runs/wait", lambda deep: {"input": {"limit": 1, "n": deep}}),
        ("/threads/search", lambda deep: {"metadata": {"x": deep}}),
        ("/assistants/search", lambda deep: {"metadata": deep}),
    ],
)
def test_deep_json_is_refused_before_parsing(serve: Callable[..., Served], path: str, wrap: Any) -> None:
    server = serve(COUNTER)
    deep = "[" * 5000 + "]" * 5000
    text = json.dumps(wrap("@")).replace('"@"', deep)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        r = client.post(path, content=text, headers={"Content-Type": "application/json"})
        assert r.status_code == 422, r.text
        assert "at most 100 levels" in r.json()["message"]
        brackets_in_a_string = json.dumps(wrap("[" * 5000))  # brackets inside a string do not nest
        r = client.post(path, content=brackets_in_a_string, headers={"Content-Type": "application/json"})
        assert r.status_code != 500 and "levels" not in r.text
        r = client.post(path, content=b"[" * (2 << 20), headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and str(1 << 20) in r.json()["message"]


def test_nan_and_infinity_are_refused_naming_the_field(serve: Callable[..., Served]) -> None:
    server = serve(COUNTER)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        cases = [
            ('{"input": {"limit": NaN}}', "body.input.limit"),
            ('{"input": {"limit": 1, "x": [1, Infinity]}}', "body.input.x.1"),
            ('{"input": {"limit": 1e999}}', "body.input.limit"),
            ('{"input": {"limit": 1}, "metadata": {"m": -Infinity}}', "body.metadata.m"),
        ]
        for text, field in cases:
            r = client.post("/threads/n/runs/wait", content=text, headers={"Content-Type": "application/json"})
            assert r.status_code == 422, (text, r.text)
            assert field in r.json()["message"] and "NaN" in r.json()["message"]
        assert client.get("/threads/n/state").status_code == 404  # nothing was stored
        client.post("/threads/n/runs/wait", json={"input": {"limit": 1}}).raise_for_status()
        assert client.get("/threads/n/state").status_code == 200


def test_integers_past_64_bits_are_refused_naming_the_field(serve: Callable[..., Served]) -> None:
    server = serve(COUNTER)
    big = 2**64
    with httpx.Client(base_url=server.url, timeout=30) as client:
        client.post("/threads/i/runs/wait", json={"input": {"limit": 2}}).raise_for_status()
        r = client.get("/threads/i/state", params={"step": str(big)})
        assert r.status_code == 422 and "query.step" in r.json()["message"], r.text
        r = client.post("/threads/i/fork", json={"step": big})
        assert r.status_code in (404, 422) and r.status_code != 500
        if r.status_code == 422:
            assert "body.step" in r.json()["message"]
        r = client.post("/threads/i/state", json={"step": big})
        assert r.status_code != 500
        for last in (f"i:{big}:0", f"i:0:{big}", f"i:0:0~abc.{big}"):
            r = client.get("/threads/i/stream", headers={"Last-Event-ID": last})
            assert r.status_code == 422 and "Last-Event-ID" in r.json()["message"], (last, r.text)
        r = client.post("/threads/i/runs", json={"input": {"limit": 1}, "recursion_limit": 2**65})
        assert r.status_code == 422 and "body.recursion_limit" in r.json()["message"]
        r = client.post("/threads/i/runs", json={"input": {"limit": 1}, "stream_mode": "bogus"})
        assert r.status_code == 422 and "body.stream_mode" in r.json()["message"] and "bogus" in r.json()["message"]
        r = client.post("/threads/i/runs/wait", json={"input": {"limit": 1}, "stream_mode": ["values", "nope"]})
        assert r.status_code == 422 and "nope" in r.json()["message"]


def test_the_login_form_is_bounded_before_it_is_read(serve: Callable[..., Served]) -> None:
    server = serve(COUNTER, env=TOKENS)
    with httpx.Client(base_url=server.url, timeout=60) as client:
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        r = client.post("/ui/login", content=b"token=" + b"x" * (8 << 20), headers=form)
        assert r.status_code == 413 and str(1 << 20) in r.text

        def chunks() -> Any:  # no Content-Length: the server must stop reading by itself
            yield b"token="
            for _ in range(64):
                yield b"x" * (64 << 10)

        r = client.post("/ui/login", content=chunks(), headers=form)
        assert r.status_code == 413
        assert client.get("/ok").status_code == 200


def test_info_and_errors_under_tokens(serve: Callable[..., Served]) -> None:
    server = serve(COUNTER, env=TOKENS)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        anonymous = client.get("/info")
        assert anonymous.status_code == 200 and "version" not in anonymous.json()
        alice = {"Authorization": "Bearer tok-a"}
        assert "version" in client.get("/info", headers=alice).json()
        r = client.get("/threads/nope/state", headers=alice)
        assert r.status_code == 404 and "alice" not in r.json()["message"]


def test_a_namespace_cannot_queue_past_its_limit_and_others_still_can(serve: Callable[..., Served]) -> None:
    server = serve(COUNTER, env=TOKENS, args=["--queue-limit", "3", "--no-workers"])  # nothing runs: all stay queued
    alice, bob = {"Authorization": "Bearer tok-a"}, {"Authorization": "Bearer tok-b"}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for n in range(3):
            r = client.post(f"/threads/q{n}/runs", json={"input": {"limit": 1}}, headers=alice)
            assert r.status_code == 200, r.text
        r = client.post("/threads/q9/runs", json={"input": {"limit": 1}}, headers=alice)
        assert r.status_code == 429 and "at most 3" in r.json()["message"] and "--queue-limit" in r.json()["message"]
        assert client.post("/threads/b/runs", json={"input": {"limit": 1}}, headers=bob).status_code == 200
        r = client.post("/threads/b/runs", json={"input": {"limit": 1}}, headers=bob)  # it has a queued run
        message = r.json()["message"]
        assert r.status_code == 409 and "'b'" in message and "bob/" not in message, message  # the API id


def test_an_id_within_512_characters_but_past_1024_bytes_is_a_422_not_a_500(serve: Callable[..., Served]) -> None:
    """The saver's limit is 1,024 bytes of UTF-8: 300 emoji (1,200 bytes) pass the API's 512-character rule and are
    refused by the saver as InvalidArgumentError, which the API answers 422 naming the limit; nothing is stored."""
    server = serve(COUNTER)
    tid = "🧵" * 300
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for request in (
            lambda: client.post("/threads", json={"thread_id": tid}),
            lambda: client.post(f"/threads/{tid}/runs/wait", json={"input": {"limit": 1}}),
        ):
            r = request()
            assert r.status_code == 422, (r.status_code, r.text[:300])
            assert r.json()["error"] == "InvalidArgumentError" and "at most 1,024 bytes" in r.json()["message"]
        assert client.get(f"/threads/{tid}").status_code == 404
