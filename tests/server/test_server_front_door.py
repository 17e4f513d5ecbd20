"""The default server against a hostile web page: a real ``graphckpt serve`` (no tokens) on loopback, spoken to the
way a browser on another site would (a foreign ``Host`` after DNS rebinding, ``text/plain`` and form posts that need
no CORS preflight, a foreign ``Origin``). Every refusal happens before anything is queued or stored."""

from __future__ import annotations

from collections.abc import Callable

import httpx
from support.serving import Served

COUNTER = ["support.server_graphs:counter"]


def _threads(client: httpx.Client) -> list[str]:
    found = client.post("/threads/search", json={"limit": 100})
    assert found.status_code == 200, found.text
    return [t["thread_id"] for t in found.json()]


def test_a_foreign_host_is_refused_loopback_names_are_not(serve: Callable[..., Served]) -> None:
    server = serve(COUNTER)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        client.post("/threads", json={"thread_id": "t1"}).raise_for_status()
        for host in ("evil.example", "evil.example:8123", "127.0.0.1.nip.io", "192.168.1.5"):
            r = client.get("/threads/t1", headers={"Host": host})
            assert r.status_code == 400, (host, r.status_code)
            assert "Host" in r.json()["message"] and "--allow-host" in r.json()["message"]
            assert "t1" not in r.text
        for host in ("localhost", f"localhost:{server.port}", "127.0.0.1", "[::1]:1234", "LOCALHOST"):
            assert client.get("/threads/t1", headers={"Host": host}).status_code == 200, host


def test_allow_host_admits_a_named_host(serve: Callable[..., Served]) -> None:
    server = serve(COUNTER, args=["--allow-host", "box.lan", "--allow-host", "other.lan"])
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.get("/info", headers={"Host": "box.lan:8123"}).status_code == 200
        assert client.get("/info", headers={"Host": "other.lan"}).status_code == 200
        assert client.get("/info", headers={"Host": "evil.example"}).status_code == 400


def test_writes_need_json_and_a_same_origin(serve: Callable[..., Served]) -> None:
    server = serve(COUNTER)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        simple = [
            ("text/plain", b'{"input": {"limit": 1}}'),
            ("application/x-www-form-urlencoded", b"input=1"),
            ("multipart/form-data; boundary=x", b"--x--"),
        ]
        for kind, content in simple:
            r = client.post("/threads/x/runs/wait", content=content, headers={"Content-Type": kind})
            assert r.status_code == 415, (kind, r.status_code, r.text)
            assert kind.split(";")[0] in r.json()["message"] and "application/json" in r.json()["message"]
        r = client.post("/threads/x/runs/wait", content=b'{"input": {"limit": 1}}')  # no Content-Type at all
        assert r.status_code == 415
        r = client.post("/threads", json={"thread_id": "y"}, headers={"Origin": "https://evil.example"})
        assert r.status_code == 403 and "evil.example" in r.json()["message"]
        r = client.post("/threads", json={"thread_id": "y"}, headers={"Origin": "null"})
        assert r.status_code == 403
        assert _threads(client) == []  # nothing was queued or created
        ok = client.post("/threads", json={"thread_id": "y"}, headers={"Origin": server.url})
        assert ok.status_code == 200, ok.text
        r = client.post(
            "/threads/y/runs/wait",
            json={"input": {"limit": 1}},
            headers={"Content-Type": "application/json; charset=utf-8"},
        )
        assert r.status_code == 200, r.text
        assert "access-control-allow-origin" not in {k.lower() for k in r.headers}


def test_a_cross_site_form_post_to_the_ui_is_refused(serve: Callable[..., Served]) -> None:
    server = serve(COUNTER)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        client.post("/threads/z/runs/wait", json={"input": {"limit": 1}}).raise_for_status()
        form = {"thread": "z", "csrf": "x" * 43}
        r = client.post("/ui/actions/resume", data=form, headers={"Origin": "https://evil.example"})
        assert r.status_code == 403
        forged = {"Cookie": "graphckpt_csrf=" + "x" * 43}  # a pair the server never issued
        r = client.post("/ui/actions/resume", data=form, headers=forged)
        assert r.status_code == 403
        client.get("/ui/threads/z").raise_for_status()  # the UI's own form still works: its page set the cookie
        token = client.cookies["graphckpt_csrf"]
        r = client.post("/ui/actions/resume", data={"thread": "z", "csrf": token}, headers={"Origin": server.url})
        assert r.status_code in (303, 422), r.text  # resumed, or "nothing to resume": past the CSRF check either way
        assert "expired" not in r.text and r.status_code != 403
