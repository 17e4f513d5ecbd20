"""The chat agent the JavaScript client tests serve (``support.approval_chat:chat``): a model answers the user's last
message (one journaled call, streamed to a ``messages-tuple`` reader), then a person approves the answer
(``ctx.interrupt``) before it is sent. Messages are LangChain-shaped dicts (``type`` ``human``/``ai``) as LangGraph's
JavaScript client and its React ``useStream`` hook read and write them. ``OPENAI_BASE_URL`` points the model at the
test's loopback OpenAI-compatible server (tests/support/openai_server.py)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel

from graphckpt import END, START, StateGraph, add_messages
from nodes.llm import ChatModel

_ROLES = {"human": "user", "user": "user", "ai": "assistant", "assistant": "assistant", "system": "system"}

_model = ChatModel(api_key="test-key", offline=False)


class Chat(BaseModel):
    messages: Annotated[list[dict[str, Any]], add_messages] = []
    approved: bool | None = None


def _openai(message: dict[str, Any]) -> dict[str, str]:
    role = _ROLES.get(str(message.get("type") or message.get("role")), "user")
    content = message.get("content")
    return {"role": role, "content": content if isinstance(content, str) else str(content)}


async def answer(state: Chat, ctx: Any) -> dict[str, Any]:
    """The model's answer, appended with the completion's id (as LangChain's OpenAI client names the message): the
    message a ``messages-tuple`` reader assembled from the streamed pieces is the one the state then holds."""
    result = await _model.acall(ctx, [_openai(m) for m in state.messages])
    text = str(result["message"].get("content") or "")
    return {"messages": [{"type": "ai", "content": text, "id": result["id"]}], "approved": None}


def approve(state: Chat, ctx: Any) -> dict[str, Any]:
    """A person approves the answer (``True``, ``"yes"`` or ``{"approved": true}``); otherwise it is withheld (the
    message keeps its id, its text is replaced)."""
    last = state.messages[-1]
    verdict = ctx.interrupt({"question": "Send this answer?", "draft": last.get("content")})
    ok = verdict in (True, "yes", "approve") or (isinstance(verdict, dict) and verdict.get("approved") is True)
    if ok:
        return {"approved": True}
    return {"messages": [{**last, "content": "(answer withheld by the reviewer)"}], "approved": False}


def chat() -> StateGraph:
    """``answer`` (a model call) then ``approve`` (an interrupt), each turn."""
    g = StateGraph(Chat)
    g.add_node("answer", answer)
    g.add_node("approve", approve)
    g.add_edge(START, "answer")
    g.add_edge("answer", "approve")
    g.add_edge("approve", END)
    return g
