"""The long-term item store's part of the saver interface (DESIGN.md §7 "store"): ``store_items`` rows in graphckpt's
own schema, beside the checkpoints, so memories shared across threads live in the same database and transactions.

An item is ``(namespace, key) -> value``: the namespace a tuple of labels, stored as one text column joined with
``"."`` (labels never contain a period, as in LangGraph, so the join is unambiguous and a namespace prefix is a range
of that column: ``ns = p OR (ns > p || '.' AND ns < p || '/')``, ``'/'`` being the character after ``'.'``);
the value a JSON object stored as text; created and updated times (seconds since the epoch, the saver's clock);
an optional time to live in minutes with the time it expires (an expired item is invisible to every read and deleted
by :meth:`ItemTable.item_sweep`); an optional embedding vector (float32 bytes) for semantic search.

The backends store and page; the rules every backend shares (namespace checks, the filter language, namespace
listing) are the functions of this module, so memory, SQLite and PostgreSQL answer the same calls the same way.
Filters are applied in Python over the live items under the namespace prefix (the scan's cost is the number of items
under the prefix; a search without a filter or query pages in SQL).
"""

from __future__ import annotations

import abc
import array
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from graphckpt.errors import GraphckptError, SerializationError

__all__ = [
    "ItemRow",
    "ItemTable",
    "InvalidItemError",
    "decode_vector",
    "encode_namespace",
    "encode_vector",
    "item_matches",
    "namespace_range",
    "select_namespaces",
]


class InvalidItemError(GraphckptError, ValueError):
    """A namespace, key, value, filter or TTL the item store cannot accept; the message names which."""


@dataclass(frozen=True, slots=True)
class ItemRow:
    """A ``store_items`` row."""

    namespace: str
    """The labels joined with ``"."`` (see :func:`encode_namespace`)."""
    key: str
    value: str
    """The JSON text of the value (an object)."""
    created_at: float
    updated_at: float
    ttl_minutes: float | None = None
    expires_at: float | None = None
    """``updated_at`` (or the last read that refreshed it) plus the TTL; ``None``: never expires."""
    vector: bytes | None = None
    """The embedding of the indexed fields, float32 (see :func:`encode_vector`); ``None``: not indexed."""


class ItemTable(abc.ABC):
    """Mixed into every saver. Each method is one statement (or one transaction) of the backend."""

    @abc.abstractmethod
    async def item_put(self, row: ItemRow) -> None:
        """Insert or replace the item ``(row.namespace, row.key)``; an existing item keeps its ``created_at``."""

    @abc.abstractmethod
    async def item_get(self, namespace: str, key: str, *, now: float, refresh: bool) -> ItemRow | None:
        """The live item (not expired at ``now``), or ``None``. ``refresh``: an item with a TTL gets
        ``expires_at = now + ttl`` (the row returned shows the new expiry)."""

    @abc.abstractmethod
    async def item_delete(self, namespace: str, key: str) -> bool:
        """Delete the item; whether there was one (expired or not)."""

    @abc.abstractmethod
    async def item_scan(self, prefix: str, *, now: float, limit: int | None, offset: int) -> list[ItemRow]:
        """The live items whose namespace is ``prefix`` or starts with ``prefix + "."`` (all for ``""``), newest
        ``updated_at`` first, then by namespace and key; ``limit`` ``None``: all of them from ``offset``."""

    @abc.abstractmethod
    async def item_refresh(self, keys: Sequence[tuple[str, str]], *, now: float) -> None:
        """Restart the TTL of these live items (those with one) from ``now``."""

    @abc.abstractmethod
    async def item_namespaces(self, *, now: float) -> list[str]:
        """The distinct namespaces holding at least one live item, in any order."""

    @abc.abstractmethod
    async def item_sweep(self, *, now: float) -> int:
        """Delete the items expired at ``now``; how many."""


def encode_namespace(namespace: Sequence[str], *, what: str = "namespace", empty: bool = False) -> str:
    """``namespace`` checked and joined with ``"."``. Each label is a non-empty string without a period; the
    namespace itself is not empty unless ``empty`` (a search prefix may be)."""
    if isinstance(namespace, str) or not isinstance(namespace, Sequence):
        raise InvalidItemError(f"{what} must be a tuple of strings, not {type(namespace).__name__}")
    if not namespace and not empty:
        raise InvalidItemError(f"{what} must not be empty")
    for label in namespace:
        if not isinstance(label, str):
            raise InvalidItemError(f"{what} label {label!r} must be a string, not {type(label).__name__}")
        if not label:
            raise InvalidItemError(f"{what} labels must not be empty: {tuple(namespace)!r}")
        if "." in label:
            raise InvalidItemError(f"{what} label {label!r} must not contain a period ('.')")
        if "\x00" in label:
            raise InvalidItemError(f"{what} label {label!r} must not contain NUL")
    return ".".join(namespace)


