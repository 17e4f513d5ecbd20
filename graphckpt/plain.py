"""Plain-data views of the engine's records: what the CLI's ``--json`` prints and its tables show, and what the web
UI's pages show.

Every function returns JSON-compatible data with stable keys, so scripts can rely on them.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import enum
import math
import pathlib
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pydantic

from graphckpt.checkpoint import CheckpointRef, Snapshot, ThreadInfo
from graphckpt.diff import UNSET, Change, Diff, FieldChange, field_change, json_pointer
from graphckpt.errors import CorruptCheckpointError

__all__ = [
    "change_record",
    "created_iso",
    "diff_record",
    "duration_ms",
    "graph_of",
    "json_patch",
    "leaf_record",
    "schema_version_of",
    "audit_of",
    "metadata_of",
    "ran_nodes",
    "ref_text",
    "snapshot_record",
    "source_of",
    "state_dict",
    "step_record",
    "thread_record",
    "thread_trees",
    "to_jsonable",
    "tokens",
    "unset_as_changes",
    "without_nan_changes",
]


def to_jsonable(value: Any) -> Any:
    """``value`` as JSON-compatible data: models and dataclasses become dicts, sets sorted lists, times ISO text,
    bytes base64 text, non-finite floats (NaN, Infinity, -Infinity: not JSON) ``None``; anything else unknown
    becomes its ``repr``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, set | frozenset):
        items = [to_jsonable(v) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, pydantic.BaseModel):
        return {k: to_jsonable(getattr(value, k, None)) for k in type(value).model_fields}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, decimal.Decimal | uuid.UUID | pathlib.PurePath):
        return str(value)
    return repr(value)


def state_dict(values: Any) -> dict[str, Any]:
    """A snapshot's values (a model instance or a dict) as JSON-compatible data."""
    out = to_jsonable(values)
    return out if isinstance(out, dict) else {"value": out}


def ref_text(ref: CheckpointRef | None) -> str | None:
    """``thread@checkpoint`` or ``None``."""
    return f"{ref.thread_id}@{ref.checkpoint_id}" if ref is not None else None


def metadata_of(record: Any) -> Mapping[str, Any] | None:
    """``record.metadata`` (a snapshot's or a thread's), or ``None`` when the stored row holds no readable JSON
    object (a tampered database): the tables then show ``?`` and ``--json`` prints ``null``."""
    try:
        metadata = record.metadata
        if isinstance(metadata, Mapping):
            len(metadata)  # a lazily parsed row is parsed here
            return metadata
    except CorruptCheckpointError:
        pass
    return None


