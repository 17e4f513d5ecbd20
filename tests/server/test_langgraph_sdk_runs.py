"""Run semantics of LangGraph's run API through the official ``langgraph-sdk`` client against a real ``graphckpt
serve``: ``multitask_strategy`` (reject, enqueue, interrupt, rollback), ``runs.delete``, ``webhook``, per-run
``interrupt_before``/``interrupt_after``, ``config`` and ``context``; a cancel that keeps paid work. A run of
``support.server_graphs:counter`` ticks ``n`` up to ``limit``, one step each (``SERVE_TEST_DELAY`` seconds long)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from support.openai_server import FakeOpenAIServer, slow
from support.serving import Served, wait_for

from graphckpt.worker import CANCEL_GRACE

COUNTER = "support.server_graphs:counter"
CONFIGURED = "support.server_graphs:configured"
ASKING = "support.server_graphs:asking"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One server for the module (each test uses its own threads)."""
    from langgraph_sdk import get_sync_client

    args = ["--webhook-host", "127.0.0.1"]
    server = Served(
        tmp_path_factory.mktemp("runs"), [COUNTER, CONFIGURED], env={"SERVE_TEST_DELAY": "0.15"}, args=args
    ).start()
    try:
        with get_sync_client(url=server.url, timeout=httpx.Timeout(30.0)) as c:
            yield c
    finally:
        server.kill()


def _at_step(client: Any, thread_id: str, step: int) -> None:
    def reached() -> bool:
        try:
            meta = client.threads.get_state(thread_id)["metadata"]
        except httpx.HTTPStatusError:  # no checkpoint yet
            return False
        return bool(meta) and meta["step"] >= step

    wait_for(reached, 30, interval=0.05, what=f"step {step} of thread {thread_id}")


def test_reject_refuses_and_enqueue_queues(client: Any) -> None:
    tid = client.threads.create()["thread_id"]
    first = client.runs.create(tid, COUNTER, input={"limit": 4})
    with pytest.raises(httpx.HTTPStatusError) as refused:
        client.runs.create(tid, COUNTER, input={"limit": 6}, multitask_strategy="reject")
    assert refused.value.response.status_code == 409
    queued = client.runs.create(tid, COUNTER, input={"limit": 6}, multitask_strategy="enqueue")
    assert client.runs.join(tid, queued["run_id"])["n"] == 6
    assert client.runs.get(tid, first["run_id"])["status"] == "success"


def test_interrupt_stops_the_running_run_and_keeps_its_work(client: Any) -> None:
    tid = client.threads.create()["thread_id"]
    first = client.runs.create(tid, COUNTER, input={"limit": 100})
    _at_step(client, tid, 3)
    second = client.runs.create(tid, COUNTER, input={"limit": 1}, multitask_strategy="interrupt")
    assert client.runs.get(tid, first["run_id"])["status"] == "interrupted"  # LangGraph's status for it
    assert list(client.runs.join_stream(tid, first["run_id"], last_event_id="0"))  # its stream ends
    done = client.runs.join(tid, second["run_id"])
    kept = done["log"]  # the interrupted run's ticks stay in the thread: the new run starts from them
    assert len(kept) >= 3 and kept[:3] == ["tick 1", "tick 2", "tick 3"]
    assert done["limit"] == 1 and client.runs.get(tid, second["run_id"])["status"] == "success"


def test_rollback_stops_the_running_run_and_undoes_it(client: Any) -> None:
    tid = client.threads.create()["thread_id"]
    assert client.runs.wait(tid, COUNTER, input={"limit": 2})["n"] == 2
    first = client.runs.create(tid, COUNTER, input={"limit": 100})
    _at_step(client, tid, 4)
    second = client.runs.create(tid, COUNTER, input={"limit": 3}, multitask_strategy="rollback")
    with pytest.raises(httpx.HTTPStatusError) as gone:  # as LangGraph, a rolled back run is deleted
        client.runs.get(tid, first["run_id"])
    assert gone.value.response.status_code == 404
    done = client.runs.join(tid, second["run_id"])
    assert done["n"] == 3 and done["log"] == ["tick 1", "tick 2", "tick 3"]  # from the state before the rolled back run


def test_rollback_of_a_threads_first_run_starts_it_afresh(client: Any) -> None:
    tid = client.threads.create()["thread_id"]
    client.runs.create(tid, COUNTER, input={"limit": 100})
    _at_step(client, tid, 2)
    second = client.runs.create(tid, COUNTER, input={"limit": 2}, multitask_strategy="rollback")
    assert client.runs.join(tid, second["run_id"]) == {"n": 2, "limit": 2, "log": ["tick 1", "tick 2"], "last": ""}


