"""The audit record: every external call (started, finished, failed, lost), every failed attempt, every interrupt
answer, and what a thread spent.

While a super-step runs, its record lives in pending writes against the head (write kinds ``started``,
``finished``, ``attempt`` and ``answered``, next to the journal's ``effect`` rows, recorded through the same
``put_writes`` path). The commit of the step moves it into the new checkpoint's metadata under ``audit``
(:func:`step_audit`), so it survives the deletion of the pending rows; a failed or crashed thread's record is read
from its head's pending writes (:func:`pending_audit`).

``metadata["audit"]`` (every key optional)::

    calls     [{node, task, seq, effect, name, args, key, attempt, started_at, status, ms, model?, usage?, replays?,
                error?, reason?, owner?}]   status: finished | failed | lost (started, never finished: the process
                died); a lost call's ``reason`` (``owner gone``, ``lease taken over``, ``stopped``) and ``owner``
                ({host, pid, worker, heartbeat_at, epoch}) are written by the run that takes the thread over
    requests  [{node, task, seq, effect, call, key, request, outcome, status?, usage?, ms, at, model?, error?}]
                one per HTTP attempt of a model call (``call`` is its call's ``seq``, ``request`` its number in the
                call): outcome ok | http_error | timeout | connection_error | error; ``usage`` only when the server
                sent one: a timed-out request may be billed, but the client never receives its usage
    attempts  [{node, task, step, attempt, type, message, traceback, at, retried}]
    answers   [{node, task, index, question, answer, at, by, refused?}]
    tasks     [{task, started_at, ms}]   when each task of the step this run ran started (seconds since the epoch)
                and how long it took (its node and ``Send`` payload are the frontier's, by task id); a task whose
                result an earlier run recorded (before a crash) is not listed: its time is in ``durations_ms``

A call is written as ``started`` before it is made and ``finished`` (with its duration, in the same transaction as
its journal entry) after; a ``started`` row that never got its ``finished`` one is a *lost* call. Each start row
is moved into exactly one checkpoint, so a lost call is counted once, however often the thread is resumed.

A model call that starts only once its request is ready (``deferred_start``, see :meth:`Context.call_ready`) is not
recorded as started when it fails before that (an import, a client): it never reached the server.

Spend (:func:`spend`) sums the ``usage`` the nodes reported (the answers the run used) and the usage of failed HTTP
attempts that had one, and counts lost calls and timed-out attempts (their tokens are unknown: the server may have
billed them, nobody read the answer); a fork's own checkpoints are told from those it inherits. A :class:`Prices`
table turns tokens into cost.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphckpt.errors import CorruptCheckpointError, GraphckptError

if TYPE_CHECKING:
    from graphckpt.checkpoint import Task
    from graphckpt.records import Recorded, TaskResult
    from graphckpt.savers.base import StoredCheckpoint, ThreadRecord
    from graphckpt.store import ThreadStore

__all__ = [
    "PRICES_ENV",
    "CallInfo",
    "Prices",
    "Spend",
    "call_info",
    "describe_call",
    "digest",
    "failed_attempt",
    "pending_audit",
    "spend",
    "step_audit",
    "with_task_spans",
    "step_spend",
    "thread_audit",
    "thread_spend",
]

TRACEBACK_MAX = 8000
"""Characters of a failed attempt's traceback that are kept (its end: where it was raised)."""

PRICES_ENV = "GRAPHCKPT_PRICES"
"""The environment variable naming a price table file (see :class:`Prices`)."""


@dataclass(frozen=True, slots=True)
class CallInfo:
    """What an external call is, for the audit record: set on the effect's function with :func:`describe_call`."""

    name: str
    arguments: Any = None
    """Digested (never stored as is): the call's arguments."""
    model: str | None = None
    """For a model call: the model asked for (spend of lost calls is counted per model)."""
    usage: Callable[[Any], tuple[int, int]] | None = None
    """``(prompt_tokens, completion_tokens)`` of the call's result, for the call's entry."""
    system: str | None = None
    """For a model call: the provider (``gen_ai.provider.name``)."""
    deferred_start: bool = False
    """The function says when the call is about to leave the process (``await ctx.call_ready()``): its start marker
    is written then, not before the function runs (a call that fails earlier was never made)."""


_ATTR = "__graphckpt_call__"


