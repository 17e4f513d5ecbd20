"""The entries of :data:`graphckpt.server.openapi.SPEC` for the Agent Protocol's routes (:mod:`.agents`,
:mod:`.ap_runs`, :mod:`.ap_threads`) and the runs without a thread that langgraph-sdk shares with it. The protocol's
own document (``openapi.json`` of langchain-ai/agent-protocol) is what its clients are checked against; this is
graphckpt's description of the same routes in its own document."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from graphckpt.server.routes.agents import AgentSearchBody
from graphckpt.server.routes.ap_runs import AgentRunBody, RunCancelQuery, RunSearchBody
from graphckpt.server.routes.ap_threads import EventStreamBody, StreamingCommandBody

__all__ = ["agent_spec"]

_OBJECT: dict[str, Any] = {"type": "object"}
_SSE = "text/event-stream"
_AGENT = {"type": "object", "required": ["agent_id", "name", "capabilities"]}
_COMMAND_ANSWER = {"type": "object", "required": ["type", "id"], "properties": {"type": {"enum": ["success", "error"]}}}


def agent_spec(run: dict[str, Any]) -> dict[tuple[str, str], Any]:
    """The entries, with graphckpt's ``Run`` schema."""
    entries: dict[tuple[str, str], tuple[str, type[BaseModel] | None, type[BaseModel] | None, int, Any]] = {
        ("POST", "/agents/search"): ("the agents (assistants)", AgentSearchBody, None, 200, _array(_AGENT)),
        ("GET", "/agents/{agent_id}"): ("one agent", None, None, 200, _AGENT),
        ("GET", "/agents/{agent_id}/schemas"): ("an agent's schemas", None, None, 200, _OBJECT),
        ("POST", "/runs"): (
            "a background run (sdk body with assistant_id, or the protocol's)",
            AgentRunBody,
            None,
            200,
            run,
        ),
        ("POST", "/runs/stream"): ("a streamed run (either body)", AgentRunBody, None, 200, _SSE),
        ("POST", "/runs/wait"): ("a run waited for (either body)", AgentRunBody, None, 200, _OBJECT),
        ("POST", "/runs/search"): ("runs of a thread or of all", RunSearchBody, None, 200, _array(run)),
        ("GET", "/runs/{run_id}"): ("one run", None, None, 200, run),
        ("DELETE", "/runs/{run_id}"): ("forget an ended run", None, None, 204, None),
        ("GET", "/runs/{run_id}/wait"): ("wait for a run: the run and its thread's values", None, None, 200, _OBJECT),
        ("GET", "/runs/{run_id}/stream"): ("a run's stream", None, None, 200, _SSE),
        ("POST", "/runs/{run_id}/cancel"): ("cancel a run", None, RunCancelQuery, 204, None),
        ("POST", "/threads/{thread_id}/stream"): (
            "the protocol's event subscription",
            EventStreamBody,
            None,
            200,
            _SSE,
        ),
        ("POST", "/threads/{thread_id}/commands"): (
            "a streaming-protocol command",
            StreamingCommandBody,
            None,
            200,
            _COMMAND_ANSWER,
        ),
    }
    return entries


def _array(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}
