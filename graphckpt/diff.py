"""``Diff``: what differs between the state values of two checkpoints."""

from __future__ import annotations

import decimal
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from graphckpt.checkpoint import CheckpointRef

__all__ = ["Diff", "FieldChange", "diff_values"]


@dataclass(frozen=True, slots=True)
class FieldChange:
    """One field whose value differs. For lists that share a prefix, ``appended`` is what ``b`` has after the
    common prefix and ``dropped`` what ``a`` had after it (``common`` items)."""

    before: Any
    after: Any
    common: int | None = None
    appended: list[Any] | None = None
    dropped: list[Any] | None = None


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

    def __str__(self) -> str:
        lines = [f"diff {self.a.thread_id}@{self.a.checkpoint_id} -> {self.b.thread_id}@{self.b.checkpoint_id}"]
        lines += [f"+ {k} = {v!r}" for k, v in self.added.items()]
        lines += [f"- {k} = {v!r}" for k, v in self.removed.items()]
        for k, c in self.changed.items():
            if c.appended is not None and not c.dropped:
                lines.append(f"~ {k}: +{len(c.appended)} appended {c.appended!r}")
            elif c.appended is not None:
                lines.append(f"~ {k}: same first {c.common}, then {c.dropped!r} -> {c.appended!r}")
            else:
                lines.append(f"~ {k}: {c.before!r} -> {c.after!r}")
        if len(lines) == 1:
            lines.append("(no differences)")
        return "\n".join(lines)


def diff_values(a: CheckpointRef, va: Mapping[str, Any], b: CheckpointRef, vb: Mapping[str, Any]) -> Diff:
    added = {k: vb[k] for k in vb if k not in va}
    removed = {k: va[k] for k in va if k not in vb}
    changed: dict[str, FieldChange] = {}
    for k in va:
        if k in vb and not _equal(va[k], vb[k]):
            before, after = va[k], vb[k]
            if isinstance(before, list) and isinstance(after, list):
                common = 0
                for x, y in zip(before, after, strict=False):
                    if not _equal(x, y):
                        break
                    common += 1
                changed[k] = FieldChange(before, after, common, after[common:], before[common:])
            else:
                changed[k] = FieldChange(before, after)
    return Diff(a, b, added, removed, changed)


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
    return bool(a == b)
