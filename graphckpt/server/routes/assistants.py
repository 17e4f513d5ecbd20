"""Assistant routes: LangGraph's ``assistants`` (durable versioned configurations of the served graphs, see
:mod:`graphckpt.server.assistant_records`), the graph, schemas and subgraphs of one, and the liveness probe ``/ok``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from graphckpt.server import models
from graphckpt.server.assistant_records import FIELDS, Assistants, matches, view
from graphckpt.server.errors import ApiError
from graphckpt.server.http import json_response, scope_of

__all__ = ["routes"]


class AssistantSearchBody(BaseModel):
    graph_id: str | None = None
    name: str | None = None
    metadata: dict[str, Any] | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)
    sort_by: Literal["assistant_id", "graph_id", "name", "created_at", "updated_at"] | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[str] | None = None


class AssistantFields(BaseModel):
    """The fields of a version: a field an assistant's runs cannot honour is refused (422 naming it)."""

    model_config = ConfigDict(extra="forbid")
    graph_id: str | None = None
    config: models.RunConfig | None = None
    context: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    name: str | None = None
    description: str | None = None

    def changes(self) -> dict[str, Any]:
        if self.config is not None and self.config.tags:
            raise ApiError(422, "ValidationError", "body.config.tags: run tags are not supported (use metadata)")
        found = self.model_dump(exclude_unset=True, exclude_none=True)
        if self.config is not None:
            found["config"] = self.config.model_dump(exclude_defaults=True)
        return {k: found[k] for k in FIELDS if k in found}


class CreateBody(AssistantFields):
    graph_id: str | None
    assistant_id: str | None = None
    if_exists: Literal["raise", "do_nothing"] = "raise"


class AssistantCountBody(BaseModel):
    graph_id: str | None = None
    name: str | None = None
    metadata: dict[str, Any] | None = None


class VersionsBody(BaseModel):
    metadata: dict[str, Any] | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)


class LatestBody(BaseModel):
    version: int = Field(ge=1)


def _assistants(request: Request) -> Assistants:
    service, ns, _ = scope_of(request)
    return Assistants(service.saver, ns, list(service.graphs.apps))


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
    _, _, config = scope_of(request)
    b = await models.body(request, AssistantSearchBody, config.max_body)
    if b.select:
        raise ApiError(422, "ValidationError", "body.select: field selection is not supported (whole assistants)")
    found = [a for a in map(view, await _assistants(request).all()) if matches(a, b.graph_id, b.name, b.metadata)]
    if b.sort_by is not None:
        found.sort(key=lambda a: str(a[b.sort_by or ""]), reverse=b.sort_order != "asc")
    page = found[b.offset : b.offset + b.limit]
    return json_response(page)


async def count_assistants(request: Request) -> Response:
    _, _, config = scope_of(request)
    b = await models.body(request, AssistantCountBody, config.max_body)
    found = [a for a in map(view, await _assistants(request).all()) if matches(a, b.graph_id, b.name, b.metadata)]
    return json_response(len(found))


async def create_assistant(request: Request) -> Response:
    _, _, config = scope_of(request)
    b = await models.body(request, CreateBody, config.max_body)
    if b.graph_id is None:
        raise ApiError(422, "ValidationError", "body.graph_id: required (the served graph of the assistant)")
    return json_response(await _assistants(request).create(b.changes(), b.assistant_id, b.if_exists))


async def get_assistant(request: Request) -> Response:
    return json_response(await _assistants(request).get(request.path_params["assistant_id"]))


async def update_assistant(request: Request) -> Response:
    _, _, config = scope_of(request)
    b = await models.body(request, AssistantFields, config.max_body)
    return json_response(await _assistants(request).update(request.path_params["assistant_id"], b.changes()))


async def delete_assistant(request: Request) -> Response:
    if request.query_params.get("delete_threads") in ("true", "True", "1"):
        raise ApiError(422, "ValidationError", "query.delete_threads: not supported (delete the threads by search)")
    await _assistants(request).delete(request.path_params["assistant_id"])
    return Response(status_code=204)


async def assistant_versions(request: Request) -> Response:
    _, _, config = scope_of(request)
    b = await models.body(request, VersionsBody, config.max_body)
    found = await _assistants(request).versions(request.path_params["assistant_id"])
    found = [v for v in found if all(v["metadata"].get(k) == x for k, x in (b.metadata or {}).items())]
    return json_response(found[b.offset : b.offset + b.limit])


async def set_latest(request: Request) -> Response:
    _, _, config = scope_of(request)
    b = await models.body(request, LatestBody, config.max_body)
    return json_response(await _assistants(request).set_latest(request.path_params["assistant_id"], b.version))


async def _app_of(request: Request) -> tuple[str, Any]:
    service, _, _ = scope_of(request)
    graph_id = (await _assistants(request).get(request.path_params["assistant_id"]))["graph_id"]
    return graph_id, service.graphs.app(graph_id)


async def assistant_graph(request: Request) -> Response:
    _, app = await _app_of(request)
    return json_response({"mermaid": app.to_mermaid(), "nodes": sorted(app.graph.nodes)})


async def assistant_schemas(request: Request) -> Response:
    name, app = await _app_of(request)
    schema = app.graph.state.schema
    state = schema.model_json_schema() if hasattr(schema, "model_json_schema") else {"type": "object"}
    return json_response({"graph_id": name, "input_schema": state, "output_schema": state, "state_schema": state})


async def assistant_subgraphs(request: Request) -> Response:
    """LangGraph's ``{namespace: schemas}`` of the graph's subgraphs: graphckpt graphs embed none, so ``{}``."""
    await _app_of(request)
    return json_response({})


routes = [
    Route("/ok", ok, methods=["GET"]),
    Route("/info", info, methods=["GET"]),
    Route("/assistants", create_assistant, methods=["POST"]),
    Route("/assistants/search", search_assistants, methods=["POST"]),
    Route("/assistants/count", count_assistants, methods=["POST"]),
    Route("/assistants/{assistant_id}", get_assistant, methods=["GET"]),
    Route("/assistants/{assistant_id}", update_assistant, methods=["PATCH"]),
    Route("/assistants/{assistant_id}", delete_assistant, methods=["DELETE"]),
    Route("/assistants/{assistant_id}/versions", assistant_versions, methods=["POST"]),
    Route("/assistants/{assistant_id}/latest", set_latest, methods=["POST"]),
    Route("/assistants/{assistant_id}/subgraphs", assistant_subgraphs, methods=["GET"]),
    Route("/assistants/{assistant_id}/subgraphs/{namespace}", assistant_subgraphs, methods=["GET"]),
    Route("/assistants/{assistant_id}/graph", assistant_graph, methods=["GET"]),
    Route("/assistants/{assistant_id}/schemas", assistant_schemas, methods=["GET"]),
]
