'''Tools as typed Python functions, and a node that runs the tool calls a model asked for.

::

    @tool
    def get_weather(city: str, unit: Literal["c", "f"] = "c") -> dict[str, float]:
        """Current temperature for a city."""
        ...

    get_weather.openai_schema()   # {"type": "function", "function": {"name", "description", "parameters"}}
    g.add_node("tools", tool_node([get_weather]))

Arguments are validated by a pydantic model built from the signature (``Annotated[str, Field(description=...)]``
adds a description to the schema). A tool's result must be plain data (dict, list, str, numbers, bool, None) or a
pydantic model, which is dumped to JSON-compatible data; it is journaled, so a re-run of the task does not call the
tool again.

A sync tool runs in a worker thread (``asyncio.to_thread``, which carries the caller's contextvars), never on the
event loop: a slow or blocking tool does not hold up the tasks running beside it, the run's other I/O, or a Ctrl-C.
An async tool is awaited on the loop.

A tool that passes an idempotency key to the outside world (so a service drops the duplicate of a call repeated after
a crash) reads it with ``graphckpt.current_context().idempotency_key``: while the tool runs it is the key of that very
call (``thread:task:n``), the same on every re-run of the task; in a sync tool too (the worker thread carries the
context). The key is also in the audit record's entry for the call.
'''

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_type_hints, overload

import pydantic

from graphckpt.audit import describe_call

from ._base import NodeContext, state_get
from .errors import ToolError

__all__ = ["Tool", "tool", "tool_node"]


@dataclass(frozen=True)
class Tool:
    """A function a model may call: its name, description, argument model and the function itself."""

    name: str
    description: str
    fn: Callable[..., Any]
    args_model: type[pydantic.BaseModel]
    """Validates the arguments; unknown arguments are refused."""

    @classmethod
    def from_function(cls, fn: Callable[..., Any], *, name: str | None = None, description: str | None = None) -> Tool:
        """A tool from a typed function; the description defaults to the docstring's first paragraph."""
        tool_name = name or fn.__name__
        hints = get_type_hints(fn, include_extras=True)
        fields: dict[str, Any] = {}
        for param in inspect.signature(fn).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"tool {tool_name!r}: *args and **kwargs cannot be described to a model")
            if param.name not in hints:
                raise TypeError(f"tool {tool_name!r}: parameter {param.name!r} needs a type annotation")
            default = ... if param.default is param.empty else param.default
            fields[param.name] = (hints[param.name], default)
        model = pydantic.create_model(
            f"{tool_name}_arguments", __config__=pydantic.ConfigDict(extra="forbid"), **fields
        )
        doc = inspect.getdoc(fn) or ""
        return cls(tool_name, description or doc.split("\n\n", 1)[0].strip(), fn, model)

    def openai_schema(self) -> dict[str, Any]:
        """The entry for the ``tools=`` argument of ``chat.completions.create``."""
        parameters = self.args_model.model_json_schema()
        parameters.pop("title", None)
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": parameters},
        }

    def validate(self, arguments: str | Mapping[str, Any]) -> dict[str, Any]:
        """The validated arguments as keyword arguments for :attr:`fn`.

        ``arguments`` is the model's JSON string or a mapping. Raises :class:`~nodes.errors.ToolError` naming the tool
        and every invalid field.
        """
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except json.JSONDecodeError as exc:
                raise ToolError(f"tool {self.name!r}: arguments are not valid JSON ({exc})", tool=self.name) from None
        if not isinstance(arguments, Mapping):
            raise ToolError(f"tool {self.name!r}: arguments must be a JSON object", tool=self.name)
        try:
            parsed = self.args_model.model_validate(arguments)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(arguments)'}: {err['msg']}" for err in exc.errors()
            )
            raise ToolError(f"tool {self.name!r}: invalid arguments: {problems}", tool=self.name) from None
        return {name: getattr(parsed, name) for name in type(parsed).model_fields}

    async def ainvoke(self, arguments: str | Mapping[str, Any]) -> Any:
        """Validate ``arguments``, call the tool (a sync one in a worker thread) and return its result as plain data."""
        return await _bind(self, self.validate(arguments))()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (no validation), so a decorated function stays callable."""
        return self.fn(*args, **kwargs)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(*, name: str | None = None, description: str | None = None) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None, /, *, name: str | None = None, description: str | None = None
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Declare a tool: ``@tool`` or ``@tool(name=..., description=...)``. See :meth:`Tool.from_function`."""
    if fn is not None:
        return Tool.from_function(fn)

    def decorate(fn: Callable[..., Any]) -> Tool:
        return Tool.from_function(fn, name=name, description=description)

    return decorate