def _meta(metadata: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return metadata if metadata is not None else {}


def _number(value: Any) -> float:
    """A stored count or duration as a finite number; anything else (text, booleans, NaN, numbers too large for a
    float) counts as 0: metadata is data a tampered row may fill with anything."""
    if type(value) not in (int, float):
        return 0.0
    try:
        number = float(value)
    except OverflowError:
        return 0.0
    return number if math.isfinite(number) else 0.0


def _count(value: Any) -> int:
    """A stored token count: an integer as stored, a finite float cut to one, anything else 0."""
    return value if type(value) is int else int(_number(value))


def duration_ms(metadata: Mapping[str, Any] | None) -> float:
    """Total node time of a step, in milliseconds (0 when the metadata holds no readable durations)."""
    durations = _meta(metadata).get("durations_ms")
    if not isinstance(durations, Mapping):
        return 0.0
    total = sum(_number(v) for v in durations.values())
    return total if math.isfinite(total) else 0.0


def tokens(metadata: Mapping[str, Any] | None) -> int:
    """Prompt plus completion tokens reported by the nodes of a step (counts that are not numbers count as 0)."""
    usage = _meta(metadata).get("usage")
    if not isinstance(usage, Mapping):
        return 0
    total = 0
    for node in usage.values():
        if isinstance(node, Mapping):
            total += sum(_count(node.get(k)) for k in ("prompt_tokens", "completion_tokens"))
    return total


def ran_nodes(metadata: Mapping[str, Any] | None) -> list[str]:
    """The nodes whose work a checkpoint holds (``input``/``fork`` for those sources)."""
    source = _meta(metadata).get("source")
    if source in ("input", "fork", "update"):
        return [str(source)]
    durations = _meta(metadata).get("durations_ms")
    return [str(n) for n in durations] if isinstance(durations, Mapping) else []


def source_of(metadata: Mapping[str, Any] | None) -> str:
    """The checkpoint's ``source`` as text, ``?`` when there is none."""
    source = _meta(metadata).get("source")
    return "?" if source is None else str(source)


def graph_of(metadata: Mapping[str, Any] | None) -> str | None:
    """The ``MODULE:ATTR`` graph reference the CLI records in a checkpoint's tags (shown, never imported)."""
    tags = _meta(metadata).get("tags")
    graph = tags.get("graph") if isinstance(tags, Mapping) else None
    return graph if isinstance(graph, str) else None


def created_iso(snap: Snapshot) -> str | None:
    """When the checkpoint was made, as ISO text; ``None`` when the stored time is no date (a tampered row)."""
    try:
        return snap.created_at.isoformat()
    except (OverflowError, OSError, ValueError, TypeError):
        return None


def audit_of(metadata: Mapping[str, Any] | None) -> dict[str, list[dict[str, Any]]]:
    """The checkpoint's audit record (``calls``, ``requests``, ``attempts``, ``answers``), each a list (empty when
    absent)."""
    audit = _meta(metadata).get("audit")
    out: dict[str, list[dict[str, Any]]] = {}
    for key in ("calls", "requests", "attempts", "answers"):
        items = audit.get(key) if isinstance(audit, Mapping) else None
        out[key] = [to_jsonable(i) for i in items if isinstance(i, Mapping)] if isinstance(items, list) else []
    return out


def schema_version_of(snap: Snapshot) -> int | None:
    """The state schema version that wrote the checkpoint; ``None`` when its body does not decode."""
    try:
        return snap.schema_version
    except CorruptCheckpointError:
        return None


def thread_record(info: ThreadInfo, spend: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A thread as ``threads --json`` prints it (with ``spend``: own, inherited and total tokens, lost calls and
    cost)."""
    out = {
        "thread_id": info.thread_id,
        "status": info.status,
        "step": info.step,
        "head": info.head.checkpoint_id,
        "created_at": info.created_at.isoformat(),
        "updated_at": info.updated_at.isoformat(),
        "forked_from": ref_text(info.forked_from),
        "graph": graph_of(metadata_of(info)),
        "error": info.error,
        "lease": lease_record(info),
    }
    if spend is not None:
        out["spend"] = to_jsonable(spend)
    return out


def lease_record(info: ThreadInfo) -> dict[str, Any] | None:
    """Who holds the thread (``threads --json``): owner, epoch, heartbeat and expiry (ISO times), or ``None``."""
    lease = info.lease
    if lease is None:
        return None
    return {
        "worker_id": lease.owner.worker_id,
        "host": lease.owner.host,
        "pid": lease.owner.pid,
        "epoch": lease.epoch,
        "heartbeat_at": _iso(lease.heartbeat_at),
        "lease_until": _iso(lease.lease_until),
    }


def _iso(seconds: float) -> str | None:
    try:
        return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat()
    except (OverflowError, OSError, ValueError):
        return None


def step_record(snap: Snapshot) -> dict[str, Any]:
    """A checkpoint as ``history --json`` prints it (no values): with its schema version, its audit record
    (``calls``, failed ``attempts`` with their tracebacks, interrupt ``answers``) and the time of the journaled
    calls it replayed (``replayed_ms``, part of ``duration_ms``)."""
    metadata = metadata_of(snap)
    usage = _meta(metadata).get("usage")
    replayed = _meta(metadata).get("replayed_ms")
    return {
        "thread_id": snap.thread_id,
        "checkpoint_id": snap.checkpoint_id,
        "step": snap.step,
        "source": to_jsonable(_meta(metadata).get("source")),
        "ran": ran_nodes(metadata),
        "next": list(snap.next),
        "created_at": created_iso(snap),
        "duration_ms": round(duration_ms(metadata), 3),
        "tokens": tokens(metadata),
        "usage": to_jsonable(usage) if isinstance(usage, Mapping) else {},
        "parent": ref_text(snap.parent),
        "namespace": list(snap.namespace),
        "schema_version": schema_version_of(snap),
        "replayed_ms": to_jsonable(replayed) if isinstance(replayed, Mapping) else {},
        **audit_of(metadata),
    }


def snapshot_record(snap: Snapshot, *, raw: bool) -> dict[str, Any]:
    """A checkpoint with its state, as ``show --json`` prints it. ``raw``: values were read without the graph."""
    return {
        "thread_id": snap.thread_id,
        "checkpoint_id": snap.checkpoint_id,
        "step": snap.step,
        "status": snap.status,
        "next": list(snap.next),
        "interrupts": [{"node": i.node, "when": i.when, "payload": to_jsonable(i.payload)} for i in snap.interrupts],
        "errors": [
            {"node": e.node, "type": e.type, "message": e.message, "traceback": e.traceback} for e in snap.errors
        ],
        "schema_version": schema_version_of(snap),
        "attempts": audit_of(metadata_of(snap))["attempts"],
        "parent": ref_text(snap.parent),
        "created_at": created_iso(snap),
        "metadata": to_jsonable(metadata_of(snap)),
        "raw": raw,
        "values": state_dict(snap.values),
    }


def _value(value: Any) -> Any:
    """A diff value as JSON data: :data:`~graphckpt.diff.UNSET` (and ``MISSING``) as ``None``."""
    return None if isinstance(value, type(UNSET)) else to_jsonable(value)


def change_record(change: FieldChange) -> dict[str, Any]:
    """One changed field of a diff. A side the stored state does not hold (a raw read of a field at its default)
    is ``null``, and ``"unset"`` names it (``"before"`` or ``"after"``)."""
    out: dict[str, Any] = {"before": _value(change.before), "after": _value(change.after)}
    unset = [side for side, value in (("before", change.before), ("after", change.after)) if value is UNSET]
    if unset:
        out["unset"] = unset[0]
    if change.appended is not None:
        out.update(common=change.common, appended=to_jsonable(change.appended), dropped=to_jsonable(change.dropped))
    return out


def leaf_record(change: Change) -> dict[str, Any]:
    """One leaf of a diff (``Diff.changes``): its path as text and as a JSON pointer, the op, before and after."""
    out: dict[str, Any] = {"path": change.where, "pointer": json_pointer(change.path), "op": change.op}
    if change.op != "add":
        out["before"] = _value(change.before)
    if change.op != "remove":
        out["after"] = _value(change.after)
    return out


def unset_as_changes(diff: Diff) -> Diff:
    """A raw diff (values read without the schema) as the graph would see it: a field only one side's stored state
    holds is at its default on the other side, so it is *changed* from (or to) :data:`~graphckpt.diff.UNSET`, not
    added (or removed). Keeps the order of ``diff.changed``, then the fields that were added, then removed."""
    if not diff.added and not diff.removed:
        return diff
    changed = dict(diff.changed)
    changed.update({k: FieldChange(UNSET, v) for k, v in diff.added.items()})
    changed.update({k: FieldChange(v, UNSET) for k, v in diff.removed.items()})
    return dataclasses.replace(diff, added={}, removed={}, changed=changed)


def diff_record(diff: Diff, *, raw: bool) -> dict[str, Any]:
    """A diff as ``diff --json`` prints it."""
    return {
        "a": ref_text(diff.a),
        "b": ref_text(diff.b),
        "raw": raw,
        "added": to_jsonable(diff.added),
        "removed": to_jsonable(diff.removed),
        "changed": {k: change_record(c) for k, c in diff.changed.items()},
        "changes": [leaf_record(c) for c in diff.changes()],
    }


def json_patch(diff: Diff) -> list[dict[str, Any]]:
    """``diff --format patch``: the RFC 6902 JSON Patch from ``a``'s values to ``b``'s (values as JSON data)."""
    return diff.to_json_patch(encode=to_jsonable)


def _same(a: Any, b: Any) -> bool:
    """``a == b``, except that NaN equals NaN (also inside containers, models and dataclasses)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple) and type(a) is type(b):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, pydantic.BaseModel) and type(a) is type(b):
        return all(_same(getattr(a, k, None), getattr(b, k, None)) for k in type(a).model_fields)
    if dataclasses.is_dataclass(a) and not isinstance(a, type) and type(a) is type(b):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    try:
        return bool(a == b)
    except Exception:  # an odd __eq__: not the same
        return False


