"""A chat page on LangGraph's React hook ``useStream`` (``@langchain/langgraph-sdk/react``, React 19, bundled offline
by esbuild from tests/js's lockfile) in headless Chromium, against a real ``graphckpt serve`` on another origin
(``--cors-origin``: the hook reads the run id from the exposed ``Content-Location``). The agent
(``support.approval_chat:chat``) answers with a model (the loopback OpenAI-compatible server, streamed to the page
piece by piece through ``messages-tuple``) and asks for approval (an interrupt) before the answer stands.

The chat goes on across two restarts: the server is killed (SIGKILL) while the model is streaming its first answer
and started again on the same port; the restarted server takes the run over, and the page's stream reconnects by
itself with its last event id and shows the answer and the approval request. Then the server is stopped (SIGTERM)
and started again while the question waits; the reloaded page finds its thread (the id is in its URL), its
messages and the pending approval, and approves. In the second turn the page is reloaded while the model writes:
the hook rejoins the run it started (``reconnectOnMount``: ``joinStream`` with ``Last-Event-ID: -1``), and the
answer is rejected."""

from __future__ import annotations

import functools
import os
import subprocess
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.js import JS, node, require_node_modules
from support.openai_server import FakeOpenAIServer, Reply, completion, held
from support.serving import Served

CHROMIUM = "/usr/bin/chromium"
AGENT = "chat=support.approval_chat:chat"

pytestmark = [
    pytest.mark.skipif(
        not Path(CHROMIUM).exists() and not os.environ.get("CI"), reason="needs Debian chromium at /usr/bin/chromium"
    ),
    pytest.mark.slow,
]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/js/chat.jsx bundled with React and the sdk (esbuild, offline) into index.html + chat.js."""
    require_node_modules("@langchain/langgraph-sdk", "react", "react-dom", "esbuild")
    out = tmp_path_factory.mktemp("chat-page")
    subprocess.run([node(), str(JS / "build.mjs"), str(out)], cwd=JS, check=True, timeout=120)
    return out


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def page_origin(bundle: Path) -> Iterator[str]:
    """The bundle served by a plain static server on its own loopback port (the page's origin)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(bundle)))
    thread = threading.Thread(target=httpd.serve_forever, name="chat-page", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(10)


@pytest.fixture
def page() -> Iterator[Any]:
    """A fresh headless Chromium page; every request it made stayed on 127.0.0.1, and it logged no page error."""
    sync_api = pytest.importorskip("playwright.sync_api")
    seen: list[str] = []
    errors: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        context = browser.new_context(viewport={"width": 1000, "height": 800})
        context.on("request", lambda r: seen.append(r.url))
        pg = context.new_page()
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.set_default_timeout(20_000)
        yield pg
        context.close()
        browser.close()
    hosts = {urllib.parse.urlsplit(u).hostname for u in seen if not u.startswith(("data:", "about:"))}
    assert seen and hosts == {"127.0.0.1"}, f"requests left the machine: {sorted(set(seen))}"
    assert not errors, errors


def _reply(text: str, completion_id: str, *, hold: bool = False) -> Reply:
    reply = completion(text)
    reply.body["id"] = completion_id
    return held(reply, max_wait=60.0) if hold else reply


def _messages(page: Any) -> list[tuple[str, str]]:
    items = page.locator("#messages li")
    return [(items.nth(i).get_attribute("data-type") or "", items.nth(i).inner_text()) for i in range(items.count())]


def test_use_stream_chat_with_approval_across_server_restarts(
    serve: Callable[..., Served], page: Any, page_origin: str
) -> None:
    joins: list[tuple[str, str | None]] = []
    failed: list[str] = []
    page.on(
        "request",
        lambda r: (
            joins.append((r.url, r.headers.get("last-event-id")))
            if r.method == "GET" and "/runs/" in r.url and "/stream" in r.url
            else None
        ),
    )
    page.on("response", lambda r: failed.append(f"{r.status} {r.request.method} {r.url}") if r.status >= 400 else None)
    with FakeOpenAIServer() as model:
        model.script(
            _reply("one two three", "chatcmpl-turn-1", hold=True),  # held after "one ": the server dies meanwhile
            _reply("one two three", "chatcmpl-turn-1"),  # the restarted server's call for the same task
            _reply("four five", "chatcmpl-turn-2", hold=True),  # held after "four ": the page reloads meanwhile
        )
        server = serve([AGENT], env={"OPENAI_BASE_URL": model.base_url}, args=["--cors-origin", page_origin])
        api = server.url
        page.goto(f"{page_origin}/index.html?api={urllib.parse.quote(api)}")
        page.get_by_label("Message").fill("hello there")
        page.get_by_role("button", name="Send").click()
        # the first piece of the answer is on the page while the model is still writing the rest
        page.locator("#messages li[data-type=ai]", has_text="one").wait_for()
        assert "two" not in page.locator("#messages").inner_text()
        tid = page.locator("#thread").get_attribute("data-thread")
        assert tid and f"thread={tid}" in page.url

        server.kill()  # mid-answer
        model.release.set()  # the dead server's held request ends
        server.start(port=urllib.parse.urlsplit(api).port)
        # the page's stream reconnects by itself (Last-Event-ID) to the run the restarted server took over
        approval = page.locator("#approval")
        approval.wait_for(timeout=60_000)
        assert approval.locator(".question").inner_text() == "Send this answer?"
        assert approval.locator(".draft").inner_text() == "one two three"
        assert _messages(page) == [("human", "hello there"), ("ai", "one two three")]
        assert page.locator("#error").inner_text() == ""
        assert any(last and last.startswith(f"{tid}:") for _, last in joins), joins  # reconnected by last event id

        assert server.stop() in (0, -15)  # SIGTERM while the question waits (uvicorn re-raises the signal)
        server.start(port=urllib.parse.urlsplit(api).port)
        page.reload()
        approval.wait_for()
        assert _messages(page) == [("human", "hello there"), ("ai", "one two three")]
        approval.get_by_role("button", name="Approve").click()
        approval.wait_for(state="detached")
        page.locator("#status[data-loading=no]").wait_for()

        # a reload while the model writes: the hook rejoins the run it had started (reconnectOnMount)
        model.release.clear()
        page.get_by_label("Message").fill("and again")
        page.get_by_role("button", name="Send").click()
        page.locator("#messages li[data-type=ai]", has_text="four").wait_for()
        page.reload()
        page.locator("#status[data-loading=yes]").wait_for()
        model.release.set()
        approval.locator(".draft", has_text="four five").wait_for()
        assert _messages(page)[-1] == ("ai", "four five")
        assert [url for url, last in joins if last == "-1"], joins  # the rejoin, from the run's first event
        approval.get_by_role("button", name="Reject").click()
        page.locator("#messages li", has_text="withheld").wait_for()
        page.locator("#status[data-loading=no]").wait_for()
        assert _messages(page) == [
            ("human", "hello there"),
            ("ai", "one two three"),
            ("human", "and again"),
            ("ai", "(answer withheld by the reviewer)"),
        ]
        assert page.locator("#error").inner_text() == ""

        assert not failed, failed
        state = httpx.get(f"{api}/threads/{tid}/state", timeout=10).json()
        assert [m["content"] for m in state["values"]["messages"]][1] == "one two three"
        assert state["values"]["approved"] is False and state["next"] == []
        assert model.request_count == 3  # the killed call, its re-run after the restart, the second turn
