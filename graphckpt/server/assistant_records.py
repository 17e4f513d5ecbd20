"""Assistants: durable, versioned configurations of a served graph (LangGraph's ``assistants``), one per token's
namespace. Every served graph is an assistant of its own name (version 1, empty config) until it is updated; a
created assistant has a uuid. Each update adds a version; ``set_latest`` points the assistant at an older one.

Stored in the saver's item store (DESIGN.md §7 "store"; on memory, SQLite and PostgreSQL alike), one item per
assistant, key = ``assistant_id``, in the namespace ``("#graphckpt", "assistants")`` of the token's tenant
(:class:`~graphckpt.items.ScopedItems`, so two tokens never see each other's assistants). The item holds the current
fields and the list of versions."""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

from graphckpt import ids
from graphckpt.errors import GraphckptError
from graphckpt.items import ItemStore, ScopedItems
from graphckpt.server.errors import ApiError
from graphckpt.server.models import RunBody, RunConfig

__all__ = ["FIELDS", "Assistants", "for_run", "matches", "view"]

NAMESPACE = ("#graphckpt", "assistants")
FIELDS = ("graph_id", "config", "context", "metadata", "name", "description")
"""The fields of a version (and of the assistant, which shows its current version)."""


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat()


def view(record: dict[str, Any]) -> dict[str, Any]:
    """LangGraph's ``Assistant``: the current version's fields with the assistant's id and times."""
    current = next(v for v in record["versions"] if v["version"] == record["version"])
    fields = {k: current[k] for k in FIELDS}
    return {
        "assistant_id": record["assistant_id"],
        **fields,
        "version": record["version"],
        "created_at": record["created_at"],
        "updated_at": record["updated_at"],
    }


@contextlib.contextmanager
def _refused(where: str) -> Iterator[None]:
    """An id or value the item store cannot hold (NUL, not JSON): a 422 naming it, never a 500."""
    try:
        yield
    except GraphckptError as exc:
        raise ApiError(422, "ValidationError", f"{where}: {exc}") from None


