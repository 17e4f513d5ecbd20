"""The agent ``graphckpt serve`` runs in the UI's scripted session (``tests/ui/test_ui_session.py``, issue 30).

Every model call goes to ``$OPENAI_BASE_URL`` (the test's loopback ``FakeOpenAIServer``, whose latency makes each call
last a second or more) through ``nodes``' journaled chat helpers:

- ``plan``: a ``chat_node`` offered the ``weather`` tool (the test scripts the model's answer: a tool call per city);
- ``tools``: a ``tool_node`` running those calls (journaled);
- ``research``: one ``Send`` task per city, each a model call of its own (a parallel fan-out);
- ``review``: a subgraph (a compiled graph as a node) whose one node is a model call, on its child thread;
- ``approve``: an ``approval_node`` (an interrupt: a person approves the report);
- ``publish``: a last model call once approved.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel

from graphckpt import END, START, Send, StateGraph, append
from nodes import ChatModel, approval_node, chat_node, tool, tool_node

SESSION = "support.session_world:session_graph"
MODEL = "session-model"
CITIES = ("Oslo", "Bergen", "Tromso")


class Trip(BaseModel):
    topic: str = "a weather report"
    plan: str = ""
    tool_calls: list[dict[str, Any]] = []
    tool_results: list[dict[str, Any]] = []
    notes: Annotated[list[str], append] = []
    review: str = ""
    approved: bool | None = None
    comment: str | None = None
    published: str = ""


class Review(BaseModel):
    """The subgraph's state: it shares ``topic`` and ``review`` with the parent (not the appended ``notes``, which
    its output would add a second time)."""

    topic: str = ""
    review: str = ""


@tool
def weather(city: str) -> str:
    """Today's weather in ``city``."""
    return f"{city}: sunny, 18 C"


def tool_call(i: int, city: str) -> dict[str, Any]:
    """The tool call the test scripts as the model's answer to ``plan``."""
    return {
        "id": f"call-{i}",
        "type": "function",
        "function": {"name": "weather", "arguments": f'{{"city": "{city}"}}'},
    }


def session_graph() -> StateGraph:
    model = ChatModel(model=MODEL, offline=False)

    async def research(payload: dict[str, Any], ctx: Any) -> dict[str, Any]:
        asked = [{"role": "user", "content": f"Research {payload['topic']} for {payload['city']}"}]
        answer = await model.acall(ctx, asked)
        return {"notes": [str(answer["message"].get("content") or "")]}

    def fan_out(state: Trip) -> list[Send]:
        cities = [str(r.get("output", "")).split(":")[0] for r in state.tool_results] or list(CITIES)
        return [Send("research", {"city": c, "topic": state.topic}) for c in cities]

    inner = StateGraph(Review)
    inner.add_node("critique", chat_node("review the report on {topic}", output_key="review", model=model))
    inner.add_edge(START, "critique")
    inner.add_edge("critique", END)

    g = StateGraph(Trip)
    g.add_node("plan", chat_node("plan {topic}", output_key="plan", model=model, tools=[weather]))
    g.add_node("tools", tool_node([weather]))
    g.add_node("research", research)
    g.add_node("review", inner.compile())
    g.add_node("approve", approval_node("Publish the report on {topic}?", comment_key="comment"))
    g.add_node("publish", chat_node("publish: {review}", output_key="published", model=model))
    g.add_edge(START, "plan")
    g.add_edge("plan", "tools")
    g.add_conditional_edges("tools", fan_out)
    g.add_edge("research", "review")
    g.add_edge("review", "approve")
    g.add_edge("approve", "publish")
    g.add_edge("publish", END)
    return g
