"""A chat history as state: the :func:`add_messages` reducer, :class:`RemoveMessage` and :class:`MessagesState`.

A message is a dict (``{"role": "user", "content": "hi", "id": "m1"}``) or an object with an ``id`` attribute (a
pydantic model with an ``id: str | None`` field). :func:`add_messages` appends new messages, replaces the message
with the same id in place, and deletes the one a :func:`RemoveMessage` names.

Ids are deterministic. A message without an id gets one derived from its content, the id of the message before it
and its position (a UUID 5): the engine stores a reducer field's *writes* and folds them again when a checkpoint is
loaded, and a resumed run folds the same writes, so a fold must give the same ids every time. Two equal messages at
different places get different ids; the same write after the same history gets the same id.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, TypedDict

__all__ = ["REMOVE_ALL_MESSAGES", "MessagesState", "RemoveMessage", "add_messages", "is_removal"]

REMOVE_ALL_MESSAGES = "__remove_all__"
"""``RemoveMessage(id=REMOVE_ALL_MESSAGES)`` deletes every message before it, so the rest of the write replaces the
whole history."""

_NAMESPACE = uuid.UUID("8f0d5a36-5b7e-4a53-9c43-2b7d3c61e0a1")


def RemoveMessage(id: str) -> dict[str, Any]:  # LangGraph's name (a message class there)
    """The message that deletes the message with this id, in a write of an :func:`add_messages` field.

    It is plain data, ``{"type": "remove", "id": id}``, so it validates and is stored like any dict message (a
    write is stored as it was given and folded again when a checkpoint is loaded); :func:`is_removal` tells it
    apart."""
    if not isinstance(id, str) or not id:
        raise ValueError(f"RemoveMessage needs the id of a message, not {id!r}")
    return {"type": "remove", "id": id}


def is_removal(message: Any) -> bool:
    """Whether ``message`` is a :func:`RemoveMessage`."""
    return isinstance(message, Mapping) and message.get("type") == "remove"


def add_messages(left: Any, right: Any) -> list[Any]:
    """Reducer: merge the messages of ``right`` into ``left`` by id.

    Either side may be one message or a list. A message whose id is already in ``left`` replaces it where it is;
    a :func:`RemoveMessage` deletes it (a ``KeyError``-like ``ValueError`` when no message has that id); others are
    appended in order. A string is a user message, a ``(role, content)`` pair a message of that role. Returns a new
    list; the messages given are not changed (a copy gets the assigned id)."""
    old = _with_ids(_as_list(left), [])
    new = _with_ids(_as_list(right), old)
    cut = max((i for i, m in enumerate(new) if is_removal(m) and _id(m) == REMOVE_ALL_MESSAGES), default=None)
    if cut is not None:
        old, new = [], new[cut + 1 :]
    merged = list(old)
    where = {_id(m): i for i, m in enumerate(merged)}
    removed: set[int] = set()
    for m in new:
        mid = _id(m)
        at = where.get(mid)
        if is_removal(m):
            if at is None or at in removed:
                raise ValueError(f"RemoveMessage: no message has the id {mid!r}")
            removed.add(at)
        elif at is not None and at not in removed:
            merged[at] = m
        else:
            where[mid] = len(merged)
            merged.append(m)
    return [m for i, m in enumerate(merged) if i not in removed]


class MessagesState(TypedDict):
    """A state schema holding a chat history; subclass it to add fields."""

    messages: Annotated[list[dict[str, Any]], add_messages]


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)) and not _is_pair(value):
        return [_coerce(m) for m in value]
    return [_coerce(value)]


def _is_pair(value: Any) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and all(isinstance(x, str) for x in value)


def _coerce(message: Any) -> Any:
    if isinstance(message, str):
        return {"role": "user", "content": message}
    if _is_pair(message):
        return {"role": message[0], "content": message[1]}
    return message


def _id(message: Any) -> Any:
    if isinstance(message, Mapping):
        return message.get("id")
    return getattr(message, "id", None)


def _with_ids(messages: Sequence[Any], before: Sequence[Any]) -> list[Any]:
    """``messages`` with an id on each, deriving missing ones from the message before (in ``before``, then here)."""
    out: list[Any] = []
    previous = _id(before[-1]) if before else ""
    position = len(before)
    for m in messages:
        if _id(m) is None:
            mid = str(uuid.uuid5(_NAMESPACE, f"{position}\x00{previous}\x00{_content_key(m)}"))
            if isinstance(m, Mapping):
                m = {**m, "id": mid}
            elif hasattr(m, "model_copy"):
                m = m.model_copy(update={"id": mid})
            else:
                raise TypeError(f"add_messages: a message without an id must be a dict or a pydantic model: {m!r}")
        out.append(m)
        previous = _id(m)
        position += 1
    return out


def _content_key(message: Any) -> str:
    if isinstance(message, Mapping):
        return json.dumps(message, sort_keys=True, default=repr)
    dump = getattr(message, "model_dump_json", None)
    return dump() if callable(dump) else repr(message)
