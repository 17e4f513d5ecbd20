"""``Diff``: what differs between the state values of two checkpoints.

A diff has two views. By field: ``added``, ``removed`` and ``changed`` (a :class:`FieldChange` per top-level field).
By leaf: :meth:`Diff.changes` walks into dicts, lists, tuples and models and yields one :class:`Change` per value that
differs, with its path (``tool_results[0].output[1].title``); :meth:`Diff.to_json_patch` is the same as an RFC 6902
JSON Patch (JSON-pointer paths, ops ``add``/``remove``/``replace``) that turns ``a``'s values into ``b``'s.

Defaults. A diff compares the state as the graph sees it: a field at its schema's default *has* that value, so a
field that one checkpoint holds at its default and the other has written is **changed** (``'' -> 'text'``), not
added. ``added``/``removed`` are for keys one side does not have at all (a dict state's key, a field a schema version
dropped). A reader without the schema (the CLI's raw reads) cannot know the default: it reports such a field as
changed from (or to) :data:`UNSET`, which JSON output prints as ``null`` with ``"unset"`` naming the side.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel

from graphckpt.checkpoint import CheckpointRef

__all__ = [
    "MISSING",
    "UNSET",
    "Change",
    "Diff",
    "FieldChange",
    "diff_values",
    "field_change",
    "format_path",
    "json_pointer",
]

Path = tuple[str | int, ...]
"""Where a value sits in the state: field names, dict keys and list indices, outermost first."""


class _Sentinel:
    def __init__(self, name: str, text: str) -> None:
        self._name, self._text = name, text

    def __repr__(self) -> str:
        return self._text

    def __reduce__(self) -> str:
        return self._name


MISSING: Any = _Sentinel("MISSING", "<missing>")
"""The side of a :class:`Change` that has no value at its path (``before`` of an add, ``after`` of a remove)."""
UNSET: Any = _Sentinel("UNSET", "(default)")
"""A field the stored state does not hold on this side (never written: at its schema's default, which a read
without the schema does not know). Only readers without the schema produce it (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class FieldChange:
    """One field whose value differs. For lists that share a prefix, ``appended`` is what ``b`` has after the
    common prefix and ``dropped`` what ``a`` had after it (``common`` items)."""

    before: Any
    after: Any
    common: int | None = None
    appended: list[Any] | None = None
    dropped: list[Any] | None = None


class Change(NamedTuple):
    """One leaf of a diff: the value at ``path`` was ``before`` and is ``after`` (:data:`MISSING` or
    :data:`UNSET` for the side without one)."""

    path: Path
    before: Any
    after: Any

    @property
    def op(self) -> Literal["add", "remove", "replace"]:
        """The JSON Patch operation: ``add`` (no value before), ``remove`` (none after), else ``replace``."""
        if self.before is MISSING or self.before is UNSET:
            return "add"
        if self.after is MISSING or self.after is UNSET:
            return "remove"
        return "replace"

    @property
    def note(self) -> str:
        """``"  (appended)"`` for an item added at the end of a list, ``"  (dropped)"`` for one removed, else ``""``."""
        if not self.path or not isinstance(self.path[-1], int) or self.op == "replace":
            return ""
        return "  (appended)" if self.op == "add" else "  (dropped)"

    @property
    def where(self) -> str:
        """The path as text: ``tool_results[0].output[1].title``."""
        return format_path(self.path)


def format_path(path: Path) -> str:
    """``("tool_results", 0, "title")`` as ``tool_results[0].title``; a key that is not a plain name is quoted
    (``meta["a.b"]``)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.isidentifier():
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out


def json_pointer(path: Path) -> str:
    """The RFC 6901 JSON pointer of ``path`` (``~`` and ``/`` in keys escaped as ``~0`` and ``~1``)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


@dataclass(frozen=True, slots=True)
class Diff:
    """Fields only in ``b`` (added), only in ``a`` (removed), and in both with different values (changed)."""

    a: CheckpointRef
    b: CheckpointRef
    added: dict[str, Any] = field(default_factory=dict)
    removed: dict[str, Any] = field(default_factory=dict)
    changed: dict[str, FieldChange] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def changes(self) -> Iterator[Change]:
        """Every value that differs, innermost: dicts by key, lists and tuples by index (extra items of ``b`` are
        adds, in order; missing ones removes, last first), models of one type by field. In the order a JSON Patch
        can apply them: changed fields, then added, then removed ones."""
        for key, change in self.changed.items():
            yield from _leaves((key,), change.before, change.after)
        for key, value in self.added.items():
            yield Change((key,), MISSING, value)
        for key, value in self.removed.items():
            yield Change((key,), value, MISSING)

    def to_json_patch(self, encode: Callable[[Any], Any] | None = None) -> list[dict[str, Any]]:
        """:meth:`changes` as an RFC 6902 JSON Patch: ``{"op", "path", "value"}`` objects (no ``value`` for
        ``remove``). Values are as in the state (models as models) unless ``encode`` makes them JSON data."""
        patch: list[dict[str, Any]] = []
        for change in self.changes():
            op: dict[str, Any] = {"op": change.op, "path": json_pointer(change.path)}
            if change.op != "remove":
                op["value"] = encode(change.after) if encode is not None else change.after
            patch.append(op)
        return patch

    def __str__(self) -> str:
        lines = [f"diff {self.a.thread_id}@{self.a.checkpoint_id} -> {self.b.thread_id}@{self.b.checkpoint_id}"]
        for change in self.changes():
            if change.op == "add" and change.before is MISSING:
                lines.append(f"+ {change.where} = {change.after!r}{change.note}")
            elif change.op == "remove" and change.after is MISSING:
                lines.append(f"- {change.where} = {change.before!r}{change.note}")
            else:
                lines.append(f"~ {change.where}: {change.before!r} -> {change.after!r}")
        if len(lines) == 1:
            lines.append("(no differences)")
        return "\n".join(lines)


def diff_values(a: CheckpointRef, va: Mapping[str, Any], b: CheckpointRef, vb: Mapping[str, Any]) -> Diff:
    added = {k: vb[k] for k in vb if k not in va}
    removed = {k: va[k] for k in va if k not in vb}
    changed: dict[str, FieldChange] = {}
    for k in va:
        if k in vb and not _equal(va[k], vb[k]):
            changed[k] = field_change(va[k], vb[k])
    return Diff(a, b, added, removed, changed)


def field_change(before: Any, after: Any, equal: Callable[[Any, Any], bool] | None = None) -> FieldChange:
    """The :class:`FieldChange` of a field; for two lists, with their common prefix (by ``equal``)."""
    if isinstance(before, list) and isinstance(after, list):
        same = equal or _equal
        common = 0
        for x, y in zip(before, after, strict=False):
            if not same(x, y):
                break
            common += 1
        return FieldChange(before, after, common, after[common:], before[common:])
    return FieldChange(before, after)


def _leaves(path: Path, a: Any, b: Any) -> Iterator[Change]:
    if _equal(a, b):
        return
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for k in a:
            if k in b:
                yield from _leaves((*path, k), a[k], b[k])
        yield from (Change((*path, k), MISSING, b[k]) for k in b if k not in a)
        yield from (Change((*path, k), a[k], MISSING) for k in a if k not in b)
    elif isinstance(a, list | tuple) and isinstance(b, list | tuple) and type(a) is type(b):
        common = min(len(a), len(b))
        for i in range(common):
            yield from _leaves((*path, i), a[i], b[i])
        yield from (Change((*path, i), MISSING, b[i]) for i in range(common, len(b)))
        yield from (Change((*path, i), a[i], MISSING) for i in reversed(range(common, len(a))))
    elif isinstance(a, BaseModel) and type(a) is type(b):
        yield from _leaves(path, _model_fields(a), _model_fields(b))
    else:
        yield Change(path, a, b)


def _model_fields(model: BaseModel) -> dict[str, Any]:
    return {**{f: getattr(model, f) for f in type(model).model_fields}, **(model.__pydantic_extra__ or {})}


def _equal(a: Any, b: Any) -> bool:
    """``==``, except that NaN equals NaN (a value that did not change is not reported), at any depth."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, decimal.Decimal) and isinstance(b, decimal.Decimal):  # Decimal("NaN") != itself too
        return a == b if not (a.is_nan() or b.is_nan()) else a.is_nan() and b.is_nan()
    if isinstance(a, list | tuple) and isinstance(b, list | tuple) and type(a) is type(b):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, BaseModel) and type(a) is type(b):
        fields = all(_equal(getattr(a, f), getattr(b, f)) for f in type(a).model_fields)
        return fields and _equal(a.__pydantic_extra__ or {}, b.__pydantic_extra__ or {})  # extra="allow" fields
    try:
        return bool(a == b)
    except Exception:  # an odd __eq__ (a tampered or foreign value): not the same
        return False