def decode_namespace(text: str) -> tuple[str, ...]:
    return tuple(text.split(".")) if text else ()


def namespace_range(prefix: str) -> tuple[str, str, str]:
    """``(exact, low, high)``: a namespace under ``prefix`` equals ``exact`` or lies strictly between the other two."""
    return prefix, prefix + ".", prefix + "/"


def under(namespace: str, prefix: str) -> bool:
    return not prefix or namespace == prefix or namespace.startswith(prefix + ".")


def dump_value(value: Any, key: str) -> str:
    """The JSON text of an item's value (a mapping of JSON values); refuses anything else naming the key."""
    if not isinstance(value, Mapping):
        raise InvalidItemError(f"the value of item {key!r} must be a JSON object (a dict), not {type(value).__name__}")
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"the value of item {key!r} is not JSON: {exc}") from None


_OPERATORS = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}


def check_filter(filter: Mapping[str, Any] | None) -> None:
    """Refuse a filter that names an unknown operator (``$eq $ne $gt $gte $lt $lte``)."""
    if filter is None:
        return
    if not isinstance(filter, Mapping):
        raise InvalidItemError(f"filter must be a mapping of field to value, not {type(filter).__name__}")
    for field, wanted in filter.items():
        if isinstance(wanted, Mapping):
            for op in wanted:
                if isinstance(op, str) and op.startswith("$") and op not in _OPERATORS:
                    raise InvalidItemError(
                        f"filter on {field!r}: unknown operator {op!r} (known: {', '.join(_OPERATORS)})"
                    )
            if any(isinstance(op, str) and op.startswith("$") for op in wanted):
                continue
            check_filter(wanted)


def _field(value: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    """The value at ``path`` (a field name, or dotted names into nested objects), and whether it exists."""
    if path in value:
        return True, value[path]
    current: Any = value
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return False, None
        current = current[part]
    return True, current


def _matches(found: bool, actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in wanted):
        for op, operand in wanted.items():
            if op == "$ne":
                if found and actual == operand:
                    return False
                continue
            if not found:
                return False
            try:
                if not _OPERATORS[op](actual, operand):
                    return False
            except TypeError:  # incomparable types (a string against a number): no match
                return False
        return True
    if isinstance(wanted, Mapping):
        return found and isinstance(actual, Mapping) and all(_matches(*_field(actual, k), v) for k, v in wanted.items())
    return found and bool(actual == wanted)


def item_matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether an item's ``value`` passes ``filter``: every field (a name, or a dotted path into nested objects)
    equals the given value, or a nested mapping matches recursively, or ``{"$op": operand}`` holds for each operator
    (``$eq $ne $gt $gte $lt $lte``; a missing field passes only ``$ne``; incomparable types do not match)."""
    if not filter:
        return True
    return all(_matches(*_field(value, path), wanted) for path, wanted in filter.items())


def select_namespaces(
    namespaces: Sequence[str],
    *,
    prefix: Sequence[str] | None,
    suffix: Sequence[str] | None,
    max_depth: int | None,
    limit: int,
    offset: int,
) -> list[tuple[str, ...]]:
    """LangGraph's ``list_namespaces``: the namespaces that start with ``prefix`` and end with ``suffix`` (``"*"``
    matches any one label), cut to ``max_depth`` labels and deduplicated, sorted, then paged."""
    if max_depth is not None and max_depth < 1:
        raise InvalidItemError(f"max_depth must be at least 1, not {max_depth}")
    found: set[tuple[str, ...]] = set()
    for text in namespaces:
        ns = decode_namespace(text)
        if prefix and not _labels_match(ns[: len(prefix)], prefix):
            continue
        if suffix and (len(ns) < len(suffix) or not _labels_match(ns[len(ns) - len(suffix) :], suffix)):
            continue
        found.add(ns[:max_depth] if max_depth is not None else ns)
    return sorted(found)[offset : offset + limit]


def _labels_match(labels: Sequence[str], pattern: Sequence[str]) -> bool:
    return len(labels) == len(pattern) and all(p == "*" or p == label for label, p in zip(labels, pattern, strict=True))


def encode_vector(vector: Sequence[float]) -> bytes:
    """A vector as float32 bytes (little-endian as the machine's: written and read by the same build)."""
    values = [float(x) for x in vector]
    if not values or not all(math.isfinite(x) for x in values):
        raise InvalidItemError("an embedding must be a non-empty list of finite numbers")
    return array.array("f", values).tobytes()


def decode_vector(data: bytes) -> list[float]:
    out = array.array("f")
    out.frombytes(data)
    return out.tolist()


def expiry(now: float, ttl_minutes: float | None) -> float | None:
    return None if ttl_minutes is None else now + ttl_minutes * 60.0
