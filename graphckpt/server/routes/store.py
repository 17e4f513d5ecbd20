"""Store routes: the langgraph-sdk's ``client.store`` (put_item, get_item, delete_item, search_items,
list_namespaces) over the saver's item store (:mod:`graphckpt.items`), each token's namespace a tenant of its own
(:class:`~graphckpt.items.ScopedItems`): two tokens never see each other's items, and nodes of a token's threads
reach the same items through ``ctx.store``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from graphckpt.items import InvalidItemError, ItemStore, ScopedItems
from graphckpt.server import models
from graphckpt.server.errors import ApiError
from graphckpt.server.http import Config, json_response, scope_of

__all__ = ["routes"]


class PutItemBody(BaseModel):
    namespace: list[str]
    key: str
    value: dict[str, Any]
    index: Literal[False] | list[str] | None = None
    ttl: float | None = None


class GetItemQuery(BaseModel):
    namespace: str = ""
    """The labels joined with ``"."`` (langgraph-sdk's), or repeated, one label each (the Agent Protocol's)."""
    key: str
    refresh_ttl: bool | None = None


class DeleteItemBody(BaseModel):
    namespace: list[str]
    key: str


class SearchItemsBody(BaseModel):
    namespace_prefix: list[str] = []
    filter: dict[str, Any] | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)
    query: str | None = None
    refresh_ttl: bool | None = None


class ListNamespacesBody(BaseModel):
    prefix: list[str] | None = None
    suffix: list[str] | None = None
    max_depth: int | None = Field(default=None, ge=1)
    limit: int = Field(default=100, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)


def _items(request: Request) -> tuple[ScopedItems, Config]:
    service, ns, config = scope_of(request)
    return ScopedItems(ItemStore.of(service.saver), ns), config


def _invalid(exc: InvalidItemError) -> ApiError:
    return ApiError(422, "ValidationError", str(exc))


async def put_item(request: Request) -> Response:
    items, config = _items(request)
    b = await models.body(request, PutItemBody, config.max_body)
    try:
        await items.aput(b.namespace, b.key, b.value, b.index, ttl=b.ttl)
    except InvalidItemError as exc:
        raise _invalid(exc) from None
    return Response(status_code=204)


async def get_item(request: Request) -> Response:
    items, _ = _items(request)
    q = models.query(request, GetItemQuery)
    labels = request.query_params.getlist("namespace")  # the Agent Protocol's: one parameter per label
    namespace = labels if len(labels) > 1 else q.namespace.split(".") if q.namespace else []
    try:
        found = await items.aget(namespace, q.key, refresh_ttl=q.refresh_ttl)
    except InvalidItemError as exc:
        raise _invalid(exc) from None
    if found is None:
        raise ApiError(404, "NotFound", f"no item {q.key!r} in namespace {tuple(namespace)!r}")
    return json_response(found.to_dict())


async def delete_item(request: Request) -> Response:
    items, config = _items(request)
    b = await models.body(request, DeleteItemBody, config.max_body)
    try:
        await items.adelete(b.namespace, b.key)
    except InvalidItemError as exc:
        raise _invalid(exc) from None
    return Response(status_code=204)


async def search_items(request: Request) -> Response:
    items, config = _items(request)
    b = await models.body(request, SearchItemsBody, config.max_body)
    try:
        found = await items.asearch(
            b.namespace_prefix,
            query=b.query,
            filter=b.filter,
            limit=b.limit,
            offset=b.offset,
            refresh_ttl=b.refresh_ttl,
        )
    except InvalidItemError as exc:
        raise _invalid(exc) from None
    return json_response({"items": [i.to_dict() for i in found]})


async def list_namespaces(request: Request) -> Response:
    items, config = _items(request)
    b = await models.body(request, ListNamespacesBody, config.max_body)
    try:
        found = await items.alist_namespaces(
            prefix=b.prefix, suffix=b.suffix, max_depth=b.max_depth, limit=b.limit, offset=b.offset
        )
    except InvalidItemError as exc:
        raise _invalid(exc) from None
    return json_response({"namespaces": [list(ns) for ns in found]})


routes = [
    Route("/store/items", put_item, methods=["PUT"]),
    Route("/store/items", get_item, methods=["GET"]),
    Route("/store/items", delete_item, methods=["DELETE"]),
    Route("/store/items/search", search_items, methods=["POST"]),
    Route("/store/namespaces", list_namespaces, methods=["POST"]),
]

_ITEM = {
    "type": "object",
    "required": ["namespace", "key", "value", "created_at", "updated_at"],
    "properties": {
        "namespace": {"type": "array", "items": {"type": "string"}},
        "key": {"type": "string"},
        "value": {"type": "object"},
        "created_at": {"type": "string"},
        "updated_at": {"type": "string"},
    },
}
SPEC: dict[tuple[str, str], tuple[str, type[BaseModel] | None, type[BaseModel] | None, int, Any]] = {
    ("PUT", "/store/items"): ("put an item", PutItemBody, None, 204, None),
    ("GET", "/store/items"): ("get an item", None, GetItemQuery, 200, _ITEM),
    ("DELETE", "/store/items"): ("delete an item", DeleteItemBody, None, 204, None),
    ("POST", "/store/items/search"): (
        "search items",
        SearchItemsBody,
        None,
        200,
        {"type": "object", "properties": {"items": {"type": "array", "items": _ITEM}}},
    ),
    ("POST", "/store/namespaces"): ("list namespaces", ListNamespacesBody, None, 200, {"type": "object"}),
}
"""The routes' entries of :data:`graphckpt.server.openapi.SPEC`."""
