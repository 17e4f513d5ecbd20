"""The Agent Protocol's agents (``/agents/search``, ``/agents/{agent_id}``, ``/agents/{agent_id}/schemas``): an
agent is an assistant (:mod:`graphckpt.server.assistant_records`), so every served graph is an agent of its name and
every assistant created through LangGraph's API is one too, under the same id. An agent's ``capabilities`` say what
its runs take: ``ap.io.messages`` when its state has a ``messages`` field (a run's ``messages`` go there),
``ap.io.streaming`` always (every run streams over SSE)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from graphckpt.app import App
from graphckpt.server import models
from graphckpt.server.assistant_records import Assistants, matches, view
from graphckpt.server.http import json_response, scope_of

__all__ = ["AgentSearchBody", "routes", "state_schema"]


class AgentSearchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    """A part of the agent's name (case-insensitive)."""
    metadata: dict[str, Any] | None = None
    """Each key equal in the agent's metadata."""
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)


def state_schema(app: App) -> dict[str, Any]:
    """The JSON schema of ``app``'s state (``{"type": "object"}`` when its state type has none)."""
    schema = app.graph.state.schema
    found = schema.model_json_schema() if hasattr(schema, "model_json_schema") else None
    return found if isinstance(found, dict) else {"type": "object"}


def _agent(request: Request, assistant: dict[str, Any]) -> dict[str, Any]:
    service, _, _ = scope_of(request)
    fields = state_schema(service.graphs.app(assistant["graph_id"])).get("properties", {})
    return {
        "agent_id": assistant["assistant_id"],
        "name": str(assistant["name"] or assistant["graph_id"]),
        "metadata": {**assistant["metadata"], "graph_id": assistant["graph_id"], "version": assistant["version"]},
        "capabilities": {"ap.io.messages": "messages" in fields, "ap.io.streaming": True},
    }


def _assistants(request: Request) -> Assistants:
    service, ns, _ = scope_of(request)
    return Assistants(service.saver, ns, list(service.graphs.apps))


async def search_agents(request: Request) -> Response:
    _, _, config = scope_of(request)
    b = await models.body(request, AgentSearchBody, config.max_body)
    found = [a for a in map(view, await _assistants(request).all()) if matches(a, None, b.name, b.metadata)]
    return json_response([_agent(request, a) for a in found[b.offset : b.offset + b.limit]])


async def get_agent(request: Request) -> Response:
    return json_response(_agent(request, await _assistants(request).get(request.path_params["agent_id"])))


async def agent_schemas(request: Request) -> Response:
    """The agent's schemas: graphckpt's graphs take, return and keep one state type, so input, output and state are
    its schema; ``config_schema`` is the run ``config`` graphckpt honours."""
    service, _, _ = scope_of(request)
    assistant = await _assistants(request).get(request.path_params["agent_id"])
    state = state_schema(service.graphs.app(assistant["graph_id"]))
    return json_response(
        {
            "agent_id": assistant["assistant_id"],
            "input_schema": state,
            "output_schema": state,
            "state_schema": state,
            "config_schema": models.RunConfig.model_json_schema(),
        }
    )


routes = [
    Route("/agents/search", search_agents, methods=["POST"]),
    Route("/agents/{agent_id}", get_agent, methods=["GET"]),
    Route("/agents/{agent_id}/schemas", agent_schemas, methods=["GET"]),
]
