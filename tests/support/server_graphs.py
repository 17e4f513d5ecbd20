"""Graphs that the server tests serve (``support.server_graphs:counter`` etc.), in the server's subprocess.

``SERVE_TEST_DELAY`` (seconds, default 0) slows each step so a test can act mid-run; ``OPENAI_BASE_URL`` points
``ask`` at the test's offline OpenAI-compatible server (tests/openai_server.py), whose request counter shows every
model call that was made.
"""

from __future__ import annotations

import asyncio
import os
from typing import Annotated, Any

from pydantic import BaseModel

from graphckpt import END, START, Send, StateGraph, append
from nodes import chat_node


class Counter(BaseModel):
    n: int = 0
    limit: int = 20
    log: Annotated[list[str], append] = []
    last: str = ""


def _delay() -> float:
    return float(os.environ.get("SERVE_TEST_DELAY", "0"))


async def tick(state: Counter) -> dict[str, Any]:
    await asyncio.sleep(_delay())
    return {"n": state.n + 1, "log": [f"tick {state.n + 1}"]}


def _again(node: str) -> Any:
    def route(state: Counter) -> str:
        return node if state.n < state.limit else END

    return route


def counter() -> StateGraph:
    """``tick`` until ``n == limit`` (20 by default): a run of ``limit`` steps."""
    g = StateGraph(Counter)
    g.add_node("tick", tick)
    g.add_edge(START, "tick")
    g.add_conditional_edges("tick", _again("tick"))
    return g


_chat = chat_node("step {n}", output_key="last", api_key="test-key", offline=False)


async def ask(state: Counter, ctx: Any) -> dict[str, Any]:
    ctx.write({"asking": state.n + 1})  # a ``custom`` stream sees it
    await asyncio.sleep(_delay())
    update = await _chat(state, ctx)
    return {**update, "n": state.n + 1}


def asking() -> StateGraph:
    """One journaled model call per step until ``n == limit`` (each step first writes ``{"asking": n}`` to the
    ``custom`` stream)."""
    g = StateGraph(Counter)
    g.add_node("ask", ask)
    g.add_edge(START, "ask")
    g.add_conditional_edges("ask", _again("ask"))
    return g


class Fan(BaseModel):
    width: int = 16
    done: Annotated[list[int], append] = []


def leaf(payload: int) -> dict[str, Any]:
    return {"done": [payload]}


def fanout() -> StateGraph:
    """``width`` tasks in one super-step, each finishing at once."""
    g = StateGraph(Fan)
    g.add_node("leaf", leaf)
    g.add_conditional_edges(START, lambda s: [Send("leaf", i) for i in range(s.width)])
    g.add_edge("leaf", END)
    return g


class Review(BaseModel):
    draft: str = ""
    verdict: str = ""


def write(state: Review) -> dict[str, Any]:
    return {"draft": "a draft"}


def review(state: Review, ctx: Any) -> dict[str, Any]:
    answer = ctx.interrupt({"question": f"approve {state.draft!r}?"})
    return {"verdict": str(answer)}


def approval() -> StateGraph:
    """``write`` then ``review``, which asks a person (``ctx.interrupt``) and records the answer."""
    g = StateGraph(Review)
    g.add_node("write", write)
    g.add_node("review", review)
    g.add_edge(START, "write")
    g.add_edge("write", "review")
    g.add_edge("review", END)
    return g


class Nest(BaseModel):
    n: int = 0
    log: Annotated[list[str], append] = []


def inner_step(state: Nest, ctx: Any) -> dict[str, Any]:
    ctx.write({"inner": state.n + 1})  # a ``custom`` event from inside the subgraph
    return {"n": state.n + 1, "log": ["inner"]}


def nested() -> StateGraph:
    """``inner``, a subgraph (one node that writes to the ``custom`` stream), then ``after``."""
    child = StateGraph(Nest).add_node("step", inner_step).add_edge(START, "step").add_edge("step", END)
    g = StateGraph(Nest)
    g.add_node("inner", child.compile())
    g.add_node("after", lambda state: {"log": ["after"]})
    g.add_edge(START, "inner")
    g.add_edge("inner", "after")
    g.add_edge("after", END)
    return g


async def greet(state: Counter, ctx: Any) -> dict[str, Any]:
    """What the run handed its nodes: ``config={"configurable": {"user": ...}}`` and ``context``."""
    user = ctx.config["configurable"].get("user")
    return {"n": state.n + 1, "last": f"{user}|{ctx.config['configurable']['thread_id']}|{ctx.context}"}


def configured() -> StateGraph:
    """``greet`` once: ``last`` shows the run's ``configurable`` user, the thread id and ``context``."""
    g = StateGraph(Counter)
    g.add_node("greet", greet)
    g.add_edge(START, "greet")
    g.add_edge("greet", END)
    return g


class Chat(BaseModel):
    messages: Annotated[list[dict[str, Any]], append] = []
    approved: str = ""


def reply(state: Chat) -> dict[str, Any]:
    last = state.messages[-1]["content"] if state.messages else ""
    return {"messages": [{"role": "assistant", "content": f"echo: {last}"}]}


def echo() -> StateGraph:
    """An Agent Protocol agent: answers the last message (``{"role", "content"}``) with ``echo: <its content>``."""
    g = StateGraph(Chat)
    g.add_node("reply", reply)
    g.add_edge(START, "reply")
    g.add_edge("reply", END)
    return g


def gate(state: Chat, ctx: Any) -> dict[str, Any]:
    answer = ctx.interrupt({"question": "send the reply?"})
    return {"approved": str(answer)}


def guarded() -> StateGraph:
    """``reply``, then ``gate``, which asks a person (``ctx.interrupt``) before it ends."""
    g = StateGraph(Chat)
    g.add_node("reply", reply)
    g.add_node("gate", gate)
    g.add_edge(START, "reply")
    g.add_edge("reply", "gate")
    g.add_edge("gate", END)
    return g
