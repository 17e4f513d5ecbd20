"""The UI's workbench pages in a real headless Chromium against a real ``graphckpt serve`` (issue 30): a step view
of a 16-way ``Send`` fan-out and of a subgraph step, whose difference matches ``graphckpt diff``; a conversation
view of a ``MessagesState`` thread with its tool call folded, edited and forked from a message (POST-redirect-GET);
two branches side by side; the inbox sorted by waiting time; a take-over of a thread whose owner was SIGKILLed (the
thread records no graph, so the server's recovery leaves it crashed and only the button takes it over). Every new
page at 1280x800 and 390x844: no console error (CSP enforced), no axe violation; screenshots in
``tests/artifacts/ui/`` (``$GRAPHCKPT_UI_ARTIFACTS``).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import DATA, SUPPORT, TESTS, child_env
from support.serving import free_port
from support.ui_serve import SERVED, Server, http
from support.ui_world import GATED, GATED_NODES, gate
from support.waiting import wait_for
from support.workbench_world import CHAT, FAN, PIECES, STREAMING, WIDTH

playwright_sync = pytest.importorskip("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
AXE = DATA / "axe-4.14.1.min.js"
SIZES = {"desktop": (1280, 800), "phone": (390, 844)}
ARTIFACTS = Path(os.environ.get("GRAPHCKPT_UI_ARTIFACTS", TESTS / "artifacts" / "ui"))

pytestmark = [
    pytest.mark.skipif(
        not Path(CHROMIUM).exists() and not os.environ.get("CI"), reason="needs Debian chromium at /usr/bin/chromium"
    ),
    pytest.mark.xdist_group("ui_workbench"),
]


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bench") / "bench.db"


@pytest.fixture(scope="module")
def server(db: Path) -> Iterator[Server]:
    # the gated graph first: the default graph, which runs a thread that records none (the take-over's orphan)
    s = Server(
        db, free_port(), lease_seconds=30.0, graphs=(GATED, *(g for g in SERVED if g != GATED), FAN, CHAT, STREAMING)
    )
    s.start()
    for thread, graph, given in (
        ("fan-0", FAN, {"topic": "rain"}),
        ("chat-0", CHAT, {"messages": [{"role": "user", "content": "Weather in Oslo?"}]}),
    ):
        status, text, _ = http(
            s.base + f"/threads/{thread}/runs/wait", json_body={"assistant_id": graph, "input": given}
        )
        assert status == 200, text
    yield s
    s.kill()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, server: Server, db: Path) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800}, base_url=server.base)
    pg = context.new_page()
    pg.set_default_timeout(20_000)
    errors: list[str] = []
    pg.on("console", lambda m: errors.append(f"{pg.url}: {m.text}") if m.type == "error" else 0)
    pg.on("pageerror", lambda e: errors.append(f"{pg.url}: {e}"))
    pg.problems = []  # what look() found: axe violations at either size
    yield pg
    context.close()
    assert not pg.problems, pg.problems
    assert not errors, errors


def look(page: Any, name: str) -> None:
    """The page as it is now at 1280x800 and 390x844: a screenshot of each (``ARTIFACTS/{name}-{size}.png``) and
    axe's violations (into ``page.problems``, asserted at the test's end with the console errors)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    axe = AXE.read_text()
    for size, (w, h) in SIZES.items():
        page.set_viewport_size({"width": w, "height": h})
        page.screenshot(path=str(ARTIFACTS / f"{name}-{size}.png"), full_page=True)
        page.evaluate("(src) => { if (!window.axe) { (0, eval)(src); } }", axe)
        result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
        page.problems += [
            f"{name} {size}: {v['id']} ({v['impact']}) {v['nodes'][0]['html']}" for v in result["violations"]
        ]
    page.set_viewport_size({"width": 1280, "height": 800})