def tool_node(
    tools: Sequence[Tool | Callable[..., Any]],
    *,
    calls_key: str = "tool_calls",
    results_key: str = "tool_results",
    messages_key: str | None = None,
    on_error: Literal["result", "raise"] = "result",
    parallel: bool = False,
) -> Callable[[Any, NodeContext], Any]:
    """An async node ``(state, ctx) -> dict`` running the tool calls in ``state.<calls_key>``, in order (with
    ``parallel=True``: all at once, as a model's parallel tool calls are meant to run).

    Each call (``{"id", "function": {"name", "arguments"}}``, as a model sends it) is journaled with ``ctx.aeffect``.
    The node writes one result per call to ``results_key``: ``{"tool_call_id", "name", "output"}``, or
    ``{"tool_call_id", "name", "error"}`` when the tool is unknown or its arguments do not validate (the error names
    the tool and the field, so a model can correct itself). With ``on_error="raise"`` those cases raise
    :class:`~nodes.errors.ToolError` instead. An exception raised *by* a tool always propagates: the node fails and
    the engine's retry policy applies; calls already journaled are not repeated. With ``messages_key``, ``role:
    "tool"`` messages for the conversation are written there too.

    With ``parallel``, the calls are validated in order, then run concurrently (sync tools each in a worker thread);
    results are still written in call order, each call has its own journal entry, and when tools raise, the node
    waits for every call to finish, then raises the exception of the first failing call in call order.
    """
    by_name: dict[str, Tool] = {}
    for item in tools:
        t = item if isinstance(item, Tool) else Tool.from_function(item)
        if t.name in by_name:
            raise ValueError(f"two tools are named {t.name!r}")
        by_name[t.name] = t

    async def node(state: Any, ctx: NodeContext) -> dict[str, Any]:
        results: list[dict[str, Any]] = []
        pending: list[tuple[dict[str, Any], Callable[[], Any]]] = []  # parallel: the calls to run, with their result
        for call in state_get(state, calls_key) or []:
            function = call.get("function") or {}
            name, call_id = str(function.get("name", "")), call.get("id")
            result: dict[str, Any] = {"tool_call_id": call_id, "name": name}
            try:
                found = by_name.get(name)
                if found is None:
                    known = ", ".join(sorted(by_name)) or "none"
                    raise ToolError(f"unknown tool {name!r} (known tools: {known})", tool=name, call_id=call_id)
                arguments = found.validate(function.get("arguments") or "{}")
            except ToolError as exc:
                exc.call_id = call_id
                if on_error == "raise":
                    raise
                result["error"] = str(exc)
            else:
                if parallel:
                    pending.append((result, _bind(found, arguments)))
                else:
                    result["output"] = await ctx.aeffect(_bind(found, arguments))
            results.append(result)
        if pending:
            outputs = await asyncio.gather(*(ctx.aeffect(run) for _, run in pending), return_exceptions=True)
            for (result, _), output in zip(pending, outputs, strict=True):
                if isinstance(output, BaseException):
                    raise output
                result["output"] = output
        update: dict[str, Any] = {results_key: results}
        if messages_key is not None:
            update[messages_key] = [
                {"role": "tool", "tool_call_id": r["tool_call_id"], "content": _content(r)} for r in results
            ]
        return update

    node.__name__ = node.__qualname__ = "tool_node"
    return node


def _bind(found: Tool, arguments: dict[str, Any]) -> Callable[[], Any]:
    """The effect for one call: a closure, so only its (plain) result reaches the journal."""
    is_async = _is_async(found.fn)

    async def run() -> Any:
        if is_async:
            result = await found.fn(**arguments)
        else:  # in a worker thread (with this context's contextvars): a blocking tool must not block the event loop
            result = await asyncio.to_thread(found.fn, **arguments)
            if inspect.isawaitable(result):  # a sync function that returned an awaitable
                result = await result
        return _plain(result)

    run.__name__ = run.__qualname__ = f"tool:{found.name}"
    return describe_call(run, f"execute_tool {found.name}", arguments=arguments)


def _is_async(fn: Callable[..., Any]) -> bool:
    """``fn`` is an async function (or a partial of one, or an object with an async ``__call__``)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def _plain(value: Any) -> Any:
    """``value`` with every pydantic model in it, at any depth of lists, tuples and dicts, as plain JSON data."""
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _content(result: Mapping[str, Any]) -> str:
    if "error" in result:
        return f"error: {result['error']}"
    output = result.get("output")
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False, default=str)
