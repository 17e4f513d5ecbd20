"""OpenTelemetry (graphckpt.telemetry) with the SDK's in-memory exporter and the loopback OpenAI-compatible server.

A run is one ``invoke_workflow {graph}`` span; each super-step a ``super_step {n}`` span under it; each task an
``invoke_agent {node}`` span under its step; each model call a ``chat {model}`` client span and each tool call an
``execute_tool {name}`` span under its task. Off by default: ``import graphckpt`` never loads opentelemetry.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.audit_child import build_agent_graph, build_graph
from support.openai_server import FakeOpenAIServer, completion

import graphckpt.telemetry as telemetry
from graphckpt.savers.sqlite import SqliteSaver

TOOL_CALL = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"city": "Oslo"}'}}


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as s:
        monkeypatch.setenv("OPENAI_BASE_URL", s.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.setenv("GRAPHCKPT_OFFLINE", "0")
        yield s


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.enable(tracer_provider=provider)
    try:
        yield exporter
    finally:
        telemetry.disable()


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def _tokens(attributes: Any) -> int:
    return int(attributes.get(telemetry.INPUT_TOKENS, 0)) + int(attributes.get(telemetry.OUTPUT_TOKENS, 0))


def test_a_three_node_graph_gives_the_span_tree(
    tmp_path: Path, server: FakeOpenAIServer, spans: InMemorySpanExporter
) -> None:
    server.script(completion(None, tool_calls=[TOOL_CALL], prompt_tokens=11, completion_tokens=5))
    app = build_graph().compile(saver=SqliteSaver(tmp_path / "t.db"))
    try:
        app.invoke({}, thread_id="t")
    finally:
        app.close()
    got = spans.get_finished_spans()
    by_name: dict[str, list[ReadableSpan]] = {}
    for s in got:
        by_name.setdefault(s.name, []).append(s)
    (run,) = by_name["invoke_workflow Agent"]
    assert run.parent is None and run.attributes[telemetry.CONVERSATION_ID] == "t"
    assert sorted(n for n in by_name if n.startswith("super_step")) == ["super_step 1", "super_step 2", "super_step 3"]
    steps = [by_name[f"super_step {n}"][0] for n in (1, 2, 3)]
    assert all(_parent(s) == run.context.span_id for s in steps)
    tasks = [by_name[f"invoke_agent {n}"][0] for n in ("plan", "tools", "reply")]
    assert [_parent(t) for t in tasks] == [s.context.span_id for s in steps]
    plan_chat, reply_chat = sorted(by_name["chat fake-model"], key=lambda s: s.start_time or 0)
    (tool_span,) = by_name["execute_tool lookup"]
    assert _parent(plan_chat) == tasks[0].context.span_id and _parent(reply_chat) == tasks[2].context.span_id
    assert _parent(tool_span) == tasks[1].context.span_id
    assert tool_span.attributes[telemetry.TOOL_NAME] == "lookup"
    a = plan_chat.attributes
    assert (a[telemetry.OPERATION], a[telemetry.PROVIDER], a[telemetry.REQUEST_MODEL], a[telemetry.RESPONSE_MODEL]) == (
        "chat",
        "openai_compatible",
        "fake-model",
        "fake-model",
    )
    assert (a[telemetry.INPUT_TOKENS], a[telemetry.OUTPUT_TOKENS]) == (11, 5)
    assert tuple(a[telemetry.FINISH_REASONS]) == ("tool_calls",) and a[telemetry.REPLAYED] is False
    assert a[telemetry.IDEMPOTENCY_KEY].startswith("t:")
    assert telemetry.INPUT_MESSAGES not in a  # message content only when asked
    assert len({s.context.trace_id for s in got}) == 1
    assert sum(_tokens(s.attributes) for s in got) == server.billed_tokens


def test_message_content_only_when_asked(tmp_path: Path, server: FakeOpenAIServer) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.enable(tracer_provider=provider, capture_content=True)
    app = build_agent_graph().compile(saver=SqliteSaver(tmp_path / "t.db"))
    try:
        app.invoke({}, thread_id="t")
    finally:
        app.close()
        telemetry.disable()
    chat = next(s for s in exporter.get_finished_spans() if s.name == "chat fake-model")
    assert json.loads(str(chat.attributes[telemetry.INPUT_MESSAGES]))[0]["content"] == "weather in Oslo"
    assert json.loads(str(chat.attributes[telemetry.OUTPUT_MESSAGES]))[0]["role"] == "assistant"


@pytest.mark.slow
def test_kill_and_resume_links_traces_marks_replays_and_keeps_token_sums(
    tmp_path: Path, server: FakeOpenAIServer, spans: InMemorySpanExporter
) -> None:
    """The child is killed inside the tool call of ``act`` (after that task's model call was journaled); the
    resumed run replays that model call from the journal."""
    from support.audit_child import Proc
    from support.leasing import wait_unleased

    db, exported = tmp_path / "t.db", tmp_path / "child-spans.jsonl"
    env = {k: os.environ[k] for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "GRAPHCKPT_OFFLINE")}
    child = Proc(db, "t", {**env, "AUDIT_GRAPH": "agent", "AUDIT_KILL": "tool", "AUDIT_OTEL": str(exported)})
    try:
        child.wait_for("in-tool ")
        child.kill()
    finally:
        child.close()
    first = [json.loads(line) for line in exported.read_text().splitlines()]
    first_trace = {s["trace_id"] for s in first}
    assert len(first_trace) == 1  # the run span itself never ended: the kill
    assert [s["name"] for s in first if s["name"].startswith("chat")] == ["chat fake-model", "chat fake-model"]

    app = build_agent_graph().compile(saver=SqliteSaver(db))
    try:
        wait_unleased(app, "t")  # the killed child's lease (0.5 s) expires: the thread is crashed, so resumable
        app.resume("t")
        resumed = list(spans.get_finished_spans())
        spans.clear()
        app.invoke({}, thread_id="reference")  # the same run, never interrupted
        reference = list(spans.get_finished_spans())
    finally:
        app.close()
    (run,) = [s for s in resumed if s.name.startswith("invoke_workflow")]
    assert [format(link.context.trace_id, "032x") for link in run.links] == sorted(first_trace)
    assert run.attributes[telemetry.RESUMES] in first_trace
    replayed = [s for s in resumed if s.attributes.get(telemetry.REPLAYED)]
    assert [s.name for s in replayed] == ["chat fake-model"]
    assert not set(telemetry.TOKEN_ATTRIBUTES) & set(replayed[0].attributes)
    total = sum(_tokens(s["attributes"]) for s in first) + sum(_tokens(s.attributes) for s in resumed)
    assert total == sum(_tokens(s.attributes) for s in reference) > 0
    assert not any(s.attributes.get(telemetry.REPLAYED) for s in reference)


def test_import_graphckpt_never_loads_opentelemetry(tmp_path: Path) -> None:
    """In a fresh interpreter: a whole run with effects loads no opentelemetry module; with opentelemetry made
    unimportable (the extra not installed), runs work the same and only ``graphckpt.telemetry`` fails to import."""
    code = textwrap.dedent(
        """
        import sys
        BLOCK = "--block" in sys.argv
        if BLOCK:
            class NoOtel:
                def find_spec(self, name, path=None, target=None):
                    if name.split(".")[0] == "opentelemetry":
                        raise ImportError("no module named " + name)
            sys.meta_path.insert(0, NoOtel())
        import graphckpt, nodes
        from graphckpt import END, START, StateGraph
        from typing import TypedDict
        class S(TypedDict, total=False):
            n: int
        async def node(s, ctx):
            return {"n": await ctx.aeffect(lambda: 1)}
        g = StateGraph(S)
        g.add_node("a", node)
        g.add_edge(START, "a")
        g.add_edge("a", END)
        app = g.compile()
        assert app.invoke({}, thread_id="t").values["n"] == 1
        app.close()
        print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
        if BLOCK:
            try:
                import graphckpt.telemetry
            except ImportError:
                print("telemetry needs the otel extra")
        """
    )
    script = tmp_path / "probe.py"
    script.write_text(code)
    for args, expected in (([], "[]\n"), (["--block"], "[]\ntelemetry needs the otel extra\n")):
        out = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout == expected
