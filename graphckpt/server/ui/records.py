"""Plain records of what a checkpoint holds beyond its values, for the checkpoint page: its open interrupts and the
pending writes recorded against it (task results, journaled effects, interrupts and their answers, errors); and
the fields of the inbox's answer form an object payload makes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from graphckpt.checkpoint import Interrupt
from graphckpt.plain import to_jsonable
from graphckpt.records import Recorded

__all__ = ["ASKING_KEYS", "answer_fields", "interrupt_record", "pending_rows"]


def interrupt_record(it: Interrupt) -> dict[str, Any]:
    return {"id": it.id, "node": it.node, "when": it.when, "payload": to_jsonable(it.payload)}


def pending_rows(recorded: Recorded) -> list[dict[str, Any]]:
    """The pending writes recorded against a checkpoint, one row per task result, effect, interrupt, error."""
    rows: list[dict[str, Any]] = []
    for task_id, result in recorded.results.items():
        rows.append({"kind": "result", "task": task_id, "node": result.task.node, "value": to_jsonable(result.update)})
    for (task_id, i), value in recorded.effects.items():
        rows.append({"kind": "journaled effect", "task": task_id, "node": f"call {i}", "value": to_jsonable(value)})
    for (task_id, i), value in recorded.interrupts.items():
        answered = (task_id, i) in recorded.answers
        value = {"asked": to_jsonable(value), "answer": to_jsonable(recorded.answers.get((task_id, i)))}
        kind = "interrupt (answered)" if answered else "interrupt (open)"
        rows.append({"kind": kind, "task": task_id, "node": f"call {i}", "value": value})
    for task_id, error in recorded.errors.items():
        rows.append({"kind": "error", "task": task_id, "node": error.node, "value": f"{error.type}: {error.message}"})
    return rows


ASKING_KEYS = frozenset({"question", "error", "node", "key", "expects", "options"})
"""Keys of an interrupt's payload that describe the question rather than hold a value to answer with."""


def answer_fields(payload: Any) -> list[dict[str, Any]]:
    """For an interrupt whose payload is a JSON object: a form field per value key (not :data:`ASKING_KEYS`),
    prefilled with its value (``is_text``: a string, edited as text; else edited as JSON); ``[]`` otherwise."""
    if not isinstance(payload, Mapping):
        return []
    out = []
    for name, value in payload.items():
        if name in ASKING_KEYS:
            continue
        text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False)
        out.append({"name": str(name), "is_text": isinstance(value, str), "value": text})
    return out
