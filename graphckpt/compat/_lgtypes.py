"""LangGraph's types stored safely: graphckpt's msgpack serializer with an explicit allow-list for LangGraph.

Allowed: everything :mod:`graphckpt.serde` stores, every LangChain message class (``langchain_core.messages``),
LangGraph's ``Send``, ``Interrupt``, ``Command`` and ``Overwrite``, and the pydantic models, enums and dataclasses the
caller registers (by hand or from a graph's state schemas, :func:`schema_types`). Loading builds only those types and
finds them by their registered name: nothing is ever imported by a name read from storage. A value of any other type
is refused when it is written, with :class:`~graphckpt.errors.SerializationError` naming it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import types
import typing
from collections.abc import Iterable, Iterator
from typing import Any

import pydantic
import typing_extensions

from graphckpt.errors import CorruptCheckpointError, SerializationError
from graphckpt.serde import Serializer

__all__ = ["TYPE_NAME", "SafeSerde", "langgraph_serializer", "schema_types"]

TYPE_NAME = "graphckpt-msgpack"
"""The type tag :class:`SafeSerde` gives its bytes (LangGraph's ``dumps_typed`` pairs)."""


def _message_classes() -> list[type]:
    import langchain_core.messages as messages

    found = []
    for name in dir(messages):
        tp = getattr(messages, name)
        if isinstance(tp, type) and issubclass(tp, messages.BaseMessage) and not tp.__name__.startswith("Base"):
            found.append(tp)
    return found


def _send_codec(serializer: Serializer) -> None:
    from langgraph.types import Send

    def encode(send: Send) -> list[Any]:
        timeout = send.timeout
        if timeout is not None and not isinstance(timeout, (int, float, dt.timedelta)):
            raise SerializationError(f"cannot store a Send with a timeout of type {type(timeout).__qualname__}")
        return [send.node, send.arg, timeout]

    def decode(fields: Any) -> Send:
        node, arg, timeout = fields
        return Send(node, arg, timeout=timeout) if timeout is not None else Send(node, arg)

    serializer.register_codec(Send, encode, decode)


def _interrupt_codec(serializer: Serializer) -> None:
    from langgraph.types import Interrupt

    def encode(item: Interrupt) -> list[Any]:
        schema = getattr(item, "response_schema", None)
        if schema is not None and not isinstance(schema, dict):
            raise SerializationError("cannot store an Interrupt whose response_schema is a class; give a dict")
        return [item.value, item.id, schema]

    def decode(fields: Any) -> Interrupt:
        value, ident, schema = fields
        return Interrupt(value=value, id=ident, response_schema=schema) if schema else Interrupt(value=value, id=ident)

    serializer.register_codec(Interrupt, encode, decode)


_ALWAYS = ("type", "content", "id")
"""A message's fields stored even at their default: what a reader without LangChain (the CLI, the UI) shows."""


def _message_codec(serializer: Serializer, tp: Any) -> None:
    """A LangChain message as its fields that differ from their defaults (a message has nine or more, most of them
    empty: ``additional_kwargs``, ``tool_calls``, ...) and :data:`_ALWAYS`, built again by validating them."""
    defaults = [(name, info.get_default(call_default_factory=True)) for name, info in tp.model_fields.items()]

    def encode(msg: Any) -> dict[str, Any]:
        fields = {}
        for name, default in defaults:
            value = getattr(msg, name)
            if name in _ALWAYS or (value is not default and (type(value) is not type(default) or value != default)):
                fields[name] = value
        extra = msg.__pydantic_extra__
        if extra:
            fields.update((key, value) for key, value in extra.items() if key not in fields)
        return fields

    def decode(fields: Any) -> Any:
        if not isinstance(fields, dict):
            raise SerializationError(f"a stored {tp.__qualname__} is not a mapping of its fields")
        return tp.model_validate(fields)

    serializer.register_codec(tp, encode, decode)


def langgraph_serializer(registered: Iterable[type] = ()) -> Serializer:
    """A :class:`~graphckpt.serde.Serializer` allowing LangChain messages, LangGraph's own types and ``registered``."""
    from langgraph.types import Command

    serializer = Serializer()
    for tp in _message_classes():
        _message_codec(serializer, tp)
    _send_codec(serializer)
    _interrupt_codec(serializer)
    serializer.register(Command)
    try:
        from langgraph.types import Overwrite
    except ImportError:  # older langgraph
        pass
    else:
        serializer.register(Overwrite)
    for tp in registered:
        serializer.register(tp)
    return serializer


def schema_types(*annotations: Any) -> Iterator[type]:
    """Every pydantic model, Enum and dataclass reachable from type annotations (a graph's state schema, its
    input/output schemas, the fields of those types), each once."""
    seen: set[int] = set()
    stack = list(annotations)
    while stack:
        tp = stack.pop()
        if id(tp) in seen:
            continue
        seen.add(id(tp))
        if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
            yield tp
            stack.extend(f.annotation for f in tp.model_fields.values())
        elif isinstance(tp, type) and issubclass(tp, enum.Enum):
            yield tp
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
            yield tp
            stack.extend(_hints(tp).values())
        elif isinstance(tp, type) and typing_extensions.is_typeddict(tp):
            stack.extend(_hints(tp).values())
        stack.extend(a for a in typing.get_args(tp) if not isinstance(a, (str, int, float, bool, types.NoneType)))


def _hints(tp: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(tp, include_extras=True)
    except Exception:  # an annotation that does not resolve: its raw form still names the classes it can
        return {k: v for k, v in getattr(tp, "__annotations__", {}).items() if not isinstance(v, str)}


class SafeSerde:
    """LangGraph's ``SerializerProtocol`` (``dumps_typed`` / ``loads_typed``) over :func:`langgraph_serializer`."""

    def __init__(self, serializer: Serializer) -> None:
        self.serializer = serializer

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return TYPE_NAME, self.serializer.dumps(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        kind, payload = data
        if kind != TYPE_NAME:
            raise CorruptCheckpointError(f"stored value has type tag {kind!r}, not {TYPE_NAME!r}; it was not loaded")
        return self.serializer.loads(payload)