def cli_diff(db: Path, a: str, b: str, graph: str) -> dict[str, Any]:
    argv = [sys.executable, "-m", "graphckpt", "--db", str(db), "diff", a, b, "--graph", graph, "--json"]
    done = subprocess.run(argv, env=child_env(), capture_output=True, text=True, timeout=60, check=True)
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def test_the_step_view_of_a_16_way_fan_out_and_of_a_subgraph_step(page: Any, server: Server, db: Path) -> None:
    page.goto("/ui/threads/fan-0")
    page.click("text=Last step")  # the subgraph step
    page.wait_for_url("**/ui/steps/fan-0@*")
    sub = page.locator(".bars li.task")
    assert sub.count() == 1 and "subgraph" in sub.inner_text()
    page.click(".child a:has-text('tag')")  # nested: the child thread's step
    page.wait_for_url("**/ui/steps/fan-0%7Ccheck*")
    assert "A subgraph step" in page.inner_text("main") and "support.workbench_world:" in page.inner_text(".bars")
    look(page, "step-subgraph-child")
    page.goto("/ui/threads/fan-0")
    page.click("text=Last step")
    page.click("a[rel=prev]")  # the fan-out step
    fan_url = page.url
    look(page, "step-fan-out")
    bars = page.locator(".bars li.task")
    assert bars.count() == WIDTH and page.locator(".bars li.task.send svg.track rect.bar").count() == WIDTH
    assert all("support.workbench_world:" in t for t in bars.all_inner_texts())  # the node's module:line
    calls = page.locator(".bars table.calls tbody tr")  # each task's journaled call: status, tokens, cost
    assert calls.count() == WIDTH and all("model:square" in t and "finished" in t for t in calls.all_inner_texts())
    tokens = sorted(int(r.locator("td").nth(4).inner_text()) for r in calls.all())
    assert tokens == [10 + i + 5 for i in range(WIDTH)]
    assert page.inner_text(".facts .tokens") == str(sum(tokens)) and page.inner_text(".facts .cost").startswith("$0.0")
    widths = page.locator(".bars svg.track rect.bar").evaluate_all("l => l.map(r => r.getAttribute('width'))")
    assert len(set(widths)) > 1, widths  # each task's own time (they sleep 0 to 30 ms), not the node's average
    checkpoint = fan_url.rsplit("@", 1)[1]
    parent = str(page.get_attribute("a[rel=prev]", "href")).rsplit("@", 1)[1]  # a thread of one line: the parent
    expected = cli_diff(db, f"fan-0@{parent}", f"fan-0@{checkpoint}", FAN)  # through the graph, as the UI reads
    rows = page.locator(".difference table.diff tbody tr")
    shown = [r.locator("th code").inner_text() for r in rows.all()]
    assert shown == [c["path"] for c in expected["changes"]] and len(shown) == WIDTH, shown
    afters = [json.loads(r.locator(".after").inner_text()) for r in rows.all()]
    assert afters == [c["after"] for c in expected["changes"]]  # values, not only paths


def test_the_conversation_view_folds_tool_calls_and_forks_an_edited_message(page: Any, server: Server) -> None:
    page.goto("/ui/threads/chat-0")
    page.click("text=Conversation")
    page.wait_for_url("**/ui/chat/chat-0")
    roles = page.locator("ol.chat > li .who").all_inner_texts()
    assert [r.split(" ")[0].lower() for r in roles] == ["user", "assistant", "tool", "assistant"]
    call = page.locator("ol.chat details.toolcall")
    assert call.count() == 1 and call.get_attribute("open") is None and "weather" in call.inner_text()
    assert "You asked: Weather in Oslo?" in page.inner_text("ol.chat > li:last-child")
    look(page, "chat")
    first = page.locator("ol.chat > li").first
    first.locator("summary:has-text('Edit this message')").click()
    first.locator("textarea").fill("Weather in Bergen?")
    first.locator("input[name=new_thread_id]").fill("chat-bergen")
    first.locator("button:has-text('Fork with this message')").click()
    page.wait_for_url("**/ui/chat/chat-bergen")  # a GET: a reload never forks again

    def answered() -> bool:
        page.reload()
        return "You asked: Weather in Bergen?" in page.inner_text("ol.chat")

    wait_for(answered, 30, what="the edited branch to answer")
    assert page.locator("ol.chat > li").count() == 4 and "Weather in Oslo" not in page.inner_text("ol.chat")
    page.goto("/ui/compare?a=chat-0&b=chat-bergen")
    assert "diverge after" in page.inner_text(".forkpoint")
    sides = page.locator("section.side")
    assert sides.count() == 2 and all("tokens" in t.lower() and " ms" in t for t in sides.all_inner_texts())
    heads = page.locator("table.diff").last.inner_text()
    assert "Bergen" in heads and "Oslo" in heads
    look(page, "compare")


