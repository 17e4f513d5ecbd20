"""Stream modes ``messages`` and ``debug``.

``messages``: a ``chat_node``'s answer streams from the model (``stream=True`` against the offline OpenAI-compatible
server on loopback) and each piece reaches the reader as it arrives, as ``(message_chunk, metadata)`` naming node,
step and thread; the journal still records the whole completion, so a re-run of the task streams the recorded answer
as one piece without calling the model. ``debug``: LangGraph-shaped ``checkpoint`` / ``task`` / ``task_result``
events.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypedDict

import pytest
from support.openai_server import FakeOpenAIServer, held

from graphckpt import START, Command, StateGraph
from graphckpt.context import Context
from nodes.llm import ChatModel, chat_node


class S(TypedDict, total=False):
    q: str
    a: str
    ok: str


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as s:
        yield s


async def test_tokens_reach_the_reader_as_they_arrive(server: FakeOpenAIServer) -> None:
    node = chat_node("{q}", output_key="a", base_url=server.base_url, api_key="test-key")
    app = StateGraph(S).add_node("ask", node).add_edge(START, "ask").compile()
    server.script(held())  # the server stops after the first piece until released
    stream = app.astream({"q": "hi"}, thread_id="t", mode=["messages", "updates"])
    mode, (chunk, metadata) = await anext(stream)
    assert mode == "messages" and server.request_count == 1
    assert chunk == {"role": "assistant", "content": "one ", "id": "chatcmpl-fake"}
    assert metadata["langgraph_node"] == "ask" and metadata["langgraph_step"] == 1
    assert metadata["thread_id"] == "t" and metadata["langgraph_checkpoint_ns"] == ""
    server.release.set()  # only now can the rest of the answer, and the node's update, come
    rest = [item async for item in stream]
    pieces = [chunk["content"]] + [c[1][0]["content"] for c in rest if c[0] == "messages"]
    assert pieces == ["one ", "two ", "three"]
    assert rest[-1] == ("updates", {"ask": {"a": "one two three"}})
    assert server.requests[0].json["stream"] is True
    head = await app.aget_state("t")
    assert head.values["a"] == "one two three"
    assert head.metadata["usage"]["ask"]["completion_tokens"] == 3  # usage came in the stream's last chunk


async def test_no_messages_stream_no_streaming_call(server: FakeOpenAIServer) -> None:
    node = chat_node("{q}", output_key="a", base_url=server.base_url, api_key="test-key")
    app = StateGraph(S).add_node("ask", node).add_edge(START, "ask").compile()
    assert [c async for c in app.astream({"q": "hi"})] == [{"ask": {"a": "echo: hi"}}]
    assert "stream" not in server.requests[0].json


async def test_a_journaled_answer_streams_whole_and_the_model_is_not_called_again(server: FakeOpenAIServer) -> None:
    model = ChatModel(base_url=server.base_url, api_key="test-key")

    async def ask_then_check(state: S, ctx: Context) -> dict[str, Any]:
        result = await model.acall(ctx, [{"role": "user", "content": "tell me something"}])
        return {"a": result["message"]["content"], "ok": ctx.interrupt("fine?")}

    app = StateGraph(S).add_node("ask", ask_then_check).add_edge(START, "ask").compile()
    first = [c async for c in app.astream({"q": "x"}, thread_id="t", mode="messages")]
    assert "".join(chunk["content"] for chunk, _ in first) == "echo: tell me something"
    assert len(first) == 4  # "echo: ", "tell ", "me ", "something"
    again = [
        c async for c in app.astream(None, thread_id="t", mode="messages", resume=True, answer=Command(resume="yes"))
    ]
    assert [chunk["content"] for chunk, _ in again] == ["echo: tell me something"]
    assert server.request_count == 1
    assert (await app.aget_state("t")).values == {"q": "x", "a": "echo: tell me something", "ok": "yes"}


async def test_offline_model_streams_word_by_word() -> None:
    node = chat_node("{q}", output_key="a", offline=True, offline_answer=lambda m: "alpha beta")
    app = StateGraph(S).add_node("ask", node).add_edge(START, "ask").compile()
    got = [chunk["content"] async for chunk, _ in app.astream({"q": "x"}, mode="messages")]
    assert got == ["alpha ", "beta"]


async def test_messages_from_inside_a_subgraph(server: FakeOpenAIServer) -> None:
    node = chat_node("{q}", output_key="a", base_url=server.base_url, api_key="test-key")
    inner = StateGraph(S).add_node("ask", node).add_edge(START, "ask").compile()
    app = StateGraph(S).add_node("sub", inner).add_edge(START, "sub").compile()
    got = [c async for c in app.astream({"q": "deep"}, mode="messages", subgraphs=True)]
    assert {ns[0].split(":")[0] for ns, _ in got} == {"sub"}
    assert "".join(chunk["content"] for _, (chunk, _) in got) == "echo: deep"
    assert {meta["langgraph_checkpoint_ns"].split(":")[0] for _, (_, meta) in got} == {"sub"}


async def test_debug_events() -> None:
    g = StateGraph(S).add_node("a", lambda s: {"a": "A"}).add_node("b", lambda s: {"ok": "B"})
    app = g.add_edge(START, "a").add_edge("a", "b").compile()
    events = [e async for e in app.astream({"q": "x"}, thread_id="t", mode="debug")]
    kinds = [(e["type"], e["step"], e["payload"].get("name")) for e in events]
    assert kinds == [
        ("checkpoint", 0, None),
        ("task", 1, "a"),
        ("task_result", 1, "a"),
        ("checkpoint", 1, None),
        ("task", 2, "b"),
        ("task_result", 2, "b"),
        ("checkpoint", 2, None),
    ]
    assert events[2]["payload"]["result"] == [("a", "A")] and events[2]["payload"]["error"] is None
    assert events[3]["payload"]["next"] == ["b"] and events[-1]["payload"]["values"] == {"q": "x", "a": "A", "ok": "B"}
    assert all(isinstance(e["timestamp"], str) for e in events)
