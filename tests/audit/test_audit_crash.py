"""The audit record after real crashes: a child process (``support/audit_child.py``) SIGKILLed inside a tool call and
inside a model call (the loopback OpenAI-compatible server holds its answer back), then resumed in new processes.

After each kill the thread's record shows the call as started and lost, with its idempotency key; after the
resume, as lost once and then finished (same key). The spend recorded equals what the server billed, split into
the tokens used and the calls lost, and a fork counts its own spend apart from what it inherits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.audit_child import Proc, build_graph
from support.openai_server import FakeOpenAIServer, completion, slow
from support.waiting import wait_for

from graphckpt.savers.sqlite import SqliteSaver

pytestmark = pytest.mark.slow

TOOL_CALL = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"city": "Oslo"}'}}


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as s:
        yield s


def test_kills_inside_a_tool_call_and_a_model_call(
    tmp_path: Path, server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "audit.db"
    env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "test-key", "GRAPHCKPT_OFFLINE": "0"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    server.script(
        completion(None, tool_calls=[TOOL_CALL], prompt_tokens=11, completion_tokens=5),
        slow(completion("It is 3 C in Oslo", prompt_tokens=13, completion_tokens=4), max_wait=30),
    )
    app = build_graph().compile(saver=SqliteSaver(db))
    try:
        # 1. killed inside the tool call
        child = Proc(db, "t", {**env, "AUDIT_KILL": "tool"})
        try:
            tool_key = child.wait_for("in-tool ").split(" ", 1)[1]
            child.kill()
        finally:
            child.close()
        record = app.audit("t")
        lost = [c for c in record["calls"] if c["status"] == "lost"]
        assert [(c["name"], c["key"], c["step"], c.get("pending")) for c in lost] == [
            ("execute_tool lookup", tool_key, 2, True)
        ]

        shown = subprocess.run(
            [sys.executable, "-m", "graphckpt", "--db", str(db), "show", "t", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        pending = json.loads(shown.stdout)["pending"]["calls"]
        assert [(c["status"], c["key"]) for c in pending] == [("lost", tool_key)]

        # 2. resumed: the tool fails (the thread is failed)
        child = Proc(db, "t", {**env, "AUDIT_FAIL": "tool"})
        try:
            assert child.finish() == 1
        finally:
            child.close()
        failed = app.audit("t")
        assert [(a["node"], a["type"], a.get("pending")) for a in failed["attempts"]] == [
            ("tools", "ConnectionError", True)
        ]

        # 3. resumed, then killed inside the model call of step 3 (the server holds its answer back)
        child = Proc(db, "t", env)
        try:
            child.wait_for("commit 2")
            wait_for(lambda: server.request_count == 2, 30, what="the second model call")
            child.kill()
        finally:
            child.close()
            server.release.set()
        record = app.audit("t")
        step2 = [(c["name"], c["status"], c["key"]) for c in record["calls"] if c["step"] == 2]
        assert step2 == [
            ("execute_tool lookup", "lost", tool_key),
            ("execute_tool lookup", "failed", tool_key),
            ("execute_tool lookup", "finished", tool_key),
        ]
        shown = subprocess.run(
            [sys.executable, "-m", "graphckpt", "--db", str(db), "show", "t", "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert json.loads(shown.stdout)["schema_version"] == 1
        (attempt,) = record["attempts"]
        assert (attempt["step"], attempt["node"], attempt.get("pending")) == (2, "tools", None)
        assert "ConnectionError: weather service unreachable" in attempt["traceback"]
        pending = [c for c in record["calls"] if c.get("pending")]
        assert [(c["name"], c["status"], c["model"]) for c in pending] == [("chat fake-model", "lost", "fake-model")]
        chat_key = pending[0]["key"]
        assert [k for k, _, _ in server.billed][-1] == chat_key  # the server billed the answer nobody read

        # 4. resumed to the end
        child = Proc(db, "t", env)
        try:
            assert child.wait_for("done") == "done done"
        finally:
            child.close()
        record = app.audit("t")
        calls = [(c["step"], c["name"], c["status"], c["key"]) for c in record["calls"]]
        assert calls == [
            (1, "chat fake-model", "finished", calls[0][3]),
            (2, "execute_tool lookup", "lost", tool_key),
            (2, "execute_tool lookup", "failed", tool_key),
            (2, "execute_tool lookup", "finished", tool_key),
            (3, "chat fake-model", "lost", chat_key),
            (3, "chat fake-model", "finished", chat_key),
        ]
        finished_chat = [c for c in record["calls"] if c["name"].startswith("chat") and c["status"] == "finished"]
        assert all(c["usage"]["prompt_tokens"] > 0 for c in finished_chat)

        # spend: what the checkpoints record equals what the server billed, split into used and lost
        total = record["spend"]["total"]
        # the same key was billed twice: first the answer the killed process never read, then the one used
        used_reply = next(c for c in finished_chat if c["key"] == chat_key)["usage"]
        assert [p + c for key, p, c in server.billed if key == chat_key] == [
            17,
            used_reply["prompt_tokens"] + used_reply["completion_tokens"],
        ]
        billed_lost = 17
        assert total["tokens"] + billed_lost == server.billed_tokens
        for key in {k for k, _, _ in server.billed}:  # every billing is a used answer or a lost call of that key
            lost_here = sum(1 for c in record["calls"] if c["key"] == key and c["status"] == "lost")
            assert sum(1 for k, _, _ in server.billed if k == key) == 1 + lost_here
        assert (total["calls"], total["lost_calls"]) == (2, 2)

        # the CLI shows the same record: the failed attempt, the lost calls and the totals, with cost
        prices = tmp_path / "prices.json"
        prices.write_text('{"fake-model": {"input": 2.5, "output": 10}}')
        cli = [sys.executable, "-m", "graphckpt", "--db", str(db)]
        out = subprocess.run(
            [*cli, "history", "t", "--prices", str(prices)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert out.returncode == 0, out.stderr
        text = out.stdout
        assert "tools (1 failed attempt)" in text
        assert "step 2 tools attempt 1 at" in text and "ConnectionError: weather service unreachable" in text
        assert "step 2 tools execute_tool lookup started" in text and f"key {tool_key}" in text
        assert "step 3 reply chat fake-model started" in text and f"key {chat_key}" in text
        cost = (total["prompt_tokens"] * 2.5 + total["completion_tokens"] * 10) / 1e6
        assert f"total: 2 model calls, {total['tokens']:,} tokens" in text and "2 calls lost" in text
        assert f"cost ${cost:.4f}" in text
        listed = subprocess.run(
            [*cli, "threads", "--json", "--prices", str(prices)], capture_output=True, text=True, timeout=60
        )
        (row,) = json.loads(listed.stdout)
        assert row["spend"]["total"]["tokens"] == total["tokens"] and row["spend"]["total"]["lost_calls"] == 2
        assert row["spend"]["total"]["cost"] == pytest.approx(cost)
        assert total["by_model"]["fake-model"]["lost"] == 1
        assert total["tokens"] == sum(
            c["usage"]["prompt_tokens"] + c["usage"]["completion_tokens"] for c in finished_chat
        )
        assert record["spend"]["inherited"]["tokens"] == 0

        # a fork after step 1 re-spends only what it runs itself
        after_plan = next(s for s in app.history("t") if s.step == 1)
        app.fork("t", after_plan.checkpoint_id, new_thread_id="t-alt")
        app.resume("t-alt")
        fork_spend = app.spend("t-alt")
        assert fork_spend["inherited"]["tokens"] == 16 and fork_spend["inherited"]["calls"] == 1
        assert fork_spend["own"]["calls"] == 1 and fork_spend["own"]["lost_calls"] == 0
        assert fork_spend["total"]["tokens"] == fork_spend["own"]["tokens"] + 16
        assert fork_spend["own"]["tokens"] + total["tokens"] + billed_lost == server.billed_tokens
    finally:
        app.close()
