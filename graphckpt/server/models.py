"""Request bodies and query strings as pydantic models, and how a handler reads them.

:func:`body` reads at most ``max_body`` bytes (413 beyond), parses JSON (400 when it is not) and validates it
(422 naming the first wrong field: ``body.limit: Input should be greater than 0``). :func:`query` does the same for
query parameters. Field names follow the LangGraph Agent Server API where it has one (``metadata``, ``limit``,
``offset``, ``before``, ``input``, ``command.resume``, ``multitask_strategy``, ``if_not_exists``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection
from itertools import accumulate
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request

from graphckpt.server.errors import ApiError

__all__ = [
    "AnswerBody",
    "CheckpointBody",
    "ForkBody",
    "HistoryBody",
    "RunBody",
    "RunCommand",
    "RunConfig",
    "ThreadBody",
    "ThreadPatchBody",
    "ThreadSearchBody",
    "body",
    "parsed_body",
    "query",
    "validated",
]

_M = TypeVar("_M", bound=BaseModel)

MAX_DEPTH = 100
"""Deepest nesting of arrays and objects a request body may have (checked on the bytes, before parsing)."""
MAX_INT = 2**63 - 1
"""Largest step, sequence number or limit the server takes (what SQLite's integers hold)."""
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")

ThreadStatusName = Literal[
    "idle", "busy", "interrupted", "error", "running", "done", "failed", "crashed", "partial", "waiting"
]
"""Both vocabularies: LangGraph's (``idle``, ``busy``, ``interrupted``, ``error``) and graphckpt's; ``waiting``: the
``interrupted`` threads a durable wait holds (each with its ``wake_at``)."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TtlBody(_Body):
    """LangGraph's thread TTL: delete the thread ``ttl`` minutes after its last activity."""

    strategy: Literal["delete"] = "delete"
    ttl: float = Field(gt=0, le=1e9)


class ThreadBody(_Body):
    thread_id: str | None = Field(default=None, min_length=1, max_length=512, pattern=r"^[^/\s]+$")
    metadata: dict[str, Any] = Field(default_factory=dict)
    if_exists: Literal["raise", "do_nothing"] = "raise"
    graph_id: str | None = None
    ttl: TtlBody | None = None


class ThreadPatchBody(_Body):
    """LangGraph's ``threads.update`` (``metadata``) and the Agent Protocol's ``ThreadPatch`` (``values`` and
    ``messages`` applied through the reducers, on the head or, with ``checkpoint``, on a past checkpoint)."""

    metadata: dict[str, Any] | None = None
    values: dict[str, Any] | None = None
    messages: list[dict[str, Any]] | None = Field(default=None, max_length=10_000)
    checkpoint: CheckpointRefBody | None = None

    def update(self) -> dict[str, Any] | None:
        """The state update asked for (``values`` with ``messages`` as its ``messages`` field), or ``None``."""
        if self.messages is None:
            return self.values
        if self.values is not None and "messages" in self.values:
            raise ApiError(422, "ValidationError", "body.messages: give the messages here or in body.values")
        return {**(self.values or {}), "messages": self.messages}


class ThreadSearchBody(_Body):
    metadata: dict[str, Any] = Field(default_factory=dict)
    values: dict[str, Any] | None = None
    """The Agent Protocol's filter: each key equal in the thread's current values."""
    status: ThreadStatusName | None = None
    graph_id: str | None = None
    parent_thread_id: str | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)


class CheckpointRefBody(_Body):
    checkpoint_id: str | None = None
    thread_id: str | None = None


class CheckpointBody(_Body):
    checkpoint: CheckpointRefBody


class HistoryBody(_Body):
    limit: int = Field(default=10, ge=1, le=1000)
    before: str | CheckpointRefBody | None = None
    metadata: dict[str, Any] | None = None

    def before_id(self) -> str | None:
        return self.before.checkpoint_id if isinstance(self.before, CheckpointRefBody) else self.before


