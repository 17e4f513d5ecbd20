"""The OpenAPI 3.1 document served at ``/openapi.json``, built from the request models and one table of what each
route takes and returns (a test checks that every route is in it)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from graphckpt.server import models
from graphckpt.server.events.streams import StreamQuery
from graphckpt.server.routes import crons as cron_routes
from graphckpt.server.routes import store as store_routes
from graphckpt.server.routes.ap_spec import agent_spec
from graphckpt.server.routes.assistants import (
    AssistantCountBody,
    AssistantFields,
    AssistantSearchBody,
    CreateBody,
    LatestBody,
    VersionsBody,
)
from graphckpt.server.routes.runs import CancelQuery, RunsQuery
from graphckpt.server.routes.stateless import CancelManyBody, CancelManyQuery
from graphckpt.server.routes.thread_ops import CountBody, PruneBody, UpdateStateBody
from graphckpt.server.routes.thread_stream import CommandBody, EventsBody
from graphckpt.server.routes.threads import DiffQuery, HistoryQuery, StateQuery

__all__ = ["SPEC", "document"]

_ERROR = {
    "type": "object",
    "required": ["error", "message"],
    "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
}
_REF = {
    "type": ["object", "null"],
    "properties": {"thread_id": {"type": "string"}, "checkpoint_id": {"type": "string"}},
}
_THREAD = {
    "type": "object",
    "required": ["thread_id", "status", "metadata", "created_at", "updated_at"],
    "properties": {
        "thread_id": {"type": "string"},
        "status": {"enum": ["idle", "busy", "interrupted", "error"]},
        "graphckpt_status": {
            "enum": ["running", "interrupted", "failed", "done", "crashed", "partial", "waiting", None]
        },
        "wake_at": {"type": ["string", "null"], "description": "when a durable wait wakes the thread (ISO 8601)"},
        "metadata": {"type": "object"},
        "created_at": {"type": "string"},
        "updated_at": {"type": "string"},
        "graph_id": {"type": "string"},
        "parent": _REF,
        "error": {"type": ["string", "null"]},
    },
}
_STATE = {
    "type": "object",
    "required": ["values", "next", "checkpoint", "metadata", "tasks", "interrupts", "step", "status"],
    "properties": {
        "values": {"type": ["object", "null"]},
        "next": {"type": "array", "items": {"type": "string"}},
        "checkpoint": _REF,
        "parent_checkpoint": _REF,
        "metadata": {"type": "object"},
        "tasks": {"type": "array"},
        "interrupts": {"type": "array"},
        "step": {"type": "integer"},
        "status": {"enum": ["running", "interrupted", "failed", "done", "crashed", "partial"]},
    },
}
_RUN = {
    "type": "object",
    "required": ["run_id", "thread_id", "assistant_id", "status"],
    "properties": {
        "run_id": {"type": "string"},
        "thread_id": {"type": "string"},
        "assistant_id": {"type": "string"},
        "status": {"enum": ["pending", "running", "success", "error", "interrupted", "cancelled"]},
        "metadata": {"type": "object"},
    },
}
_ASSISTANT = {"type": "object", "required": ["assistant_id", "graph_id"]}
_OBJECT: dict[str, Any] = {"type": "object"}
_SSE = "text/event-stream"
_NDJSON = "application/x-ndjson"


def _array(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


Entry = tuple[str, type[BaseModel] | None, type[BaseModel] | None, int, Any]
"""(summary, body model, query model, success status, success schema or a media type)."""

SPEC: dict[tuple[str, str], Entry] = {
    ("GET", "/ok"): ("liveness", None, None, 200, _OBJECT),
    ("GET", "/info"): ("server version and features", None, None, 200, _OBJECT),
    ("POST", "/assistants"): (
        "create an assistant (a configuration of a served graph)",
        CreateBody,
        None,
        200,
        _ASSISTANT,
    ),
    ("POST", "/assistants/search"): ("the assistants", AssistantSearchBody, None, 200, _array(_ASSISTANT)),
    ("POST", "/assistants/count"): ("how many assistants match", AssistantCountBody, None, 200, {"type": "integer"}),
    ("GET", "/assistants/{assistant_id}"): ("one assistant", None, None, 200, _ASSISTANT),
    ("PATCH", "/assistants/{assistant_id}"): ("a new version of an assistant", AssistantFields, None, 200, _ASSISTANT),
    ("DELETE", "/assistants/{assistant_id}"): ("delete an assistant", None, None, 204, None),
    ("POST", "/assistants/{assistant_id}/versions"): ("its versions", VersionsBody, None, 200, _array(_OBJECT)),
    ("POST", "/assistants/{assistant_id}/latest"): ("make a version current", LatestBody, None, 200, _ASSISTANT),
    ("GET", "/assistants/{assistant_id}/subgraphs"): ("its subgraphs (none)", None, None, 200, _OBJECT),
    ("GET", "/assistants/{assistant_id}/subgraphs/{namespace}"): ("its subgraphs (none)", None, None, 200, _OBJECT),
    ("GET", "/assistants/{assistant_id}/graph"): ("the graph as mermaid", None, None, 200, _OBJECT),
    ("GET", "/assistants/{assistant_id}/schemas"): ("the state schema", None, None, 200, _OBJECT),
    ("POST", "/threads"): ("create a thread", models.ThreadBody, None, 200, _THREAD),
    ("POST", "/threads/search"): ("search threads", models.ThreadSearchBody, None, 200, _array(_THREAD)),
    ("POST", "/threads/import"): ("import an export (JSON lines)", None, None, 201, _THREAD),
    ("GET", "/threads/{thread_id}"): ("one thread", None, None, 200, _THREAD),
    ("PATCH", "/threads/{thread_id}"): (
        "merge metadata; apply values/messages (on a past checkpoint: branch)",
        models.ThreadPatchBody,
        None,
        200,
        _THREAD,
    ),
    ("DELETE", "/threads/{thread_id}"): ("delete a thread", None, None, 204, None),
    ("GET", "/threads/{thread_id}/state"): ("the head, or the checkpoint at ?step=", None, StateQuery, 200, _STATE),
    ("POST", "/threads/{thread_id}/state/checkpoint"): ("a checkpoint", models.CheckpointBody, None, 200, _STATE),
    ("GET", "/threads/{thread_id}/state/{checkpoint_id}"): ("a checkpoint by id", None, StateQuery, 200, _STATE),
    ("GET", "/threads/{thread_id}/history"): ("checkpoints, newest first", None, HistoryQuery, 200, _array(_STATE)),
    ("POST", "/threads/{thread_id}/history"): ("history page", models.HistoryBody, None, 200, _array(_STATE)),
    ("POST", "/threads/{thread_id}/fork"): ("fork with an update", models.ForkBody, None, 201, _THREAD),
    ("GET", "/threads/{thread_id}/diff"): ("diff of two checkpoints", None, DiffQuery, 200, _OBJECT),
    ("GET", "/threads/{thread_id}/tree"): ("the branch tree", None, None, 200, _OBJECT),
    ("GET", "/threads/{thread_id}/export"): ("export as JSON lines", None, None, 200, _NDJSON),
    ("GET", "/inbox"): ("open interrupts", None, None, 200, _array(_OBJECT)),
    ("POST", "/threads/{thread_id}/runs"): ("start a background run", models.RunBody, None, 200, _RUN),
    ("GET", "/threads/{thread_id}/runs"): ("the thread's runs", None, RunsQuery, 200, _array(_RUN)),
    ("POST", "/threads/{thread_id}/runs/stream"): (
        "start a run and stream it",
        models.RunBody,
        StreamQuery,
        200,
        _SSE,
    ),
    ("POST", "/threads/{thread_id}/runs/wait"): ("start a run and wait", models.RunBody, None, 200, _OBJECT),
    ("GET", "/threads/{thread_id}/runs/{run_id}"): ("one run", None, None, 200, _RUN),
    ("DELETE", "/threads/{thread_id}/runs/{run_id}"): ("delete an ended run", None, None, 204, None),
    ("POST", "/threads/{thread_id}/runs/{run_id}/cancel"): ("cancel a run", None, CancelQuery, 200, _RUN),
    ("GET", "/threads/{thread_id}/runs/{run_id}/join"): ("wait for a run", None, None, 200, _OBJECT),
    ("GET", "/threads/{thread_id}/runs/{run_id}/stream"): ("join a run's stream", None, StreamQuery, 200, _SSE),
    ("POST", "/threads/{thread_id}/commands"): ("a v3 thread stream command", CommandBody, None, 200, _OBJECT),
    ("POST", "/threads/{thread_id}/stream/events"): ("the v3 thread stream's events", EventsBody, None, 200, _SSE),
    ("GET", "/threads/{thread_id}/stream"): ("the thread's event stream", None, StreamQuery, 200, _SSE),
    ("POST", "/threads/{thread_id}/answer"): ("answer open interrupts", models.AnswerBody, None, 202, _RUN),
    ("POST", "/threads/{thread_id}/state"): (
        "update the state (a past checkpoint: branch)",
        UpdateStateBody,
        None,
        200,
        _OBJECT,
    ),
    ("POST", "/threads/{thread_id}/copy"): ("copy a thread (a fork of its head)", None, None, 200, _THREAD),
    ("POST", "/threads/count"): ("count threads", CountBody, None, 200, {"type": "integer"}),
    ("POST", "/threads/prune"): ("delete the threads named", PruneBody, None, 200, _OBJECT),
    ("POST", "/runs/batch"): ("background runs on new threads (an array of run bodies)", None, None, 200, _array(_RUN)),
    ("POST", "/runs/cancel"): ("cancel runs", CancelManyBody, CancelManyQuery, 204, None),
}
SPEC.update(store_routes.SPEC)  # wave3 issue 29
SPEC.update(cron_routes.SPEC)
SPEC.update(agent_spec(_RUN))  # wave3 issue 28


def _parameters(path: str, query: type[BaseModel] | None) -> list[dict[str, Any]]:
    params = [
        {"name": part[1:-1], "in": "path", "required": True, "schema": {"type": "string", "pattern": "^[^/]+$"}}
        for part in path.split("/")
        if part.startswith("{")
    ]
    if query is not None:
        schema = query.model_json_schema()
        for name, prop in schema.get("properties", {}).items():
            if prop.get("type") == "array" or any(p.get("type") == "array" for p in prop.get("anyOf", [])):
                prop = {"type": "string"}  # comma-separated in the query string
            params.append({"name": name, "in": "query", "required": name in schema.get("required", []), "schema": prop})
    return params


def document(secured: bool) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    components: dict[str, Any] = {"schemas": {}}
    for (method, path), (summary, body, query, status, success) in SPEC.items():
        op: dict[str, Any] = {"summary": summary, "parameters": _parameters(path, query)}
        if body is not None:
            schema = body.model_json_schema(ref_template="#/components/schemas/{model}")
            components["schemas"].update(schema.pop("$defs", {}))
            components["schemas"][body.__name__] = schema
            op["requestBody"] = {
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{body.__name__}"}}}
            }
        ok: dict[str, Any] = {"description": summary}
        if isinstance(success, dict):
            ok["content"] = {"application/json": {"schema": success}}
        elif isinstance(success, str):
            ok["content"] = {success: {"schema": {"type": "string"}}}
        op["responses"] = {
            str(status): ok,
            "default": {"description": "an error", "content": {"application/json": {"schema": _ERROR}}},
        }
        paths.setdefault(path, {})[method.lower()] = op
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "graphckpt", "version": "1"},
        "paths": paths,
        "components": components,
    }
    if secured:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"bearer": []}]
    return doc
