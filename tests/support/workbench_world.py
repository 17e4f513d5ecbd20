"""Graphs the UI's workbench tests serve (``graphckpt serve support.workbench_world:fan_graph ...``):

- :func:`fan_graph`: ``plan`` fans out to 16 ``work`` tasks with ``Send`` (one step of 16 parallel tasks, each making
  one journaled model call with its usage), then the subgraph node ``check`` (a compiled graph as a node: its steps
  run on a child thread);
- :func:`chat_graph`: a ``MessagesState`` agent: ``agent`` asks for a tool call, ``tool`` answers it, ``answer``
  replies quoting the user's question (so an edited question shows in the reply); :func:`streaming_chat_graph`
  streams its reply piece by piece once a gate file opens.
"""

from __future__ import annotations

import asyncio
import os
from typing import Annotated, Any

from pydantic import BaseModel

from graphckpt import END, START, MessagesState, Send, StateGraph, append
from graphckpt.audit import describe_call

FAN = "support.workbench_world:fan_graph"
CHAT = "support.workbench_world:chat_graph"
WIDTH = 16
MODEL = "graphckpt-offline"
"""The model the fan-out's calls name (priced by the UI tests' price table)."""


class Fan(BaseModel):
    topic: str = "rain"
    items: Annotated[list[int], append] = []
    note: str = ""


class Inner(BaseModel):
    note: str = ""


def fan_graph() -> StateGraph:
    async def model(i: int) -> dict[str, Any]:  # a journaled model call of 0 to 30 ms, with its usage
        await asyncio.sleep(0.01 * (i % 4))
        return {"square": i * i, "usage": {"prompt_tokens": 10 + i, "completion_tokens": 5}}

    describe_call(model, "model:square", model=MODEL, usage=lambda r: (r["usage"]["prompt_tokens"], 5))

    async def work(payload: dict[str, Any], ctx: Any) -> dict[str, Any]:
        answer = await ctx.aeffect(model, payload["i"])
        ctx.report_usage(MODEL, answer["usage"]["prompt_tokens"], answer["usage"]["completion_tokens"])
        return {"items": [answer["square"]]}

    def tag(state: Inner) -> dict[str, Any]:
        return {"note": "checked by the subgraph"}

    inner = StateGraph(Inner)
    inner.add_node("tag", tag)
    inner.add_edge(START, "tag")
    inner.add_edge("tag", END)

    g = StateGraph(Fan)
    g.add_node("plan", lambda s: {"note": f"planned {WIDTH} pieces of {s.topic}"})
    g.add_node("work", work)
    g.add_node("check", inner.compile())
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", lambda s: [Send("work", {"i": i}) for i in range(WIDTH)])
    g.add_edge("work", "check")
    g.add_edge("check", END)
    return g


def _text(message: Any) -> str:
    return str(message.get("content", "")) if isinstance(message, dict) else str(getattr(message, "content", ""))


def _agent(state: MessagesState) -> dict[str, Any]:
    call = {"id": "call-1", "name": "weather", "args": {"city": "Oslo"}}
    return {"messages": [{"role": "assistant", "content": "", "tool_calls": [call]}]}


def _tool(state: MessagesState) -> dict[str, Any]:
    return {"messages": [{"role": "tool", "tool_call_id": "call-1", "name": "weather", "content": "sunny, 18 C"}]}


def _answer(state: MessagesState) -> dict[str, Any]:
    question = _text(state["messages"][0])
    return {"messages": [{"role": "assistant", "content": f"You asked: {question} It is sunny, 18 C."}]}


def chat_graph(answer: Any = _answer) -> StateGraph:
    g = StateGraph(MessagesState)
    g.add_node("agent", _agent)
    g.add_node("tool", _tool)
    g.add_node("answer", answer)
    g.add_edge(START, "agent")
    g.add_edge("agent", "tool")
    g.add_edge("tool", "answer")
    g.add_edge("answer", END)
    return g


STREAMING = "support.workbench_world:streaming_chat_graph"
PIECES = ("It ", "is ", "sunny ", "in ", "Oslo, ", "18 C.")


def streaming_chat_graph() -> StateGraph:
    """:func:`chat_graph` whose ``answer`` waits for the gate file ``$UI_WORLD_GATES.gate.stream``, then streams its
    reply piece by piece (0.3 s apart) to the readers of the run's ``messages`` stream."""
    from support.ui_world import GATE_TIMEOUT, gate
    from support.waiting import await_for

    db = os.environ.get("UI_WORLD_GATES", "")

    async def answer(state: MessagesState, ctx: Any) -> dict[str, Any]:
        await await_for(gate(db, "stream").exists, GATE_TIMEOUT, what="the stream gate")
        for piece in PIECES:
            ctx.stream_message(piece, id="answer-1")
            await asyncio.sleep(0.3)
        return {"messages": [{"role": "assistant", "content": "".join(PIECES), "id": "answer-1"}]}

    return chat_graph(answer)


def run_untagged(db: str, thread_id: str) -> None:
    """Run the UI world's gated graph on ``thread_id`` with no ``graph`` tag, as a script using the Python API does:
    when this process dies, a server's recovery leaves the thread ``crashed`` (it does not know its graph), and only a
    person takes it over (the server's default graph runs it)."""
    from graphckpt.savers.sqlite import SqliteSaver
    from support.ui_world import gated_graph

    app = gated_graph(db).compile(saver=SqliteSaver(db))
    with app:
        app.invoke({"log": ["start"]}, thread_id=thread_id)


if __name__ == "__main__":
    import sys

    command, db, thread = sys.argv[1:]
    if command != "untagged":
        raise SystemExit(f"unknown command {command!r}")
    run_untagged(db, thread)