class ForkBody(_Body):
    checkpoint_id: str | None = None
    step: int | None = Field(default=None, ge=0, le=MAX_INT)
    values: dict[str, Any] | None = None
    """The update applied through the reducers (LangGraph's ``update_state`` calls it ``values``)."""
    as_node: str | None = None
    new_thread_id: str | None = Field(default=None, min_length=1, max_length=512, pattern=r"^[^/\s]+$")
    goto: str | list[str] | None = None
    metadata: dict[str, Any] | None = None


class RunCommand(_Body):
    """LangGraph's ``Command`` as a run's input: ``resume`` answers the open interrupt; ``update`` (applied through
    the reducers) and ``goto`` (the node(s) to run next) edit the thread's head first (not with ``resume``)."""

    model_config = ConfigDict(extra="forbid")
    resume: Any = None
    update: dict[str, Any] | None = None
    goto: str | list[str] | None = None


class RunConfig(BaseModel):
    """A run's ``config`` (LangGraph's ``RunnableConfig``): what graphckpt applies; any other key is a 422."""

    model_config = ConfigDict(extra="forbid")
    recursion_limit: int | None = Field(default=None, ge=1, le=2**31 - 1)
    configurable: dict[str, Any] = Field(default_factory=dict)
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


class RunBody(BaseModel):
    """A run request in LangGraph's shape. A field graphckpt does not act on is refused (422 naming it), never
    dropped: unknown fields by pydantic, known ones it cannot honour yet by :meth:`unsupported`."""

    model_config = ConfigDict(extra="forbid")
    assistant_id: str | None = None
    input: dict[str, Any] | None = None
    command: RunCommand | None = None
    metadata: dict[str, Any] | None = None
    config: RunConfig | None = None
    context: dict[str, Any] | None = None
    stream_mode: str | list[str] | None = None
    stream_subgraphs: bool = False
    """Also stream the subgraphs' events, as ``event: MODE|node:task_id`` (ephemeral, see ``streams``)."""
    stream_resumable: bool = False
    """Every graphckpt stream is resumable (its durable events are stored): accepted either way."""
    multitask_strategy: Literal["reject", "enqueue", "interrupt", "rollback"] = "reject"
    if_not_exists: Literal["reject", "create"] = "create"
    on_disconnect: Literal["cancel", "continue"] = "continue"
    """``cancel``: the run is cancelled when the client leaves its stream before the run ended (``/runs/stream``)."""
    on_completion: Literal["delete", "keep"] | None = None
    recursion_limit: int | None = Field(default=None, ge=1, le=2**31 - 1)
    checkpoint_id: str | None = None
    """Time travel: the thread continues from this past checkpoint (a new head, the rest stays in its history)."""
    checkpoint: CheckpointRefBody | None = None
    interrupt_before: str | list[str] | None = None
    interrupt_after: str | list[str] | None = None
    durability: Literal["sync", "async", "exit"] | None = None
    """graphckpt always commits each step before the next starts (``sync``); the others only promise less."""
    checkpoint_during: bool | None = None
    strict_resume: bool | None = None
    feedback_keys: list[str] | None = None
    webhook: str | None = None
    after_seconds: int | None = None
    langsmith_tracer: dict[str, Any] | None = None
    ttl: TtlBody | None = None
    """The thread's time-to-live from this run on (LangGraph's shape, as at thread creation)."""

    def unsupported(self) -> str | None:
        """The first field given that this server cannot honour yet, as a message naming it (``None``: all fine)."""
        if self.after_seconds:
            return "body.after_seconds: delayed runs are not supported yet"
        if self.langsmith_tracer:
            return "body.langsmith_tracer: LangSmith tracing is not supported (graphckpt records its own trace)"
        if self.feedback_keys:
            return "body.feedback_keys: LangSmith feedback is not supported"
        if self.config is not None and self.config.tags:
            return "body.config.tags: run tags are not supported (use metadata)"
        return None

    def run_options(self, nodes: Collection[str]) -> dict[str, Any]:
        """The run's own options for :func:`graphckpt.runs.submit` (interrupt points checked against the graph's
        ``nodes``: an unknown name is a 422 naming the field)."""
        found: dict[str, Any] = {}
        for name in ("interrupt_before", "interrupt_after"):
            given: str | list[str] | None = getattr(self, name)
            if given is None:
                continue
            names = set(nodes) if given == "*" else {given} if isinstance(given, str) else set(given)
            unknown = sorted(names - set(nodes))
            if unknown:
                raise ApiError(422, "ValidationError", f"body.{name}: no node {unknown[0]!r} in the graph")
            found[name] = sorted(names)
        if self.config is not None and self.config.configurable:
            found["configurable"] = dict(self.config.configurable)
        if self.context is not None:
            found["context"] = dict(self.context)
        return found

    def limit(self) -> int | None:
        """The recursion limit asked for (``config.recursion_limit`` or the flat field)."""
        if self.config is not None and self.config.recursion_limit is not None:
            return self.config.recursion_limit
        return self.recursion_limit

    def branch_from(self) -> str | None:
        """The checkpoint a time-travel run starts from."""
        if self.checkpoint_id is not None:
            return self.checkpoint_id
        return self.checkpoint.checkpoint_id if self.checkpoint is not None else None


