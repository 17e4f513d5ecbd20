"""The web UI in a real headless Chromium (Playwright), against a real ``graphckpt serve`` (uvicorn, a child process)
serving a SQLite file real graphs wrote.

One server and one browser for the module (Chromium is heavy): the database is built by ``tests/support/ui_world.py``
in a child process (the demo's threads, done and failed, and an approval thread), ``graphckpt serve`` serves it on a
free port of 127.0.0.1 with a price table, and its gated graph's nodes wait for files the test creates, so a running
thread (started through the JSON API, run by the server) grows exactly when the test says. The tests run in order
(they change the database): the list and its filters, a running thread growing live over SSE across a server kill
and restart (the restarted server takes the run over), cancelling a run, a fork from step 2 with an edited field and
the diff it makes, accessibility (axe-core, vendored in tests/data) and screenshots of every view at 1280x800 and
390x844, keyboard-only use, answering an interrupt with one invalid answer first, and a second server with tokens
in two namespaces (login form, session cookie, another namespace's thread is 404). Every request the browser makes
is recorded: all of them stay on 127.0.0.1.

Screenshots go to ``$GRAPHCKPT_UI_ARTIFACTS`` or ``tests/artifacts/ui`` (gitignored).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import DATA, SUPPORT, TESTS, child_env
from support.serving import free_port
from support.ui_serve import Server, http
from support.waiting import wait_for

playwright_sync = pytest.importorskip("playwright.sync_api")

WORLD = SUPPORT / "ui_world.py"
AXE = DATA / "axe-4.14.1.min.js"
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("GRAPHCKPT_UI_ARTIFACTS", TESTS / "artifacts" / "ui"))
SIZES = {"desktop": (1280, 800), "phone": (390, 844)}
GATED_NODES = ("fetch", "plan", "act", "report")
FORK_INSTRUCTION = "Report the temperature in Fahrenheit instead of Celsius."

# .ci/run installs Chromium: there (CI set) a missing browser fails the tests instead of skipping them
# one server, one database and one browser for the module, whose tests build on each other: one xdist worker runs them
pytestmark = [
    pytest.mark.skipif(
        not Path(CHROMIUM).exists() and not os.environ.get("CI"), reason="needs Debian chromium at /usr/bin/chromium"
    ),
    pytest.mark.xdist_group("ui_browser"),
]


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ui") / "ui.db"
    subprocess.run(
        [sys.executable, str(WORLD), "build", str(path)], env=child_env(), check=True, timeout=120, cwd=path.parent
    )
    return path


@pytest.fixture(scope="module")
def server(db: Path) -> Iterator[Server]:
    s = Server(db, free_port())
    s.start()
    yield s
    s.kill()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, server: Server) -> Iterator[Any]:
    """A page of a fresh context at 1280x800 whose every request is recorded; at the end, all were to 127.0.0.1."""
    context = browser.new_context(viewport={"width": 1280, "height": 800}, bypass_csp=True, base_url=server.base)
    seen: list[str] = []
    context.on("request", lambda r: seen.append(r.url))
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    yield pg
    context.close()
    hosts = {urllib.parse.urlsplit(u).hostname for u in seen if not u.startswith(("data:", "about:"))}
    assert seen and hosts == {"127.0.0.1"}, f"requests left the machine: {sorted(set(seen))}"


def shoot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for size, (w, h) in SIZES.items():
        page.set_viewport_size({"width": w, "height": h})
        page.screenshot(path=str(ARTIFACTS / f"{name}-{size}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 800})


def steps_shown(page: Any) -> int:
    return int(page.get_attribute("#live", "data-steps"))


def read_db(db: Path) -> Any:
    from graphckpt.reader import RawReader
    from graphckpt.savers.sqlite import SqliteSaver

    return RawReader(SqliteSaver(db))


# -- the tests, in the order of the click-through --------------------------------------------------------------


def test_pages_read_without_javascript_and_posts_need_the_csrf_token(server: Server, db: Path) -> None:
    status, html, headers = http(server.base + "/ui/")
    assert status == 200 and 'href="/ui/threads/demo"' in html
    cookie = headers["set-cookie"].split(";")[0]
    token = cookie.split("=", 1)[1]
    for path in ("/ui/threads/demo", "/ui/interrupts", "/ui/?status=failed", "/ui/diff?a=demo&b=batch-0"):
        status, html, _ = http(server.base + path)
        assert status == 200 and "<a href=" in html, path  # links (and forms) work with no script
    status, html, _ = http(server.base + "/ui/?per=2")
    nxt = re.search(r'href="\?per=2&amp;after=([^"]+)" rel="next"', html)
    assert status == 200 and nxt and html.count('<td data-label="Thread">') == 2 and 'rel="first"' not in html
    status, html, _ = http(server.base + "/ui/?per=2&after=" + nxt.group(1))  # keyset pages: the next one
    assert status == 200 and 'href="?per=2" rel="first"' in html and html.count('<td data-label="Thread">') == 2
    status, html, _ = http(server.base + "/ui/?after=nonsense")
    assert status == 422 and "after" in html
    status, html, _ = http(server.base + "/ui/threads/nope")
    assert status == 404 and "nope" in html
    with read_db(db) as reader:
        head = reader.get_state("demo-failed").checkpoint_id
    for cookie_sent, form_token in ((None, token), (cookie, None), (cookie, "x" * 43)):
        data = {"thread": "demo-failed"} | ({"csrf": form_token} if form_token else {})
        status, html, _ = http(server.base + "/ui/actions/resume", data, cookie_sent)
        assert status == 403 and "CSRF" in html
    with read_db(db) as reader:
        info = reader.thread("demo-failed")
        assert info.status == "failed" and info.head.checkpoint_id == head  # nothing ran
        before = {i.thread_id for i in reader.threads()}
        checkpoint = reader.get_state("deploy-api").checkpoint_id
    form = {
        "csrf": token,
        "thread": "deploy-api",
        "checkpoint": checkpoint,
        "field.approved": "{yes",
        "field.service": "api",
    }
    status, html, _ = http(server.base + "/ui/actions/fork", form, cookie)
    assert status == 422 and "field &#39;approved&#39; is not JSON" in html and 'role="alert"' in html
    assert "{yes</textarea>" in html  # what was typed is kept in the form
    with read_db(db) as reader:
        assert {i.thread_id for i in reader.threads()} == before  # no fork was made


def test_threads_list_filter_to_failed_and_search_metadata(page: Any) -> None:
    page.goto("/ui/")
    rows = page.locator("table.threads tbody tr")
    assert rows.count() == 7
    demo = page.locator("table.threads tbody tr", has=page.locator("a", has_text="demo")).last
    assert demo.locator("td[data-label=Cost]").inner_text().startswith("$0.00")  # the price table's cost
    shoot(page, "threads")
    page.select_option("select[name=status]", "failed")
    page.click("button:has-text('Filter')")
    page.wait_for_url("**status=failed**")
    assert [t.strip() for t in page.locator("table.threads tbody td:first-child a").all_inner_texts()] == [
        "demo-failed"
    ]
    page.fill("input[name=q]", "weather")
    page.select_option("select[name=status]", "")
    page.click("button:has-text('Filter')")
    assert page.locator("table.threads tbody td:first-child a").all_inner_texts() == ["demo-failed"]
    page.click("text=demo-failed")
    page.wait_for_url("**/ui/threads/demo-failed")
    assert "simulated timeout" in page.inner_text("[role=alert]")
    assert page.locator("button:has-text('Resume')").count() == 1
    assert page.locator("svg.graph .node.next.failed text").all_text_contents() == ["check"]
    shoot(page, "thread-failed")


def start_gated(server: Server, thread_id: str) -> None:
    """A run of the gated graph on a new thread, through the JSON API (the server runs it)."""
    status, text, _ = http(
        server.base + f"/threads/{thread_id}/runs",
        json_body={"assistant_id": "support.ui_world:gated_graph", "input": {"log": ["start"]}},
    )
    assert status == 200, text
    # the run's first checkpoint is stored (before it, the page is the "created, no checkpoint yet" one, whose
    # live part turns into the timeline then): a loaded machine may take a while to claim the run
    wait_for(
        lambda: 'class="steps"' in http(server.base + f"/ui/threads/{thread_id}")[1], 30, what=f"{thread_id} to run"
    )


def test_cancel_a_running_thread_from_its_page(page: Any, server: Server, db: Path) -> None:
    start_gated(server, "live-0")
    status, html, _ = http(server.base + "/ui/threads/live-0")  # without JavaScript a running page refreshes itself
    assert status == 200 and '<noscript><meta http-equiv="refresh"' in html
    page.goto("/ui/threads/live-0")
    assert page.get_attribute("#live", "data-status") == "running"
    page.click("button:has-text('Cancel the run')")
    page.wait_for_url("**/ui/threads/live-0")
    assert page.locator("button:has-text('Cancel the run')").count() == 0
    assert "cancel via UI" in page.inner_text(".steps") and "run cancelled" in page.inner_text(".facts")
    assert page.locator("button.resume").count() == 1  # a cancelled run can be resumed
    shoot(page, "thread-cancelled")
    status, text, _ = http(server.base + "/threads/live-0/runs")
    assert status == 200 and [r["status"] for r in json.loads(text)] == ["cancelled"]
    with read_db(db) as reader:
        head = reader.get_state("live-0")
        assert head.metadata["tags"]["via"] == "ui" and head.metadata["tags"]["ui_action"] == "cancel"
        assert head.metadata["source"] == "update" and head.values["log"] == ["start"]
    status, text, _ = http(server.base + "/threads/live-0/runs", json_body={"command": {"resume": None}})
    assert status == 200, text  # resumed through the API (it waits at the closed gate of fetch)


def test_a_running_thread_grows_live_and_continues_after_a_server_restart(page: Any, server: Server, db: Path) -> None:
    start_gated(server, "live-1")
    streams: list[Any] = []
    page.on("request", lambda r: streams.append(r) if "/ui/events/" in r.url else None)
    page.goto("/ui/threads/live-1")
    assert page.get_attribute("#live", "data-status") == "running"
    assert page.get_attribute("#live", "data-stream") == "/ui/events/live-1"  # SSE, not polling
    assert page.get_attribute("#live", "hx-trigger") is None
    start = steps_shown(page)
    Path(f"{db}.gate.fetch").touch()
    page.wait_for_function(f"document.querySelector('#live').dataset.steps > {start}")  # pushed, no reload
    assert page.locator("svg.graph .node.current text").all_text_contents() == ["fetch"]
    assert page.locator("svg.graph .node.next text").all_text_contents() == ["plan"]
    shoot(page, "thread-running")
    server.kill()
    Path(f"{db}.gate.plan").touch()
    server.start()  # the restarted server takes the run over; the page's stream reconnects with its last id
    page.wait_for_function(f"document.querySelector('#live').dataset.steps > {start + 1}", timeout=20_000)
    # the stream that reached the restarted server went on from the last event seen (no replay from the start)
    last = streams[-1].all_headers().get("last-event-id") or urllib.parse.unquote(
        urllib.parse.urlsplit(streams[-1].url).query
    )
    assert len(streams) > 1 and last.removeprefix("after=").startswith("live-1:1:"), last
    for node in ("act", "report"):
        Path(f"{db}.gate.{node}").touch()
    page.wait_for_function("document.querySelector('#live').dataset.status === 'done'", timeout=20_000)
    assert "report" in page.inner_text(".steps")
    assert page.get_attribute("#live", "data-stream") is None  # done: the page stopped following
    with read_db(db) as reader:
        assert reader.get_state("live-1").values["log"] == ["start", *(f"{n} done" for n in GATED_NODES)]
    with read_db(db) as reader:  # live-0's API resume went on with the gates: its steps are not UI actions
        wait_for(lambda: reader.thread("live-0").status == "done", 30, what="live-0 to finish")
        tags = [s.metadata["tags"] for s in reader.history("live-0")]
        assert tags[0].get("via") is None and tags[-2]["ui_action"] == "cancel", tags


def test_fork_from_step_2_with_an_edited_field_then_diff(page: Any, db: Path) -> None:
    page.goto("/ui/threads/demo")
    page.click(".steps a:has-text('step 2')")
    page.wait_for_url("**/ui/threads/demo@*")
    shoot(page, "checkpoint")
    page.fill("#f-instruction", FORK_INSTRUCTION)
    page.fill("#new-thread", "demo-fahrenheit")
    page.click("button:has-text('Fork and run')")
    page.wait_for_url("**/ui/threads/demo-fahrenheit")
    page.wait_for_function("document.querySelector('#live').dataset.status === 'done'", timeout=20_000)  # followed live
    tree = page.locator(".forktree")
    assert tree.locator("a:has-text('demo-fahrenheit')").count() == 1
    assert tree.locator("a", has_text="demo").first.inner_text() == "demo"  # the source thread is the tree's root
    page.goto("/ui/threads/demo")
    page.locator(".forktree a:has-text('demo-fahrenheit')").click()
    page.wait_for_url("**/ui/threads/demo-fahrenheit")
    page.click(".facts a >> nth=0")  # the head checkpoint
    page.wait_for_url("**/ui/threads/demo-fahrenheit@*")
    page.fill("#diff-b", "demo")
    page.click("button:has-text('Diff')")
    page.wait_for_url("**/ui/diff?**")
    paths = [p.strip() for p in page.locator("table.diff tbody th").all_inner_texts()]
    assert sorted(paths) == ["instruction", "review", "tests"]  # the edit and what the later steps made of it
    assert FORK_INSTRUCTION in page.inner_text("table.diff tbody tr:has(th:has-text('instruction')) pre.before")
    tests_row = page.locator("table.diff tbody tr:has(th:has-text('tests'))")  # texts of many lines: a line diff
    assert "temp_f" in " ".join(tests_row.locator(".del").all_inner_texts())
    assert "temp_c" in " ".join(tests_row.locator(".ins").all_inner_texts())
    assert "unchanged lines" in tests_row.inner_text()
    shoot(page, "diff")
    with read_db(db) as reader:
        head = reader.get_state("demo-fahrenheit")
        assert {k: v for k, v in head.metadata["tags"].items() if k != "run"} == {
            "graph": "graphckpt.cli.demo:graph",
            "via": "ui",
            "ui_action": "fork",
        }
        assert "instruction" not in reader.get_state("demo").values  # the source is untouched (still the default)


def test_accessibility_and_screenshots_of_every_view(page: Any) -> None:
    page.goto("/ui/threads/demo")
    checkpoint = page.locator(".steps a:has-text('step 2')").get_attribute("href")
    views = {
        "threads": "/ui/",
        "thread": "/ui/threads/demo-fahrenheit",
        "checkpoint-step2": checkpoint,
        "diff-heads": "/ui/diff?a=demo&b=demo-fahrenheit",
        "interrupts": "/ui/interrupts",
        "not-found": "/ui/threads/nope",
    }
    axe = AXE.read_text()
    problems = []
    for name, url in views.items():
        page.goto(url)
        shoot(page, f"view-{name}")
        for size, (w, h) in SIZES.items():
            page.set_viewport_size({"width": w, "height": h})
            page.evaluate("(src) => { if (!window.axe) { (0, eval)(src); } }", axe)
            result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
            for v in result["violations"]:
                if v["impact"] in ("serious", "critical"):
                    problems.append(
                        f"{name} {size}: {v['id']} ({v['impact']}): {v['help']}: "
                        f"{[n['target'] for n in v['nodes']][:3]}"
                    )
        page.set_viewport_size({"width": 1280, "height": 800})
    assert not problems, "\n".join(problems)


def test_every_action_is_reachable_by_keyboard(page: Any) -> None:
    def tab_to(selector: str, limit: int = 80) -> None:
        for _ in range(limit):
            page.keyboard.press("Tab")
            if page.evaluate(f"document.activeElement.matches({json.dumps(selector)})"):
                return
        raise AssertionError(f"Tab never reached {selector}")

    page.goto("/ui/")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    tab_to("select[name=status]")
    page.keyboard.type("failed")  # a closed select picks the option typed
    assert page.evaluate("document.activeElement.value") == "failed"
    tab_to("button[type=submit]")
    page.keyboard.press("Enter")
    page.wait_for_url("**status=failed**")
    tab_to("a[href='/ui/threads/demo-failed']")
    page.keyboard.press("Enter")
    page.wait_for_url("**/ui/threads/demo-failed")
    tab_to(".steps a")
    page.keyboard.press("Enter")
    page.wait_for_url("**/ui/threads/demo-failed@*")
    tab_to("details summary")
    tab_to("#diff-b")
    page.keyboard.type("demo")
    tab_to("#diff-go")
    tab_to("#f-instruction")
    page.keyboard.press("Control+A")
    page.keyboard.type("Keyboard only.")
    tab_to("#new-thread")
    page.keyboard.type("demo-keys")
    tab_to("#fork-go")
    page.keyboard.press("Enter")
    page.wait_for_url("**/ui/threads/demo-keys")
    page.wait_for_function("document.querySelector('#live').dataset.status === 'done'", timeout=20_000)  # followed live
    page.goto("/ui/threads/demo-failed")
    tab_to("button.resume")
    page.keyboard.press("Enter")
    page.wait_for_url("**/ui/threads/demo-failed")
    page.wait_for_function("document.querySelector('#live').dataset.status === 'done'", timeout=20_000)
    steps = page.inner_text(".steps")  # the audit record: the failed first attempt stays after the resume
    assert "check: 1 failed attempt" in steps and "resume via UI" in steps
    page.click(".steps a:has-text('step 3')")
    page.wait_for_url("**/ui/threads/demo-failed@*")
    audit = page.inner_text("section[aria-labelledby=audit-h]")
    assert "Failed attempts" in audit and "TimeoutError: simulated timeout" in audit and "External calls" in audit
    shoot(page, "checkpoint-audit")
    page.evaluate("(src) => { if (!window.axe) { (0, eval)(src); } }", AXE.read_text())
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    assert not [v["id"] for v in result["violations"] if v["impact"] in ("serious", "critical")]


def test_answer_an_interrupt_from_the_inbox_with_an_invalid_answer_first(page: Any, db: Path) -> None:
    page.goto("/ui/interrupts")
    item = page.locator("article.inbox", has_text="deploy-api")
    assert "Deploy api to production?" in item.inner_text()
    item.locator("summary:has-text('Or answer as JSON')").click()
    item.locator("textarea[name=json]").fill('"maybe"')
    item.locator("button:has-text('Answer with this JSON')").click()
    page.wait_for_url("**/ui/**")  # the inbox when the run re-asked at once, else the thread's page, which follows it
    with read_db(db) as reader:
        wait_for(lambda: reader.thread("deploy-api").status == "interrupted", 30, what="deploy-api to ask again")
    page.goto("/ui/interrupts")
    item = page.locator("article.inbox", has_text="deploy-api")
    error = item.locator("[role=alert]")
    assert "an approval answer must be true, false" in error.inner_text()
    assert item.locator("form").get_attribute("aria-describedby") == error.get_attribute("id")
    shoot(page, "interrupt-invalid")
    item.locator("textarea[name=comment]").fill("ship it")
    item.get_by_role("button", name="Approve", exact=True).click()
    page.wait_for_url("**/ui/threads/deploy-api")
    page.wait_for_function("document.querySelector('#live').dataset.status === 'done'", timeout=20_000)  # followed live
    with read_db(db) as reader:
        head = reader.get_state("deploy-api")
        assert head.values["deployed"] is True and head.values["comment"] == "ship it"
        assert head.metadata["tags"]["via"] == "ui" and head.metadata["tags"]["ui_action"] == "answer"
        answers = [
            a for cp in reader.history("deploy-api") for a in (cp.metadata.get("audit") or {}).get("answers", [])
        ]
        assert ["refused" in a for a in answers] == [True, False], answers  # the refused "maybe", then the answer
        assert answers[0]["answer"] == "maybe" and answers[1]["answer"] == {"approved": True, "comment": "ship it"}
    page.goto("/ui/interrupts")
    item = page.locator("article.inbox", has_text="deploy-web")
    assert "stopped before deploy" in item.inner_text() and item.locator("textarea").count() == 0
    item.locator("button:has-text('Continue')").click()
    page.wait_for_url("**/ui/threads/deploy-web")
    page.wait_for_function("document.querySelector('#live').dataset.status === 'done'", timeout=20_000)  # followed live
    page.goto("/ui/interrupts")
    assert "Nothing is waiting" in page.inner_text("main")


def test_tokens_and_namespaces_apply_to_the_ui(browser: Any, tmp_path: Path) -> None:
    """A second server, with two tokens in two namespaces: the UI asks for a token (a login form setting an
    HttpOnly, SameSite=Strict session cookie that holds no token), lists only the token's namespace, and another
    namespace's thread is 404 on every UI path, its events and its actions too."""
    tokens = tmp_path / "tokens"
    tokens.write_text("tok-alpha alpha\ntok-beta beta\n")
    s = Server(tmp_path / "ns.db", free_port(), tokens=tokens)
    s.start()
    try:
        for token, thread in (("tok-alpha", "a1"), ("tok-beta", "b1")):
            body = {"assistant_id": "support.ui_world:approval_graph", "input": {"service": thread}}
            auth = {"Authorization": f"Bearer {token}"}
            status, text, _ = http(s.base + f"/threads/{thread}/runs/wait", headers=auth, json_body=body)
            assert status == 200, text
        status, text, _ = http(s.base + "/")  # a client that does not ask for HTML: the API's own 404, as before
        assert status == 404 and json.loads(text)["error"]
        context = browser.new_context(viewport={"width": 1280, "height": 800}, base_url=s.base)
        seen: list[str] = []
        context.on("request", lambda r: seen.append(r.url))
        pg = context.new_page()
        pg.set_default_timeout(15_000)
        pg.goto("/")  # a browser asking for / is sent to the UI, which asks for a token first
        pg.wait_for_url("**/ui/login**")
        pg.wait_for_selector("#token")
        shoot(pg, "login")
        pg.evaluate("(src) => { if (!window.axe) { (0, eval)(src); } }", AXE.read_text())
        result = pg.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
        assert not [v["id"] for v in result["violations"] if v["impact"] in ("serious", "critical")]
        pg.fill("#token", "tok-wrong")
        pg.click("button:has-text('Sign in')")
        assert "not valid" in pg.inner_text("[role=alert]")
        pg.fill("#token", "tok-alpha")
        pg.click("button:has-text('Sign in')")
        pg.wait_for_url("**/ui/")
        assert pg.locator("table.threads tbody td:first-child a").all_inner_texts() == ["alpha/a1"]
        cookie = next(c for c in context.cookies() if c["name"] == "graphckpt_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and "tok-alpha" not in cookie["value"]
        pg.goto("/ui/interrupts")
        assert "alpha/a1" in pg.inner_text("main") and "beta" not in pg.inner_text("main")
        for path in ("/ui/threads/beta%2Fb1", "/ui/events/beta/b1", "/ui/diff?a=alpha/a1&b=beta/b1"):
            response = pg.goto(path)
            assert response is not None and response.status == 404, path
        pg.goto("/ui/threads/alpha%2Fa1")
        csrf = pg.get_attribute("input[name=csrf]", "value") if pg.locator("input[name=csrf]").count() else None
        session = f"graphckpt_session={cookie['value']}"
        jar = {c["name"]: c["value"] for c in context.cookies()}
        both = f"{session}; graphckpt_csrf={jar['graphckpt_csrf']}"
        form = {"csrf": csrf or jar["graphckpt_csrf"], "thread": "beta/b1"}
        assert http(s.base + "/ui/actions/cancel", form, both)[0] == 404
        assert http(s.base + "/ui/actions/resume", form, both)[0] == 404
        assert http(s.base + "/ui/actions/answer", {**form, "interrupt": "x", "text": "yes"}, both)[0] == 404
        assert http(s.base + "/ui/actions/fork", {**form, "checkpoint": "x"}, both)[0] == 404
        pg.goto("/ui/threads/alpha%2Fa1")
        shoot(pg, "thread-namespaced")
        pg.goto("/ui/interrupts")
        item = pg.locator("article.inbox", has_text="alpha/a1")
        item.get_by_role("button", name="Approve", exact=True).click()
        pg.wait_for_url("**/ui/threads/alpha%2Fa1")
        # the answer returned at once; the page follows the run (polled from here: this context enforces the CSP)
        wait_for(lambda: pg.get_attribute("#live", "data-status") == "done", 30, what="alpha/a1 to finish")
        status, text, _ = http(s.base + "/threads/a1/state", headers={"Authorization": "Bearer tok-alpha"})
        assert json.loads(text)["metadata"]["tags"]["ui_by"] == "alpha"  # the record names who answered
        _, text, _ = http(s.base + "/threads/a1/history", headers={"Authorization": "Bearer tok-alpha"})
        metas = [h["metadata"] for h in json.loads(text)]
        assert [a["by"] for m in metas for a in (m.get("audit") or {}).get("answers", [])] == ["alpha"]
        pg.click("button:has-text('Sign out')")
        pg.wait_for_url("**/ui/login")
        assert not [c for c in context.cookies() if c["name"] == "graphckpt_session"]
        status, html, _ = http(s.base + "/ui/threads/alpha%2Fa1")  # no session: redirected to the login form
        assert status == 401 and "Sign in" in html and "alpha/a1" not in html
        status, html, _ = http(s.base + "/ui/threads/alpha%2Fa1", None, session)  # the old cookie, replayed
        assert status == 401 and "alpha/a1" not in html  # signing out ended the session, not just the cookie
        status, html, _ = http(s.base + "/ui/threads/alpha%2Fa1", headers={"Authorization": "Bearer tok-alpha"})
        assert status == 200 and "alpha/a1" in html  # a bearer header works too
        context.close()
        hosts = {urllib.parse.urlsplit(u).hostname for u in seen if not u.startswith(("data:", "about:"))}
        assert hosts == {"127.0.0.1"}, sorted(set(seen))
    finally:
        s.kill()
