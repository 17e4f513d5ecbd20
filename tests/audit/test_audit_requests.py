"""Each HTTP attempt of a model call is its own audit entry (outcome, usage when the server sent one); totals add
the failed attempts' tokens; a lost call says why, from the lease its takeover found."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel
from support.openai_server import FakeOpenAIServer, Reply, completion, error, slow

from graphckpt import END, START, NodeError, Saver, StateGraph
from graphckpt.audit import lost_marks
from graphckpt.records import Recorded
from graphckpt.savers._owners import identity
from graphckpt.savers.base import Lease, Owner, ThreadRecord
from nodes import LLMRetry, chat_node


class Q(BaseModel):
    question: str = "why"
    answer: str = ""


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as s:
        yield s


def build(server: FakeOpenAIServer, saver: Saver, **kwargs: Any) -> Any:
    g = StateGraph(Q)
    node = chat_node(
        "{question}",
        output_key="answer",
        model="fake-model",
        base_url=server.base_url,
        api_key="k",
        retry=LLMRetry(initial_delay=0.01, max_delay=0.05),
        **kwargs,
    )
    g.add_node("ask", node)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    return g.compile(saver=saver)


async def test_each_http_attempt_is_its_own_entry(server: FakeOpenAIServer, saver: Saver) -> None:
    server.script(
        error(503, "overloaded"),
        slow(completion("late", prompt_tokens=13, completion_tokens=4), max_wait=2),
        completion("because", prompt_tokens=11, completion_tokens=5),
    )
    app = build(server, saver, timeout=0.5)
    done = await app.ainvoke({}, thread_id="q")
    assert done.values.answer == "because"
    record = await app.aaudit("q")
    (call,) = record["calls"]
    assert call["status"] == "finished" and call["usage"] == {"prompt_tokens": 11, "completion_tokens": 5}
    requests = [(r["request"], r["outcome"], r.get("status"), r.get("usage")) for r in record["requests"]]
    assert requests == [
        (1, "http_error", 503, None),
        (2, "timeout", None, None),  # billed by the server (13 + 4), never received by the client
        (3, "ok", 200, {"prompt_tokens": 11, "completion_tokens": 5}),
    ]
    assert {(r["key"], r["call"]) for r in record["requests"]} == {(call["key"], call["seq"])}
    own = record["spend"]["own"]
    assert (own["tokens"], own["calls"], own["failed_requests"], own["unknown_requests"]) == (16, 1, 2, 1)
    assert [(status, tokens) for _, status, tokens in server.log] == [(503, None), (200, (13, 4)), (200, (11, 5))]
    # the journaled answer is the final one, and it is never requested again
    again = await app.aresume("q")
    assert again.values.answer == "because" and server.request_count == 3


async def test_a_failed_attempt_with_usage_counts_its_tokens(server: FakeOpenAIServer, saver: Saver) -> None:
    body = {"id": "x", "object": "chat.completion", "created": 1, "model": "fake-model", "choices": []}
    server.script(Reply(200, {**body, "usage": {"prompt_tokens": 9, "completion_tokens": 0, "total_tokens": 9}}))
    app = build(server, saver)
    with pytest.raises(NodeError, match="returned no choices"):
        await app.ainvoke({}, thread_id="bad")
    record = await app.aaudit("bad")
    assert [c["status"] for c in record["calls"]] == ["failed"]
    (request,) = record["requests"]
    assert (request["outcome"], request["status"], request["usage"]) == (
        "error",
        200,
        {"prompt_tokens": 9, "completion_tokens": 0},
    )
    own = record["spend"]["own"]
    assert (own["tokens"], own["failed_tokens"], own["calls"]) == (9, 9, 0)  # billed, never used


def _record(lease: Lease | None) -> ThreadRecord:
    return ThreadRecord("t", "cp", 1, "running", "run", 0.0, 0.0, lease=lease)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(30)
    return proc.pid


def test_a_lost_call_names_why_from_the_lease_its_takeover_found() -> None:
    recorded = Recorded()
    recorded.starts[("task", 0)] = {"effect": 0, "name": "chat m", "key": "t:task:0"}
    recorded.starts[("task", 1)] = {"effect": 1, "name": "chat m", "key": "t:task:1"}
    recorded.finishes[("task", 0)] = {"status": "finished"}
    now = 1_000.0
    elsewhere = Owner("w1", "another-host", 4242)

    def why(lease: Lease | None) -> dict[str, Any]:
        ((task, seq, end),) = lost_marks(recorded, _record(lease), now)
        assert (task, seq, end["status"], end["finished_at"]) == ("task", 1, "lost", now)
        return end

    expired = why(Lease(elsewhere, 3, heartbeat_at=now - 40, lease_until=now - 10))
    assert expired["reason"] == "owner gone"
    assert expired["owner"] == {"host": "another-host", "pid": 4242, "worker": "w1", "heartbeat_at": 960.0, "epoch": 3}
    assert why(Lease(elsewhere, 3, heartbeat_at=now - 1, lease_until=now + 20))["reason"] == "lease taken over"
    dead_pid = _dead_pid()  # its identity as a lease of this host records it, with a start time no process has
    dead_here = Owner("w2", socket.gethostname(), dead_pid, identity().rpartition(":")[0] + ":1")
    assert why(Lease(dead_here, 4, heartbeat_at=now - 1, lease_until=now + 20))["reason"] == "owner gone"
    assert why(None) == {"status": "lost", "finished_at": now, "reason": "stopped"}
    recorded.finishes[("task", 1)] = {"status": "failed"}
    assert lost_marks(recorded, _record(None), now) == []
