"""The agent graph of the kill campaign (``test_campaign.py``): three ``nodes.chat_node`` calls in a row (plan ->
draft -> review), each writing its answer into the state. The model is whatever ``OPENAI_BASE_URL`` names when the
call is made: in the campaign, the loopback server of ``tests/openai_server.py``, which answers deterministically
(``echo: <prompt>``) and counts every request with its ``Idempotency-Key``, across all worker processes."""

from __future__ import annotations

from pydantic import BaseModel

from graphckpt import END, START, StateGraph
from nodes import chat_node

CALLS = 3
"""Model calls per thread in a run that nobody kills."""


class Task(BaseModel):
    topic: str = ""
    plan: str = ""
    draft: str = ""
    review: str = ""


graph = StateGraph(Task)
graph.add_node("plan", chat_node("plan the work on {topic}", output_key="plan", model="campaign-model"))
graph.add_node("draft", chat_node("draft it from: {plan}", output_key="draft", model="campaign-model"))
graph.add_node("review", chat_node("review: {draft}", output_key="review", model="campaign-model"))
graph.add_edge(START, "plan")
graph.add_edge("plan", "draft")
graph.add_edge("draft", "review")
graph.add_edge("review", END)