class AnswerBody(_Body):
    answer: Any = None
    """What ``ctx.interrupt`` returns (or ``{interrupt_id: answer}`` for several)."""
    assistant_id: str | None = None


async def body(request: Request, model: type[_M], max_body: int) -> _M:
    """The request's JSON body as ``model`` (an empty body is ``{}``)."""
    return validated(model, await parsed_body(request, max_body), "body")


async def parsed_body(request: Request, max_body: int) -> Any:
    """The request's JSON body, parsed and checked (size, depth, numbers, text) but not validated."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_body:
        raise ApiError(413, "PayloadTooLarge", f"the request body is larger than {max_body} bytes")
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > max_body:
            raise ApiError(413, "PayloadTooLarge", f"the request body is larger than {max_body} bytes")
    depth = nesting(bytes(data))
    if depth > MAX_DEPTH:
        raise ApiError(422, "ValidationError", f"the request body nests {depth} deep: at most {MAX_DEPTH} levels")
    try:
        parsed = json.loads(data) if data.strip() else {}
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "BadRequest", f"the request body is not JSON ({exc})") from None
    where = non_finite(parsed, "body")
    if where is not None:
        raise ApiError(422, "ValidationError", f"{where}: NaN and Infinity are not JSON numbers")
    try:  # a \ud800 escape decodes to a lone surrogate, which has no UTF-8 form: nothing could store or echo it
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ApiError(422, "ValidationError", "the request body holds text with a lone surrogate") from None
    return parsed


def nesting(data: bytes) -> int:
    """How deep the arrays and objects of the JSON text ``data`` nest (brackets inside strings do not count)."""
    brackets = _STRINGS.sub(b"", data).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    return max(accumulate(1 if b in b"[{" else -1 for b in brackets))


def non_finite(value: Any, where: str) -> str | None:
    """The path of the first non-finite number in ``value`` (parsed JSON, its depth bounded), or ``None``."""
    if isinstance(value, float):
        return None if math.isfinite(value) else where
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = non_finite(item, f"{where}.{key}")
        if found is not None:
            return found
    return None


def query(request: Request, model: type[_M], *, lists: tuple[str, ...] = ()) -> _M:
    """The query string as ``model``; parameters named in ``lists`` may repeat (or be comma-separated)."""
    params: dict[str, Any] = {}
    for key in request.query_params:
        values = request.query_params.getlist(key)
        if key in lists:
            params[key] = [v for item in values for v in item.split(",") if v]
        else:
            params[key] = values[-1]
    return validated(model, params, "query")


def validated(model: type[_M], data: Any, where: str) -> _M:
    if where == "body" and not isinstance(data, dict):
        raise ApiError(422, "ValidationError", "the request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in first["loc"])
        raise ApiError(422, "ValidationError", f"{where}.{path}: {first['msg']}") from None
