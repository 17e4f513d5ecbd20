"""Assistant routes: the served graphs, under LangGraph's name (an assistant per graph, ``assistant_id`` = graph
id), and the liveness probe ``/ok``."""

from __future__ import annotations

from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from graphckpt.server import models, queries
from graphckpt.server.errors import ApiError
from graphckpt.server.http import json_response, scope_of

__all__ = ["routes"]


class AssistantSearchBody(BaseModel):
    graph_id: str | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)


async def ok(request: Request) -> Response:
    return json_response({"ok": True})


async def info(request: Request) -> Response:
    """The server's flags, and its version for a caller with a token (or when there are no tokens): an anonymous
    caller learns nothing it could match against known bugs."""
    from graphckpt import __version__

    flags = {"flags": {"assistants": True, "crons": True}}
    try:
        scope_of(request)
    except ApiError:
        return json_response(flags)
    return json_response({"version": __version__, **flags})


async def search_assistants(request: Request) -> Response:
    service, _, config = scope_of(request)
    b = await models.body(request, AssistantSearchBody, config.max_body)
    found = [(name, app) for name, app in service.graphs.apps.items() if b.graph_id in (None, name)]
    return json_response([queries.assistant_view(n, a) for n, a in found[b.offset : b.offset + b.limit]])


async def get_assistant(request: Request) -> Response:
    service, _, _ = scope_of(request)
    name = request.path_params["assistant_id"]
    return json_response(queries.assistant_view(name, service.graphs.app(name)))


async def assistant_graph(request: Request) -> Response:
    service, _, _ = scope_of(request)
    app = service.graphs.app(request.path_params["assistant_id"])
    return json_response({"mermaid": app.to_mermaid(), "nodes": sorted(app.graph.nodes)})


async def assistant_schemas(request: Request) -> Response:
    service, _, _ = scope_of(request)
    name = request.path_params["assistant_id"]
    app = service.graphs.app(name)
    schema = app.graph.state.schema
    state = schema.model_json_schema() if hasattr(schema, "model_json_schema") else {"type": "object"}
    return json_response({"graph_id": name, "input_schema": state, "output_schema": state, "state_schema": state})


routes = [
    Route("/ok", ok, methods=["GET"]),
    Route("/info", info, methods=["GET"]),
    Route("/assistants/search", search_assistants, methods=["POST"]),
    Route("/assistants/{assistant_id}", get_assistant, methods=["GET"]),
    Route("/assistants/{assistant_id}/graph", assistant_graph, methods=["GET"]),
    Route("/assistants/{assistant_id}/schemas", assistant_schemas, methods=["GET"]),
]