def describe_call(
    fn: Callable[..., Any],
    name: str,
    *,
    arguments: Any = None,
    model: str | None = None,
    usage: Callable[[Any], tuple[int, int]] | None = None,
    system: str | None = None,
    deferred_start: bool = False,
) -> Callable[..., Any]:
    """Name the effect function ``fn`` in the audit record (``ctx.aeffect(describe_call(fn, "tool:x", ...))``);
    returns ``fn``. Without it a call is named by ``fn.__name__`` and its positional and keyword arguments. With
    ``deferred_start``, see :attr:`CallInfo.deferred_start`."""
    setattr(fn, _ATTR, CallInfo(name, arguments, model, usage, system, deferred_start))
    return fn


def call_info(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> CallInfo:
    """The :class:`CallInfo` of ``fn`` (described, or named after the function with its arguments)."""
    found = getattr(fn, _ATTR, None)
    if isinstance(found, CallInfo):
        return found
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    return CallInfo(str(name), [list(args), dict(kwargs)] if args or kwargs else None)


def digest(value: Any) -> str:
    """A short, stable digest of ``value`` (sha256 of its canonical JSON; objects JSON lacks count by ``repr``)."""
    try:
        text = json.dumps(value, sort_keys=True, default=repr, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "backslashreplace")).hexdigest()[:16]


def answered_by() -> str:
    """Who answers an interrupt from this process: ``user@host`` (``tags={"user": ...}`` on ``resume`` wins)."""
    import getpass  # here: only an answer needs them
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid()) if hasattr(os, "getuid") else "?"
    return f"{user}@{socket.gethostname()}"


def failed_attempt(task: Task, step: int, attempt: int, exc: BaseException, *, retried: bool) -> dict[str, Any]:
    """The record of one failed attempt of ``task``."""
    text = "".join(traceback.format_exception(exc))
    if len(text) > TRACEBACK_MAX:
        text = "…" + text[-TRACEBACK_MAX:]
    return {
        "node": task.node,
        "task": task.id,
        "step": step,
        "attempt": attempt,
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": text,
        "at": time.time(),
        "retried": retried,
    }


# -- a step's record, from its pending writes ------------------------------------------------------------------------