def test_delete_an_ended_run(client: Any) -> None:
    tid = client.threads.create()["thread_id"]
    running = client.runs.create(tid, COUNTER, input={"limit": 100})
    with pytest.raises(httpx.HTTPStatusError) as busy:
        client.runs.delete(tid, running["run_id"])
    assert busy.value.response.status_code == 409 and "cancel it" in busy.value.response.text
    client.runs.cancel(tid, running["run_id"], wait=True)
    assert client.runs.delete(tid, running["run_id"]) is None
    assert running["run_id"] not in [r["run_id"] for r in client.runs.list(tid)]
    with pytest.raises(httpx.HTTPStatusError) as gone:
        client.runs.get(tid, running["run_id"])
    assert gone.value.response.status_code == 404
    assert client.threads.get_state(tid)["values"]["n"] >= 0  # the thread stays


class _Hooks(ThreadingHTTPServer):
    """A webhook receiver on loopback: answers 503 to the first ``fail`` POSTs, then 200; keeps the bodies."""

    def __init__(self, fail: int) -> None:
        self.fail, self.bodies, self.attempts = fail, [], 0
        hooks = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers["Content-Length"]))
                hooks.attempts += 1
                ok = hooks.attempts > hooks.fail
                if ok:
                    hooks.bodies.append(json.loads(data))
                self.send_response(200 if ok else 503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


@pytest.fixture
def hooks() -> Iterator[_Hooks]:
    server = _Hooks(fail=2)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_webhook_posts_the_run_record_when_it_ends_retrying(client: Any, hooks: _Hooks) -> None:
    tid = client.threads.create()["thread_id"]
    run = client.runs.create(tid, COUNTER, input={"limit": 2}, webhook=hooks.url)
    wait_for(lambda: hooks.bodies, 30, interval=0.05, what="the webhook's POST")
    assert hooks.attempts == 3  # two 503 answers, then delivered
    (body,) = hooks.bodies
    assert body["run_id"] == run["run_id"] and body["thread_id"] == tid and body["status"] == "success"
    assert body["values"]["n"] == 2 and "webhook_sent_at" in body


@pytest.mark.parametrize(
    ("url", "why"),
    [("http://example.com/hook", "not an allowed webhook host"), ("ftp://127.0.0.1/x", "http:// or https://")],
)
def test_webhook_to_a_host_not_allowed_is_refused(client: Any, url: str, why: str) -> None:
    tid = client.threads.create()["thread_id"]
    with pytest.raises(httpx.HTTPStatusError) as refused:
        client.runs.create(tid, COUNTER, input={"limit": 1}, webhook=url)
    assert refused.value.response.status_code == 422
    assert "body.webhook" in refused.value.response.text and why in refused.value.response.text
    assert client.runs.list(tid) == []


def test_per_run_interrupts_stop_that_run_only(client: Any) -> None:
    tid = client.threads.create()["thread_id"]
    values = client.runs.wait(tid, COUNTER, input={"limit": 4}, interrupt_after=["tick"])
    assert values["n"] == 1
    state = client.threads.get_state(tid)
    assert state["next"] == ["tick"] and client.threads.get(tid)["status"] == "interrupted"
    assert client.runs.wait(tid, COUNTER)["n"] == 4  # a run without them goes through (they were that run's)

    parts = list(
        client.runs.stream(tid, COUNTER, input={"limit": 6}, interrupt_before="*", stream_mode=["updates", "values"])
    )
    interrupts = [p.data["__interrupt__"] for p in parts if isinstance(p.data, dict) and "__interrupt__" in p.data]
    assert {p.event for p in parts if isinstance(p.data, dict) and "__interrupt__" in p.data} == {"updates", "values"}
    assert interrupts[0] and client.threads.get_state(tid)["values"]["n"] == 4
    assert client.runs.wait(tid, COUNTER, command={"resume": None})["n"] == 6


@pytest.mark.parametrize("field", ["interrupt_before", "interrupt_after"])
def test_per_run_interrupt_of_an_unknown_node_is_refused(client: Any, field: str) -> None:
    tid = client.threads.create()["thread_id"]
    with pytest.raises(httpx.HTTPStatusError) as refused:
        client.runs.create(tid, COUNTER, input={"limit": 1}, **{field: ["tick", "nope"]})
    assert refused.value.response.status_code == 422
    assert f"body.{field}" in refused.value.response.text and "nope" in refused.value.response.text


def test_config_configurable_and_context_reach_the_nodes(client: Any) -> None:
    tid = client.threads.create()["thread_id"]
    config = {"configurable": {"user": "ada"}, "recursion_limit": 5}
    values = client.runs.wait(tid, CONFIGURED, input={}, config=config, context={"lang": "fr"})
    assert values["last"] == f"ada|{tid}|{{'lang': 'fr'}}"
    # an assistant's configurable and context are the runs' defaults; a run's own win
    aid = client.assistants.create(CONFIGURED, config={"configurable": {"user": "bob"}}, context={"lang": "de"})
    tid = client.threads.create()["thread_id"]
    assert client.runs.wait(tid, aid["assistant_id"], input={})["last"] == f"bob|{tid}|{{'lang': 'de'}}"
    tid = client.threads.create()["thread_id"]
    values = client.runs.wait(tid, aid["assistant_id"], input={}, context={"lang": "it"})
    assert values["last"] == f"bob|{tid}|{{'lang': 'it'}}"
    with pytest.raises(httpx.HTTPStatusError) as refused:
        client.runs.wait(tid, CONFIGURED, input={}, config={"callbacks": []})
    assert refused.value.response.status_code == 422 and "body.config.callbacks" in refused.value.response.text


@pytest.mark.parametrize("immediate", [False, True])
def test_cancel_keeps_a_paid_model_call_unless_asked_to_stop_at_once(
    serve: Callable[..., Served], immediate: bool
) -> None:
    """A cancel during a step's model call waits for the call to return and be journaled before it stops the run:
    the resumed run pays for no second call of that step. ``immediate=true`` stops the step at once: the call's
    answer is lost, and the resume calls again."""
    from langgraph_sdk import get_sync_client

    with FakeOpenAIServer() as model:
        model.script(slow(max_wait=30))
        server = serve([ASKING], env={"OPENAI_BASE_URL": model.base_url})
        with get_sync_client(url=server.url, timeout=httpx.Timeout(60.0)) as client:
            tid = client.threads.create()["thread_id"]
            run = client.runs.create(tid, ASKING, input={"limit": 2})
            wait_for(lambda: model.request_count == 1, 30, what="the model call in flight")
            cancelled: list[dict[str, Any]] = []
            params = {"immediate": "true"} if immediate else None
            canceller = threading.Thread(
                target=lambda: cancelled.append(client.runs.cancel(tid, run["run_id"], params=params))
            )
            canceller.start()
            if immediate:
                canceller.join(30)
                assert cancelled and cancelled[0]["status"] == "cancelled"
                model.release.set()
            else:
                asked = time.monotonic()
                # past the cancel's grace, it still waits for the call it would otherwise throw away
                wait_for(lambda: time.monotonic() - asked > 2 * CANCEL_GRACE, 10, what="the cancel's grace")
                assert canceller.is_alive() and not cancelled
                model.release.set()
                canceller.join(30)
                assert cancelled and cancelled[0]["status"] == "cancelled"
            if immediate:
                assert client.threads.get_state(tid)["values"]["n"] == 0  # the step was stopped midway
            values = client.runs.wait(tid, ASKING)  # resume the cancelled thread
            assert values["n"] == 2
            assert model.request_count == (3 if immediate else 2)  # the second step's call; immediate: the first again


@pytest.mark.parametrize("on_disconnect", ["cancel", "continue"])
def test_on_disconnect_of_a_streamed_run(client: Any, on_disconnect: str) -> None:
    tid = client.threads.create()["thread_id"]
    parts = client.runs.stream(tid, COUNTER, input={"limit": 20}, stream_mode="updates", on_disconnect=on_disconnect)
    run_id = next(p for p in parts if p.event == "metadata").data["run_id"]
    next(p for p in parts if p.event == "updates")
    parts.close()  # the client goes mid-run

    if on_disconnect == "cancel":
        wait_for(lambda: client.runs.get(tid, run_id)["status"] == "cancelled", 30, what="the run cancelled")
        assert client.threads.get_state(tid)["values"]["n"] < 20
    else:
        assert client.runs.join(tid, run_id)["n"] == 20


def test_command_update_and_goto(client: Any) -> None:
    tid = client.threads.create()["thread_id"]
    assert client.runs.wait(tid, COUNTER, input={"limit": 2})["n"] == 2
    values = client.runs.wait(tid, COUNTER, command={"update": {"limit": 4, "log": ["edited"]}, "goto": "tick"})
    assert values["n"] == 4 and values["log"] == ["tick 1", "tick 2", "edited", "tick 3", "tick 4"]
    values = client.runs.wait(tid, COUNTER, command={"update": {"last": "note"}})  # a done head stays done
    assert values["last"] == "note" and values["n"] == 4
    for command, why in [({"goto": "nope"}, "nope"), ({"goto": "tick", "resume": 1}, "not both")]:
        with pytest.raises(httpx.HTTPStatusError) as refused:
            client.runs.wait(tid, COUNTER, command=command)
        assert refused.value.response.status_code == 422
        assert "body.command" in refused.value.response.text and why in refused.value.response.text