def test_the_conversation_streams_a_live_answer_piece_by_piece(page: Any, server: Server, db: Path) -> None:
    asked = {"messages": [{"role": "user", "content": "Weather in Oslo?"}]}
    status, text, _ = http(
        server.base + "/threads/stream-0/runs", json_body={"assistant_id": STREAMING, "input": asked}
    )
    assert status == 200, text

    def at_answer() -> bool:
        state = json.loads(http(server.base + "/threads/stream-0/state")[1])
        return bool(state.get("next") == ["answer"])

    wait_for(at_answer, 30, what="the run to reach its streaming answer")
    page.goto("/ui/chat/stream-0")
    assert str(page.get_attribute("#chatlive", "data-stream")).endswith("/ui/events/stream-0?modes=messages")
    wait_for(lambda: page.get_attribute("#chatlive", "data-connected") == "1", 20, what="the page's stream to open")
    gate(db, "stream").touch()
    seen: list[str] = []

    def streamed() -> bool:
        bubble = page.locator("#chatlive li.streaming .text")
        if bubble.count():
            text = bubble.inner_text()
            if not seen or seen[-1] != text:
                seen.append(text)
        return bool(seen) and seen[-1].startswith("".join(PIECES[:4]))

    wait_for(streamed, 30, interval=0.05, what="the answer to stream in")
    assert len(seen) >= 2 and all(b.startswith(a) for a, b in itertools.pairwise(seen)), seen
    assert page.get_attribute("#chatlive", "data-status") == "running"  # pieces, before the step committed
    look(page, "chat-streaming")

    def stored() -> bool:
        return (
            page.locator("#chatlive li.streaming").count() == 0
            and page.get_attribute("#chatlive", "data-status") == "done"
        )

    wait_for(stored, 30, what="the stored answer to replace the streamed one")
    assert page.locator("ol.chat > li").last.inner_text().endswith("".join(PIECES))
    look(page, "chat-streamed")


def test_the_inbox_is_sorted_by_waiting_time(page: Any, server: Server) -> None:
    for thread in ("ask-old", "ask-new"):
        status, text, _ = http(
            server.base + f"/threads/{thread}/runs/wait",
            json_body={"assistant_id": "support.ui_world:approval_graph", "input": {"service": thread}},
        )
        assert status == 200, text
    page.goto("/ui/interrupts")
    order = [t.split(" ")[0] for t in page.locator("article.inbox h2").all_inner_texts()]
    assert order.index("ask-old") < order.index("ask-new")
    assert all("waiting" in t for t in page.locator("article.inbox .waiting").all_inner_texts())
    look(page, "inbox")


def test_take_over_a_thread_whose_owner_was_killed(page: Any, server: Server, db: Path) -> None:
    owner = subprocess.Popen(
        [sys.executable, str(SUPPORT / "workbench_world.py"), "untagged", str(db), "orphan"],
        env=child_env(),
        cwd=db.parent,
    )
    try:
        wait_for(lambda: "orphan" in http(server.base + "/ui/?status=running")[1], 60, what="the owner to run it")
    finally:
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait(10)
    page.goto("/ui/threads/orphan")
    wait_for(lambda: page.reload() or page.get_attribute("#live", "data-status") == "crashed", 30, what="crashed")
    assert "crashed since" in page.inner_text(".facts")
    look(page, "crashed")
    for node in GATED_NODES:
        gate(db, node).touch()
    with page.expect_navigation(url="**/ui/threads/orphan"):  # the crashed page follows the thread: it redraws
        page.locator("button.takeover").click(force=True)

    def done() -> bool:
        return bool(page.get_attribute("#live", "data-status") == "done")

    wait_for(done, 30, what="the taken-over thread to finish")
    _, text, _ = http(server.base + "/threads/orphan/state")
    assert json.loads(text)["values"]["log"][-1] == "report done"
    assert "take-over via UI" in http(server.base + "/ui/threads/orphan")[1]  # the audit record says who