def without_nan_changes(diff: Diff) -> Diff:
    """``diff`` without the changes that only NaN made (NaN != NaN, so a field that is NaN on both sides compares
    unequal); list changes get their common prefix recounted the same way."""
    changed: dict[str, FieldChange] = {}
    for key, change in diff.changed.items():
        if _same(change.before, change.after):
            continue
        if change.appended is not None and isinstance(change.before, list) and isinstance(change.after, list):
            change = field_change(change.before, change.after, _same)
        changed[key] = change
    if changed.keys() == diff.changed.keys() and all(changed[k] is diff.changed[k] for k in changed):
        return diff
    return dataclasses.replace(diff, changed=changed)


def thread_trees(
    infos: Sequence[ThreadInfo], own: Mapping[str, Sequence[Snapshot]], root: str, *, limit: int | None = None
) -> dict[str, Any]:
    """The fork tree under thread ``root``: each thread with its own checkpoints (oldest first, from ``own``; only
    the newest ``limit`` when given), and every fork attached to the checkpoint it branched from (or to the thread,
    when that checkpoint is not shown). Each thread's ``tokens`` is the total of all its own checkpoints, shown or
    not, and ``hidden`` counts those ``limit`` left out."""
    children: dict[str, list[ThreadInfo]] = {}
    for info in infos:
        if info.forked_from is not None and info.thread_id != root:
            children.setdefault(info.forked_from.thread_id, []).append(info)
    by_id = {i.thread_id: i for i in infos}

    def build(info: ThreadInfo, seen: frozenset[str]) -> dict[str, Any]:
        mine = list(own.get(info.thread_id, ()))
        shown = mine[-limit:] if limit is not None else mine
        node = {
            **thread_record(info),
            "tokens": sum(tokens(metadata_of(s)) for s in mine),
            "hidden": len(mine) - len(shown),
            "checkpoints": [{**step_record(s), "forks": []} for s in shown],
            "forks": [],
        }
        at = {cp["checkpoint_id"]: cp for cp in node["checkpoints"]}
        for child in sorted(children.get(info.thread_id, []), key=lambda i: i.created_at):
            if child.thread_id in seen:
                continue
            sub = build(child, seen | {child.thread_id})
            assert child.forked_from is not None
            target = at.get(child.forked_from.checkpoint_id)
            (target["forks"] if target is not None else node["forks"]).append(sub)
        return node

    return build(by_id[root], frozenset({root}))
