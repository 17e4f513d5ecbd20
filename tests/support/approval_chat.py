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
    draft: str = ""
    draft_id: str = ""
    approved: bool | None = None


def _openai(message: dict[str, Any]) -> dict[str, str]:
    role = _ROLES.get(str(message.get("type") or message.get("role")), "user")
    content = message.get("content")
    return {"role": role, "content": content if isinstance(content, str) else str(content)}


async def answer(state: Chat, ctx: Any) -> dict[str, Any]:
    result = await _model.acall(ctx, [_openai(m) for m in state.messages])
    return {"draft": str(result["message"].get("content") or ""), "draft_id": str(result["id"]), "approved": None}


def approve(state: Chat, ctx: Any) -> dict[str, Any]:
    verdict = ctx.interrupt({"question": "Send this answer?", "draft": state.draft})
    ok = verdict in (True, "yes", "approve") or (isinstance(verdict, dict) and verdict.get("approved") is True)
    text = state.draft if ok else "(answer withheld by the reviewer)"
    # the streamed answer's id: the approved message replaces the chunks a ``messages-tuple`` reader assembled
    return {"messages": [{"type": "ai", "content": text, "id": state.draft_id or None}], "approved": ok}


def chat() -> StateGraph:
    """``answer`` (a model call) then ``approve`` (an interrupt), each turn."""
    g = StateGraph(Chat)
    g.add_node("answer", answer)
    g.add_node("approve", approve)
    g.add_edge(START, "answer")
    g.add_edge("answer", "approve")
    g.add_edge("approve", END)
    return g