def _calls(recorded: Recorded, by_id: Mapping[str, Task]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for (task_id, seq), start in sorted(recorded.starts.items(), key=lambda kv: (kv[1].get("started_at", 0), kv[0])):
        task = by_id.get(task_id)
        entry: dict[str, Any] = {"node": task.node if task else start.get("node"), "task": task_id, "seq": seq, **start}
        end = recorded.finishes.get((task_id, seq))
        if end is None:
            entry["status"] = "lost"
        else:
            entry.update(end)
            entry.setdefault("status", "finished")
        replays = recorded.replays.get((task_id, int(start.get("effect", -1))))
        if replays and entry["status"] == "finished":
            entry["replays"] = replays
        out.append(entry)
    return out


def _requests(recorded: Recorded, by_id: Mapping[str, Task]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for (task_id, seq), request in sorted(recorded.requests.items(), key=lambda kv: (kv[1].get("at", 0), kv[0])):
        task = by_id.get(task_id)
        out.append({"node": task.node if task else None, "task": task_id, "seq": seq, **request})
    return out


def lost_marks(recorded: Recorded, previous: ThreadRecord, now: float) -> list[tuple[str, int, dict[str, Any]]]:
    """For a run taking over ``previous`` (the thread's row as its claim found it): ``(task_id, seq, end)`` of each
    call its previous owner started and never finished, ``end`` a ``finished`` row with status ``lost`` and why:
    ``owner gone`` (its lease expired, or its process is gone from this host), ``lease taken over`` (its lease was
    live) or ``stopped`` (no lease: the run stopped without the call's end), with the owner's host, pid and last
    heartbeat when the lease names them."""
    open_calls = [key for key in recorded.starts if key not in recorded.finishes]
    if not open_calls:
        return []
    lease = previous.lease
    end: dict[str, Any] = {"status": "lost", "finished_at": now}
    if lease is None:
        end["reason"] = "stopped"
    else:
        gone = not lease.live(now) or lease.owner.dead()
        end["reason"] = "owner gone" if gone else "lease taken over"
        end["owner"] = {
            "host": lease.owner.host,
            "pid": lease.owner.pid,
            "worker": lease.owner.worker_id,
            "heartbeat_at": lease.heartbeat_at,
            "epoch": lease.epoch,
        }
    return [(task_id, seq, dict(end)) for task_id, seq in open_calls]


def _answers(recorded: Recorded, by_id: Mapping[str, Task]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for (task_id, index), answer in sorted(recorded.answers.items(), key=lambda kv: kv[0]):
        task = by_id.get(task_id)
        entry: dict[str, Any] = {
            "node": task.node if task else None,
            "task": task_id,
            "index": index,
            "question": _plain(recorded.interrupts.get((task_id, index))),
            "answer": _plain(answer),
        }
        entry.update(recorded.answered.get((task_id, index), {}))
        later = recorded.interrupts.get((task_id, index + 1))
        if isinstance(later, Mapping) and later.get("error"):  # the node asked again, saying what was wrong
            entry["refused"] = str(later["error"])
        out.append(entry)
    return out


def _plain(value: Any) -> Any:
    """``value`` as JSON data for metadata (models as their fields, anything unknown as its ``repr``)."""
    try:
        return json.loads(json.dumps(value, default=_default, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def _default(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    return repr(value)


def step_audit(recorded: Recorded, tasks: Sequence[Task]) -> dict[str, Any] | None:
    """The ``audit`` metadata of the checkpoint that commits the step whose pending writes are ``recorded``."""
    by_id = {t.id: t for t in tasks}
    audit: dict[str, Any] = {}
    calls = _calls(recorded, by_id)
    if calls:
        audit["calls"] = calls
    requests = _requests(recorded, by_id)
    if requests:
        audit["requests"] = requests
    if recorded.attempts:
        audit["attempts"] = [recorded.attempts[k] for k in sorted(recorded.attempts, key=lambda k: (k[0], k[1]))]
    answers = _answers(recorded, by_id)
    if answers:
        audit["answers"] = answers
    return audit or None


def with_task_spans(audit: dict[str, Any] | None, results: Sequence[TaskResult]) -> dict[str, Any] | None:
    """``audit`` with the ``tasks`` of the step's ``results`` this run timed (see the module docstring)."""
    spans = [  # the node and whether it is a Send are the step's frontier's (by task id): not stored again
        {"task": r.task.id, "started_at": round(r.started_at, 6), "ms": round(r.duration_ms - r.replayed_ms, 3)}
        for r in results
        if r.started_at > 0
    ]
    if not spans:
        return audit
    return {**(audit or {}), "tasks": spans}


def pending_audit(recorded: Recorded, tasks: Sequence[Task]) -> dict[str, Any]:
    """The record of a step that has not committed (a failed, interrupted or crashed thread's head)."""
    return step_audit(recorded, tasks) or {}


# -- spend -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Prices:
    """A price table: per model, the price of a million input (prompt) and output (completion) tokens.

    As JSON (``--prices FILE``, or the file named by ``GRAPHCKPT_PRICES``)::

        {"gpt-4o-mini": {"input": 0.15, "output": 0.60}, "fake-model": {"input": 1, "output": 2}}

    A model missing from the table has no cost (``None``), never a guessed one."""

    table: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def parse(cls, data: Any, *, source: str = "the price table") -> Prices:
        """From ``{model: {"input": x, "output": y}}``; a clear error naming the model and field otherwise."""
        if not isinstance(data, Mapping):
            raise GraphckptError(f"{source}: expected a JSON object of models, got {type(data).__name__}")
        table: dict[str, tuple[float, float]] = {}
        for model, entry in data.items():
            if not isinstance(entry, Mapping):
                raise GraphckptError(f"{source}: model {model!r} needs {{'input': price, 'output': price}}")
            pair = []
            for key in ("input", "output"):
                value = entry.get(key, 0)
                if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
                    raise GraphckptError(
                        f"{source}: model {model!r} field {key!r} must be a price per million tokens, not {value!r}"
                    )
                pair.append(float(value))
            table[str(model)] = (pair[0], pair[1])
        return cls(table)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Prices:
        """Read a price table file (JSON)."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise GraphckptError(f"cannot read the price table {os.fspath(path)!r}: {exc.strerror or exc}") from None
        except json.JSONDecodeError as exc:
            raise GraphckptError(f"the price table {os.fspath(path)!r} is not JSON: {exc}") from None
        return cls.parse(data, source=f"price table {os.fspath(path)!r}")

    @classmethod
    def from_env(cls) -> Prices | None:
        """The table named by ``GRAPHCKPT_PRICES``, or ``None``."""
        path = os.environ.get(PRICES_ENV, "").strip()
        return cls.load(path) if path else None

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
        found = self.table.get(model)
        if found is None:
            return None
        return (prompt_tokens * found[0] + completion_tokens * found[1]) / 1_000_000


@dataclass(slots=True)
class Spend:
    """Tokens used (answers the run read) and calls lost, per model, and their cost when prices are known."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    """Model calls whose answers were used."""
    lost_calls: int = 0
    """Calls started and never finished (tokens unknown)."""
    failed_requests: int = 0
    """HTTP attempts of model calls that did not answer (a 5xx, a timeout, a dropped connection), retried or not."""
    failed_tokens: int = 0
    """Of the tokens: those of failed attempts whose server sent usage (billed, never used)."""
    unknown_requests: int = 0
    """Failed attempts whose usage is unknown (a timed-out request: the server may have billed it; the client
    never receives its usage)."""
    by_model: dict[str, dict[str, int]] = field(default_factory=dict)
    cost: float | None = None
    """With a price table: the cost of the used tokens (``None`` when a model is not priced)."""

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: Spend) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.calls += other.calls
        self.lost_calls += other.lost_calls
        self.failed_requests += other.failed_requests
        self.failed_tokens += other.failed_tokens
        self.unknown_requests += other.unknown_requests
        for model, counts in other.by_model.items():
            mine = self.by_model.setdefault(model, {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0, "lost": 0})
            for k, v in counts.items():
                mine[k] = mine.get(k, 0) + v

    def priced(self, prices: Prices | None) -> Spend:
        """``self`` with :attr:`cost` filled from ``prices`` (``None`` if any used model is not in the table)."""
        if prices is None:
            return self
        total: float | None = 0.0
        for model, counts in self.by_model.items():
            if not counts.get("prompt_tokens") and not counts.get("completion_tokens"):
                continue
            c = prices.cost(model, counts.get("prompt_tokens", 0), counts.get("completion_tokens", 0))
            total = None if c is None or total is None else total + c
        self.cost = total
        return self

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "tokens": self.tokens,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "calls": self.calls,
            "lost_calls": self.lost_calls,
            "failed_requests": self.failed_requests,
            "failed_tokens": self.failed_tokens,
            "unknown_requests": self.unknown_requests,
            "by_model": {m: dict(c) for m, c in sorted(self.by_model.items())},
        }
        if self.cost is not None:
            out["cost"] = round(self.cost, 8)
        return out


def _int(value: Any) -> int:
    if type(value) is int:
        return value
    if type(value) is float and math.isfinite(value):
        return int(value)
    return 0


def step_spend(metadata: Mapping[str, Any] | None) -> Spend:
    """What one checkpoint's step spent: its nodes' reported usage and its lost calls."""
    out = Spend()
    if not isinstance(metadata, Mapping):
        return out
    usage = metadata.get("usage")
    if isinstance(usage, Mapping):
        for entry in usage.values():
            if not isinstance(entry, Mapping):
                continue
            model = str(entry.get("model") or "?")
            p, c, n = (_int(entry.get(k)) for k in ("prompt_tokens", "completion_tokens", "calls"))
            out.prompt_tokens += p
            out.completion_tokens += c
            out.calls += n
            m = out.by_model.setdefault(model, {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0, "lost": 0})
            m["prompt_tokens"] += p
            m["completion_tokens"] += c
            m["calls"] += n
    audit = metadata.get("audit")
    calls = audit.get("calls") if isinstance(audit, Mapping) else None
    for call in calls if isinstance(calls, list) else ():
        if isinstance(call, Mapping) and call.get("status") == "lost":
            out.lost_calls += 1
            lost_model = call.get("model")
            if isinstance(lost_model, str):
                m = out.by_model.setdefault(
                    lost_model, {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0, "lost": 0}
                )
                m["lost"] += 1
    for request in _entries(audit, "requests"):
        _add_request(out, request)
    return out


def _add_request(out: Spend, request: Mapping[str, Any]) -> None:
    """A failed HTTP attempt into ``out``: its tokens when the server sent usage, else counted as unknown (the
    answering attempt's tokens are the node's reported usage already)."""
    if request.get("outcome") == "ok":
        return
    out.failed_requests += 1
    usage = request.get("usage")
    if not isinstance(usage, Mapping):
        if request.get("outcome") == "timeout":
            out.unknown_requests += 1
        return
    p, c = _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))
    out.prompt_tokens += p
    out.completion_tokens += c
    out.failed_tokens += p + c
    model = request.get("model")
    if isinstance(model, str):
        m = out.by_model.setdefault(model, {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0, "lost": 0})
        m["prompt_tokens"] += p
        m["completion_tokens"] += c


def spend(
    metadatas: Iterable[tuple[str, Mapping[str, Any] | None]], thread_id: str, prices: Prices | None = None
) -> dict[str, Any]:
    """A thread's spend from its lineage's ``(thread_id, metadata)`` pairs: ``own`` (checkpoints of this thread),
    ``inherited`` (a fork's ancestors up to the fork point) and ``total``."""
    own, inherited = Spend(), Spend()
    for tid, metadata in metadatas:
        (own if tid == thread_id else inherited).add(step_spend(metadata))
    total = Spend()
    total.add(own)
    total.add(inherited)
    return {
        "own": own.priced(prices).as_dict(),
        "inherited": inherited.priced(prices).as_dict(),
        "total": total.priced(prices).as_dict(),
    }


# -- a thread's record ---------------------------------------------------------------------------------------------


def _entries(audit: Any, key: str) -> list[dict[str, Any]]:
    items = audit.get(key) if isinstance(audit, Mapping) else None
    return [dict(i) for i in items if isinstance(i, Mapping)] if isinstance(items, list) else []


def _metadata_of(cp: StoredCheckpoint) -> Mapping[str, Any] | None:
    """``cp.metadata``, or ``None`` when the stored row holds no readable JSON object (a tampered database)."""
    try:
        metadata = cp.metadata
        if isinstance(metadata, Mapping):
            len(metadata)  # a lazily parsed row is parsed here
            return metadata
    except CorruptCheckpointError:
        pass
    return None


async def thread_spend(store: ThreadStore, record: ThreadRecord, prices: Prices | None = None) -> dict[str, Any]:
    """:func:`spend` of the thread of ``record`` (its lineage's metadata only: no values, no pending writes)."""
    cps = await store.lineage_checkpoints(record)
    return spend([(cp.thread_id, _metadata_of(cp)) for cp in cps], record.thread_id, prices)


async def thread_audit(store: ThreadStore, thread_id: str, prices: Prices | None = None) -> dict[str, Any]:
    """The whole record of a thread's lineage, oldest first: every call, failed attempt and interrupt answer, each
    with the ``step`` and ``thread_id`` of the checkpoint that holds it, then the head's step that has not
    committed yet (``pending: true``: a failed, interrupted or crashed step; its unfinished calls show as lost), and
    the spend (own, inherited, total)."""
    record = await store.thread(thread_id)
    cps = list(reversed(await store.lineage_checkpoints(record)))
    out: dict[str, Any] = {
        "thread_id": thread_id,
        "status": record.status,
        "calls": [],
        "requests": [],
        "attempts": [],
        "answers": [],
    }
    pairs: list[tuple[str, Mapping[str, Any] | None]] = []
    for cp in cps:
        metadata = _metadata_of(cp)
        audit = metadata.get("audit") if metadata is not None else None
        pairs.append((cp.thread_id, metadata))
        where = {"thread_id": cp.thread_id, "step": cp.step}
        for key in ("calls", "requests", "attempts", "answers"):
            out[key] += [{**where, **e} for e in _entries(audit, key)]
    head = await store.checkpoint(record.thread_id, record.head_checkpoint_id)
    try:
        body = store.codec.decode_body(head)
        pending = pending_audit(await store.recorded(head, body.tasks), body.tasks)
        out["schema_version"] = body.schema_version
    except CorruptCheckpointError:  # a tampered head: its committed record is still shown
        pending, out["schema_version"] = {}, None
    if pending:
        where = {"thread_id": thread_id, "step": head.step + 1, "pending": True}
        for key in ("calls", "requests", "attempts", "answers"):
            out[key] += [{**where, **e} for e in _entries(pending, key)]
        pairs.append((thread_id, {"audit": pending}))
    out["spend"] = spend(pairs, thread_id, prices)
    return out
