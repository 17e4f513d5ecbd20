"""The ready-made nodes inside the real engine: a model call journaled once survives failure, retry and interrupt.

The model is a real HTTP server on loopback speaking the chat-completions protocol, called by the real ``openai``
client; the server counts the requests, so "no second call" is checked on the wire.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessage
from pydantic import BaseModel
from support.openai_server import FakeOpenAIServer, completion, error

from graphckpt import END, START, NodeError, RetryPolicy, Saver, StateGraph, append
from nodes import approval_node, chat_node


class Doc(BaseModel):
    topic: str
    draft: str | None = None
    approved: bool | None = None
    published: str | None = None


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as s:
        yield s


def build(server: FakeOpenAIServer, saver: Saver, publish: Any, **options: Any) -> Any:
    g = StateGraph(Doc)
    g.add_node(
        "write",
        chat_node("Write about {topic}", output_key="draft", model="fake-model", base_url=server.base_url, api_key="k"),
    )
    g.add_node("approve", approval_node("Publish the draft?"))
    g.add_node("publish", publish, **options)
    g.add_edge(START, "write")
    g.add_edge("write", "approve")
    g.add_edge("approve", "publish")
    g.add_edge("publish", END)
    return g.compile(saver=saver)


async def test_model_called_once_across_interrupt_failure_and_resume(server: FakeOpenAIServer, saver: Saver) -> None:
    server.script(completion("a draft about durability", prompt_tokens=11, completion_tokens=4))
    attempts: list[int] = []

    def publish(s: Doc) -> dict[str, Any]:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("publisher down")
        return {"published": s.draft}

    app = build(server, saver, publish)
    waiting = await app.ainvoke({"topic": "durability"}, thread_id="doc")
    assert waiting.status == "interrupted" and waiting.values.draft == "a draft about durability"
    assert waiting.interrupts[0].payload["question"] == "Publish the draft?"
    with pytest.raises(NodeError, match="publisher down"):
        await app.aresume("doc", True)
    done = await app.aresume("doc")
    assert done.values.published == "a draft about durability" and done.values.approved is True
    assert server.request_count == 1  # one model call for the whole thread
    write_step = next(h for h in await app.ahistory("doc") if "write" in h.metadata.get("writes", {}))
    usage = write_step.metadata["usage"]["write"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["calls"]) == (11, 4, 1)


async def test_non_retryable_model_error_fails_the_thread_once(server: FakeOpenAIServer, saver: Saver) -> None:
    server.script(error(401, "bad key"))
    app = build(server, saver, lambda s: {}, retry=RetryPolicy(max_attempts=3, initial_interval=0))
    with pytest.raises(NodeError, match="401") as info:
        await app.ainvoke({"topic": "x"}, thread_id="bad")
    assert "fake-model" in str(info.value)
    assert server.request_count == 1
    assert (await app.aget_state("bad")).status == "failed"


class Chat(BaseModel):
    messages: Annotated[list[ChatCompletionMessage], append] = []


async def test_openai_messages_in_the_state_read_back_identically(server: FakeOpenAIServer, saver: Saver) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
    reply = completion("thinking done", tool_calls=[call])
    reply.body["choices"][0]["message"]["reasoning_content"] = "first the geocoding"  # a field the client lacks
    server.script(reply, completion("second"))

    async def ask(state: Chat) -> dict[str, Any]:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0) as client:
            answer = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        return {"messages": [answer.choices[0].message]}

    g = StateGraph(Chat)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_edge("ask", END)
    app = g.compile(saver=saver)
    done = await app.ainvoke({}, thread_id="chat")
    live = done.values.messages
    await app.afork("chat", done.checkpoint_id, new_thread_id="again", goto="ask")
    stored = (await app.aget_state("chat")).values.messages
    assert stored == live and stored[0].model_dump() == live[0].model_dump()
    assert stored[0].model_extra == {"reasoning_content": "first the geocoding"}
    assert stored[0].tool_calls is not None and stored[0].tool_calls[0].function.name == "lookup"
    grown = (await app.aresume("again")).values.messages  # the append reducer folds stored and new messages
    assert [m.content for m in grown] == ["thinking done", "second"] and grown[0] == live[0]