class Assistants:
    """One tenant's assistants over the saver's item store; ``graphs`` are the served graph names."""

    def __init__(self, saver: Any, tenant: str, graphs: list[str]) -> None:
        self.items = ScopedItems(ItemStore.of(saver), tenant)
        self.graphs = graphs

    def _default(self, graph_id: str) -> dict[str, Any]:
        first: dict[str, Any] = {"graph_id": graph_id, "config": {}, "context": {}, "metadata": {}, "name": graph_id}
        first |= {"description": None, "version": 1, "created_at": _iso(0)}
        return {"assistant_id": graph_id, "version": 1, "created_at": _iso(0), "updated_at": _iso(0)} | {
            "versions": [first]
        }

    async def _record(self, assistant_id: str) -> dict[str, Any] | None:
        with _refused("path.assistant_id"):
            found = await self.items.aget(NAMESPACE, assistant_id)
        if found is not None:
            return dict(found.value)
        return self._default(assistant_id) if assistant_id in self.graphs else None

    async def record(self, assistant_id: str) -> dict[str, Any]:
        found = await self._record(assistant_id)
        if found is None:
            raise ApiError(404, "NotFound", f"no assistant {assistant_id!r}")
        return found

    async def get(self, assistant_id: str) -> dict[str, Any]:
        return view(await self.record(assistant_id))

    def _check_graph(self, graph_id: str) -> None:
        if graph_id not in self.graphs:
            served = ", ".join(sorted(self.graphs))
            raise ApiError(404, "NotFound", f"body.graph_id: no served graph {graph_id!r} (served: {served})")

    async def _save(self, record: dict[str, Any]) -> dict[str, Any]:
        with _refused("body"):
            await self.items.aput(NAMESPACE, record["assistant_id"], record, False, ttl=None)
        return view(record)

    async def create(self, fields: dict[str, Any], assistant_id: str | None, if_exists: str) -> dict[str, Any]:
        self._check_graph(fields["graph_id"])
        aid = assistant_id or str(uuid.uuid4())
        existing = await self._record(aid)
        if existing is not None:
            if if_exists == "do_nothing":
                return view(existing)
            raise ApiError(409, "Conflict", f"body.assistant_id: assistant {aid!r} exists (if_exists='raise')")
        now = _iso(ids.now())
        blank: dict[str, Any] = {"config": {}, "context": {}, "metadata": {}, "name": "Untitled", "description": None}
        first = {**blank, **fields, "version": 1, "created_at": now}
        return await self._save(
            {"assistant_id": aid, "version": 1, "created_at": now, "updated_at": now} | {"versions": [first]}
        )

    async def update(self, assistant_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        record = await self.record(assistant_id)
        if "graph_id" in changes:
            self._check_graph(changes["graph_id"])
        current = next(v for v in record["versions"] if v["version"] == record["version"])
        number = max(v["version"] for v in record["versions"]) + 1
        now = _iso(ids.now())
        version = {**{k: current[k] for k in FIELDS}, **changes, "version": number, "created_at": now}
        record = {**record, "version": number, "updated_at": now, "versions": [*record["versions"], version]}
        return await self._save(record)

    async def delete(self, assistant_id: str) -> None:
        if assistant_id in self.graphs:
            raise ApiError(409, "Conflict", f"assistant {assistant_id!r} is a served graph's: it cannot be deleted")
        if await self._record(assistant_id) is None:
            raise ApiError(404, "NotFound", f"no assistant {assistant_id!r}")
        await self.items.adelete(NAMESPACE, assistant_id)

    async def all(self) -> list[dict[str, Any]]:
        """Every assistant: the served graphs' (or their updated records) and the created ones, newest first."""
        stored = {i.key: dict(i.value) for i in await self.items.asearch(NAMESPACE, limit=10_000)}
        records = [stored.pop(g) if g in stored else self._default(g) for g in self.graphs]
        return sorted([*stored.values(), *records], key=lambda r: r["updated_at"], reverse=True)

    async def versions(self, assistant_id: str) -> list[dict[str, Any]]:
        record = await self.record(assistant_id)
        return [{"assistant_id": assistant_id, **v} for v in sorted(record["versions"], key=lambda v: -v["version"])]

    async def set_latest(self, assistant_id: str, version: int) -> dict[str, Any]:
        record = await self.record(assistant_id)
        if not any(v["version"] == version for v in record["versions"]):
            raise ApiError(404, "NotFound", f"body.version: assistant {assistant_id!r} has no version {version}")
        return await self._save({**record, "version": version, "updated_at": _iso(ids.now())})


def matches(view: dict[str, Any], graph_id: str | None, name: str | None, metadata: dict[str, Any] | None) -> bool:
    """LangGraph's assistant search filter: graph, name (substring) and metadata (each key equal)."""
    if graph_id is not None and view["graph_id"] != graph_id:
        return False
    if name is not None and name.lower() not in str(view["name"]).lower():
        return False
    return all(view["metadata"].get(k) == v for k, v in (metadata or {}).items())


async def for_run(service: Any, ns: str, body: RunBody) -> tuple[str, RunBody]:
    """The served graph of the run's assistant, and the run body with the assistant's configuration under it: the
    run's own ``config`` fields win, ``config.metadata`` merges (the run's keys win), and the run's metadata records
    the ``assistant_id``."""
    assert body.assistant_id is not None
    found = await Assistants(service.saver, ns, list(service.graphs.apps)).get(body.assistant_id)
    mine = body.config.model_dump(exclude_defaults=True) if body.config is not None else {}
    theirs = dict(found["config"])
    merged = {
        **theirs,
        **mine,
        "metadata": {**theirs.get("metadata", {}), **mine.get("metadata", {})},
        "configurable": {**theirs.get("configurable", {}), **mine.get("configurable", {})},
    }
    metadata = {**found["metadata"], **(body.metadata or {}), "assistant_id": body.assistant_id}
    update: dict[str, Any] = {"config": RunConfig.model_validate(merged), "metadata": metadata}
    if body.context is None and isinstance(found.get("context"), dict) and found["context"]:
        update["context"] = found["context"]  # the assistant's context; the run's own replaces it
    return str(found["graph_id"]), body.model_copy(update=update)
