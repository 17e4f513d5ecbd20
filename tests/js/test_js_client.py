"""LangGraph's JavaScript client, ``@langchain/langgraph-sdk`` (npm, tests/js/package-lock.json), run by node
against a real ``graphckpt serve``: a thread is created, a run is streamed with ``streamMode: ["values",
"messages-tuple", "updates"]`` and cut after the first piece of the model's answer, the client reconnects with the
last event id it saw (``runs.joinStream``) and gets the rest of the run, nothing twice, up to the approval interrupt,
and answers it with ``command: {resume}``. A join with the client's defaults replays the run in the modes it was
started with, and a run streamed with ``onDisconnect: "cancel"`` is cancelled when the client leaves. The model is
the loopback OpenAI-compatible server (its streamed reply is held after the first piece until the client has been
cut), the agent ``support.approval_chat:chat``."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

from support.js import JS, node, require_node_modules
from support.openai_server import FakeOpenAIServer, held
from support.serving import Served

AGENT = "chat=support.approval_chat:chat"
COUNTER = "counter=support.server_graphs:counter"


def _read(proc: subprocess.Popen[str], phase: str) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(10)
        raise AssertionError(
            f"node exited ({proc.returncode}) before {phase!r}: {proc.stderr.read() if proc.stderr else ''}"
        )
    got = json.loads(line)
    assert got["phase"] == phase, got
    return dict(got)


def _text(parts: list[dict[str, Any]]) -> str:
    """The model's answer as the ``messages`` events carried it (``[chunk, metadata]`` pieces)."""
    return "".join(p["data"][0]["content"] for p in parts if p["event"] == "messages")


def test_js_client_streams_reconnects_and_resumes(serve: Callable[..., Served]) -> None:
    require_node_modules()
    with FakeOpenAIServer() as model:
        model.script(held(max_wait=20.0))
        server = serve([AGENT, COUNTER], env={"OPENAI_BASE_URL": model.base_url, "SERVE_TEST_DELAY": "0.05"})
        with subprocess.Popen(
            [node(), str(JS / "client.mjs"), server.url],
            cwd=JS,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as proc:
            try:
                thread = _read(proc, "thread")["thread"]
                cut = _read(proc, "cut")
                model.release.set()  # the model finishes its answer while the client is away
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
                joined = _read(proc, "joined")
                resumed = _read(proc, "resumed")
                assembled = _read(proc, "assembled")["assembled"]
                left = _read(proc, "left")
                assert proc.wait(20) == 0, proc.stderr.read() if proc.stderr else ""
            finally:
                if proc.poll() is None:
                    proc.kill()

    tid = thread["thread_id"]
    assert thread["metadata"]["client"] == "node" and thread["status"] == "idle"
    run = cut["run"]
    assert run["thread_id"] == tid and run["run_id"]  # from the response's Content-Location
    first, rest = cut["first"], joined["rest"]
    events = [p["event"] for p in first]
    assert events[0] == "metadata" and first[0]["data"]["run_id"] == run["run_id"]
    assert first[-1]["event"] == "messages"
    values = [p["data"] for p in first if p["event"] == "values"]
    assert values[0]["messages"][0]["content"] == "hello from node"
    # every event is seen once across the cut (two modes' renderings of one durable event share its id)
    seen = [(p["id"], p["event"]) for p in first + rest if p["id"]]
    assert len(seen) == len(set(seen))
    both = first + rest
    assert _text(both) == "one two three"
    chunk, meta = next(p["data"] for p in both if p["event"] == "messages")
    assert chunk["type"] == "AIMessageChunk" and chunk["id"] and meta["langgraph_node"] == "answer"
    [update] = [p["data"]["answer"] for p in rest if p["event"] == "updates" and "answer" in p["data"]]
    assert update["messages"] == [{"type": "ai", "content": "one two three", "id": chunk["id"]}]
    interrupt = [p["data"]["__interrupt__"] for p in rest if p["event"] == "updates" and "__interrupt__" in p["data"]]
    assert interrupt and interrupt[0][0]["value"] == {"question": "Send this answer?", "draft": "one two three"}
    # a join with the client's defaults replays the run in the modes it was started with
    again = joined["again"]
    assert {p["event"] for p in again} == {"values", "updates", "messages", "end"}
    assert _text(again) == "one two three"
    assert [p["data"] for p in again if p["event"] == "values"] == [p["data"] for p in both if p["event"] == "values"]
    assert joined["thread"]["status"] == "interrupted"
    assert joined["state"]["next"] == ["approve"]
    assert joined["state"]["tasks"][0]["interrupts"][0]["value"]["draft"] == "one two three"
    assert joined["run"]["status"] == "interrupted"

    # command.resume: the approved answer is the thread's last message, with the streamed answer's id
    final = [p["data"] for p in resumed["resumed"] if p["event"] == "values"][-1]
    last = final["messages"][-1]
    assert last["type"] == "ai" and last["content"] == "one two three" and last["id"] == chunk["id"]
    assert final["approved"] is True
    assert resumed["resumed"][-1]["event"] != "error"
    assert resumed["run"]["status"] == "success"
    assert resumed["thread"]["status"] == "idle"
    assert resumed["state"]["next"] == [] and resumed["state"]["values"]["approved"] is True
    assert model.request_count == 2  # the resumed turn did not call the model again (the 2nd: "messages" below)
    whole = resumed["threadParts"]
    assert {p["event"] for p in whole} == {"values", "updates", "end"} and whole[-1]["event"] == "end"
    assert [p["data"] for p in whole if p["event"] == "values"][-1] == final

    # LangGraph's "messages" mode: metadata once, the message so far after each piece, the whole one at its end
    kinds = [p["event"] for p in assembled]
    assert kinds[0] == "metadata" and kinds[-1] == "end"
    assert kinds[1:-1] == ["messages/metadata"] + ["messages/partial"] * 3 + ["messages/complete"], kinds
    [(mid, meta)] = assembled[1]["data"].items()
    assert meta["metadata"]["langgraph_node"] == "answer"
    texts = [p["data"][0]["content"] for p in assembled if p["event"] in ("messages/partial", "messages/complete")]
    assert texts == ["echo: ", "echo: partial ", "echo: partial please", "echo: partial please"]
    assert {p["data"][0]["id"] for p in assembled[2:-1]} == {mid} and assembled[-2]["data"][0]["type"] == "ai"

    # a run streamed with onDisconnect: "cancel" is cancelled when the client leaves, long before its end
    assert left["seen"][:2] == [0, 1]
    assert left["run"]["status"] == "cancelled"
    assert left["state"]["values"]["n"] < 400
