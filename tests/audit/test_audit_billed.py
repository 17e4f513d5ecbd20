"""Every billed attempt is in the record: a model call against a loopback OpenAI-compatible server that answers 503
once, times out once (the client's 1 s timeout, the server holding its answer 3 s) and is SIGKILLed mid-call, then
resumed in a new process; then a fork of it runs its own call. The server logs every request with what it billed
(also the answers the client abandoned); the record must account for each one: its usage where the server sent it,
an attempt marked ``timeout`` or a call marked ``lost`` (tokens unknown to the client) where it did not.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from support.audit_child import Proc
from support.billed_child import build_graph
from support.openai_server import FakeOpenAIServer, completion, error, slow
from support.waiting import wait_for

from graphckpt.savers.sqlite import SqliteSaver

pytestmark = pytest.mark.slow

CHILD = Path(__file__).parents[1] / "support" / "billed_child.py"


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as s:
        yield s


def reconcile(record: Mapping[str, Any], log: Sequence[tuple[str | None, int, Any]], thread: str) -> dict[str, int]:
    """Match the record's HTTP attempts of ``thread``'s own calls with the server's log, key by key in order: a
    recorded attempt with usage bills exactly that; a ``timeout`` attempt or a ``lost`` call is one request the server
    answered whose usage the client never read. Returns the sums."""
    own = [c for c in record["calls"] if c["thread_id"] == thread and c.get("model")]
    requests = [r for r in record["requests"] if r["thread_id"] == thread]
    served: dict[str, list[tuple[int, Any]]] = {}
    for key, status, tokens in log:
        if key is not None and key.startswith(f"{thread}:"):
            served.setdefault(key, []).append((status, tokens))
    known = unknown = billed = 0
    assert {c["key"] for c in own} == set(served), (own, served)
    for key, answers in served.items():
        expected: list[Mapping[str, Any] | None] = []
        for call in sorted((c for c in own if c["key"] == key), key=lambda c: c["started_at"]):
            mine = [r for r in requests if r["task"] == call["task"] and r["call"] == call["seq"]]
            expected += sorted(mine, key=lambda r: r["request"])
            if call["status"] == "lost":
                expected.append(None)  # the request in flight when its process died
        assert len(expected) == len(answers), (key, expected, answers)
        for mine, (status, tokens) in zip(expected, answers, strict=True):
            billed += sum(tokens) if tokens else 0
            if mine is None or mine["outcome"] == "timeout":
                assert tokens is not None and (mine is None or "usage" not in mine)
                unknown += sum(tokens)
            elif mine["outcome"] == "http_error":
                assert (mine["status"], tokens, mine.get("usage")) == (status, None, None)
            else:
                assert mine["outcome"] == "ok" and status == 200
                usage = mine["usage"]
                assert (usage["prompt_tokens"], usage["completion_tokens"]) == tokens
                known += sum(tokens)
    return {"known": known, "unknown": unknown, "billed": billed}


def test_every_billed_attempt_is_in_the_record(
    tmp_path: Path, server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "billed.db"
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "test-key", "GRAPHCKPT_OFFLINE": "0"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    server.script(
        error(503, "overloaded"),
        completion("the plan", prompt_tokens=11, completion_tokens=5),
        slow(completion("too late", prompt_tokens=13, completion_tokens=4), max_wait=3),  # the client gives up at 1 s
        slow(completion("never read", prompt_tokens=17, completion_tokens=2), max_wait=60),  # killed meanwhile
    )
    app = build_graph().compile(saver=SqliteSaver(db))
    try:
        child = Proc(db, "t", env, child=CHILD)
        try:
            child.wait_for("commit 1")
            wait_for(lambda: server.request_count == 4, 30, what="the retried reply request")
            pid = child.proc.pid
            child.kill()
        finally:
            child.close()
            server.release.set()
        server.script(completion("the answer", prompt_tokens=19, completion_tokens=6))
        child = Proc(db, "t", env, child=CHILD)
        try:
            assert child.wait_for("done") == "done done"
        finally:
            child.close()

        record = app.audit("t")
        outcomes = [(r["node"], r["request"], r["outcome"], r.get("status")) for r in record["requests"]]
        assert outcomes == [
            ("plan", 1, "http_error", 503),
            ("plan", 2, "ok", 200),
            ("reply", 1, "timeout", None),
            ("reply", 1, "ok", 200),
        ]
        assert [(c["node"], c["status"]) for c in record["calls"]] == [
            ("plan", "finished"),
            ("reply", "lost"),
            ("reply", "finished"),
        ]
        lost = record["calls"][1]
        assert lost["reason"] == "owner gone"
        assert (lost["owner"]["host"], lost["owner"]["pid"]) == (socket.gethostname(), pid)
        assert lost["owner"]["heartbeat_at"] <= lost["finished_at"]

        sums = reconcile(record, server.log, "t")
        own = record["spend"]["own"]
        assert sums["billed"] == 11 + 5 + 13 + 4 + 17 + 2 + 19 + 6
        assert sums["known"] == own["tokens"] == 11 + 5 + 19 + 6
        assert sums["known"] + sums["unknown"] == sums["billed"]
        assert (own["lost_calls"], own["failed_requests"], own["unknown_requests"]) == (1, 2, 1)

        # the CLI says the same: the failed requests, the lost call's reason
        out = subprocess.run(
            [sys.executable, "-m", "graphckpt", "--db", str(db), "history", "t"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert out.returncode == 0, out.stderr
        assert "step 1 plan request 1 key" in out.stdout and ": HTTP 503, no usage" in out.stdout
        assert "step 2 reply request 1 key" in out.stdout and ": timeout, tokens unknown" in out.stdout
        assert f"owner gone (host {socket.gethostname()}, pid {pid}, last heartbeat" in out.stdout
        assert "2 failed requests (0 tokens; 1 timed out, tokens unknown)" in out.stdout

        # a fork after the plan runs its own reply: a timeout, then the answer; its own record adds up the same way
        server.release.clear()
        server.script(
            slow(completion("too late again", prompt_tokens=23, completion_tokens=3), max_wait=3),
            completion("the other answer", prompt_tokens=29, completion_tokens=7),
        )
        after_plan = next(s for s in app.history("t") if s.step == 1)
        app.fork("t", after_plan.checkpoint_id, new_thread_id="t-alt")
        assert app.resume("t-alt").values.final == "the other answer"
        forked = app.audit("t-alt")
        sums = reconcile(forked, server.log, "t-alt")
        spend = forked["spend"]
        assert sums == {"known": 29 + 7, "unknown": 23 + 3, "billed": 23 + 3 + 29 + 7}
        assert spend["own"]["tokens"] == 36 and spend["own"]["unknown_requests"] == 1
        assert spend["inherited"]["tokens"] == 16 and spend["inherited"]["failed_requests"] == 1
        # every token the server billed, over both threads
        assert server.billed_tokens == record["spend"]["own"]["tokens"] + 13 + 4 + 17 + 2 + spend["own"]["tokens"] + 26
    finally:
        app.close()
