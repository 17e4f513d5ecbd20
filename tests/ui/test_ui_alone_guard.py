"""The UI served alone (``python -m graphckpt.server.ui``, :func:`create_ui_app`) has the server's front door: a
``Host`` that is not a loopback name (a DNS-rebinding page) gets 400 and no page, a form post from another site's
``Origin`` gets 403 before any route, and the pages still work for the loopback host. Real uvicorn in a subprocess,
real HTTP."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support import child_env
from support.serving import free_port
from support.ui_world import build
from support.waiting import wait_for


@pytest.fixture
def ui(tmp_path: Path) -> Iterator[str]:
    db = tmp_path / "ui.db"
    build(db)
    port = free_port()
    argv = [sys.executable, "-m", "graphckpt.server.ui", str(db), "--port", str(port), "--allow-host", "ui.internal"]
    proc = subprocess.Popen(argv, env=child_env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(proc.communicate()[1].decode(errors="replace"))
        try:
            return httpx.get(url + "/ui/", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(up, 60, interval=0.1, what="the stand-alone UI to answer")
        yield url
    finally:
        proc.terminate()
        proc.communicate(timeout=30)  # reads and closes its pipes


def test_a_foreign_host_is_refused_and_loopback_names_are_served(ui: str) -> None:
    with httpx.Client(base_url=ui, timeout=10) as client:
        for host in ("evil.example", "evil.example:8123", "192.168.1.5"):
            refused = client.get("/ui/", headers={"Host": host})
            assert refused.status_code == 400 and refused.json()["error"] == "HostNotAllowed", host
            assert "deploy" not in refused.text
        for host in ("localhost", "127.0.0.1:1", "[::1]:8123", "ui.internal"):
            page = client.get("/ui/", headers={"Host": host})
            assert page.status_code == 200 and "/ui/threads/deploy-" in page.text, host


def test_a_cross_site_form_post_is_refused_before_the_route(ui: str) -> None:
    with httpx.Client(base_url=ui, timeout=10) as client:
        client.get("/ui/")
        token = client.cookies["graphckpt_csrf"]
        form = {"csrf": token, "thread": "deploy-1"}
        refused = client.post("/ui/actions/cancel", data=form, headers={"Origin": "https://evil.example"})
        assert refused.status_code == 403 and refused.json()["error"] == "CrossOrigin"
        same = client.post("/ui/actions/cancel", data=form, headers={"Origin": ui})
        assert same.status_code == 422 and "only `graphckpt serve`" in same.text  # past the guard: the route's answer
        no_token = client.post("/ui/actions/cancel", data={"thread": "deploy-1"}, headers={"Origin": ui})
        assert no_token.status_code in (400, 403) and "csrf" in no_token.text.lower()
