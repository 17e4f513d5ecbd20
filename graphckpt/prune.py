"""Retention and expiry: which threads a policy removes (last activity, status, ids, a per-thread time-to-live) and
removing them without breaking what stays.

A thread's *last activity* is its row's ``updated_at`` (every commit, claim and stop moves it). Its *time-to-live*
is the tag ``ttl`` of its runs (``invoke(..., ttl="7d")``, or ``tags={"ttl": "7d"}``: seconds, a ``timedelta``, or a
duration such as ``"90m"``, ``"12h"``, ``"30d"``; LangGraph's ``{"strategy": "delete", "ttl": MINUTES}`` too): it has
expired when its last activity is older than that. Resumed runs keep their thread's tags, so a TTL holds until a run
sets another.

With ``keep_last`` the threads chosen are not removed but trimmed to their last checkpoints (see
:mod:`graphckpt.keep_last`).

What a prune never breaks: a thread that is running with a live lease is never selected; the child threads of a
thread's subgraphs go with it (and are never selected on their own); a selected thread that a surviving fork
depends on is deleted by the saver as a placeholder that keeps its lineage up to the fork point (see
:meth:`~graphckpt.savers.base.Saver.delete_thread`), so every surviving thread still resumes, forks and diffs as
before. Deleting is idempotent: two sweepers racing remove each thread once (the loser finds it gone).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from graphckpt import ids
from graphckpt.errors import InvalidUpdateError, ThreadNotFoundError
from graphckpt.keep_last import trim_thread
from graphckpt.savers.base import Saver, Status, ThreadRecord
from graphckpt.savers.usage import StorageUsage
from graphckpt.subgraph import SEPARATOR, link_of, subgraph_threads

__all__ = [
    "TTL_SWEEP_EVERY",
    "PruneReport",
    "parse_duration",
    "prune",
    "sweep_expired",
    "ttl_of",
    "ttl_seconds",
    "with_ttl",
]

TTL_SWEEP_EVERY = 60.0
"""How often (seconds) workers and ``graphckpt serve`` sweep expired threads: a TTL is honoured within this long
after it runs out (each sweep lists the threads once)."""

logger = logging.getLogger("graphckpt")

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration(value: Any, *, what: str = "duration") -> float:
    """Seconds from a number of seconds or a text ``"<number><unit>"`` (s, m, h, d, w); a clear error otherwise."""
    if isinstance(value, bool):
        raise InvalidUpdateError(f"{what} must be seconds or a duration like '30d', not {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION.match(value) if isinstance(value, str) else None
        if match is None:
            raise InvalidUpdateError(f"{what} must be seconds or a duration like '90m', '12h', '30d': got {value!r}")
        seconds = float(match[1]) * _UNITS[match[2] or "s"]
    if not seconds > 0 or seconds == float("inf"):
        raise InvalidUpdateError(f"{what} must be more than 0 seconds: got {value!r}")
    return seconds


def ttl_seconds(ttl: Any) -> float:
    """The seconds of a TTL given to a run or a thread: seconds, a :class:`~datetime.timedelta`, a duration text
    (``"30d"``) or LangGraph's ``{"strategy": "delete", "ttl": minutes}``; :class:`InvalidUpdateError` naming
    ``ttl`` otherwise."""
    if isinstance(ttl, datetime.timedelta):
        ttl = ttl.total_seconds()
    elif isinstance(ttl, Mapping):
        minutes = ttl.get("ttl")
        if ttl.get("strategy", "delete") != "delete" or set(ttl) - {"strategy", "ttl"}:
            raise InvalidUpdateError(f"ttl: only {{'strategy': 'delete', 'ttl': minutes}} is supported, not {ttl!r}")
        if isinstance(minutes, bool) or not isinstance(minutes, int | float):
            raise InvalidUpdateError(f"ttl.ttl must be a number of minutes, not {minutes!r}")
        ttl = minutes * 60
    return parse_duration(ttl, what="ttl")


async def with_ttl(
    tags: Mapping[str, Any] | None, ttl: Any, saver: Saver, thread_id: str | None
) -> Mapping[str, Any] | None:
    """A run's tags with its ``ttl`` (see :func:`ttl_seconds`) set: ``tags`` when given, else the thread's current
    tags (so a TTL given alone changes nothing else); ``tags`` unchanged when ``ttl`` is ``None``."""
    if ttl is None:
        return tags
    seconds = ttl_seconds(ttl)
    if tags is None:
        record = await saver.get_thread(thread_id) if thread_id is not None else None
        found = record.metadata.get("tags") if record is not None else None
        tags = found if isinstance(found, Mapping) else {}
    return {**tags, "ttl": int(seconds) if seconds.is_integer() else seconds}


def ttl_of(metadata: Mapping[str, Any]) -> float | None:
    """The thread's time-to-live in seconds from its head's tags, or ``None`` (a malformed one counts as none)."""
    tags = metadata.get("tags") if isinstance(metadata, Mapping) else None
    ttl = tags.get("ttl") if isinstance(tags, Mapping) else None
    if isinstance(ttl, Mapping):  # LangGraph's shape: {"strategy": "delete", "ttl": minutes}
        if ttl.get("strategy", "delete") != "delete" or not isinstance(ttl.get("ttl"), int | float):
            return None
        ttl = ttl["ttl"] * 60
    if ttl is None:
        return None
    try:
        return parse_duration(ttl, what="ttl")
    except InvalidUpdateError:
        return None


@dataclasses.dataclass
class PruneReport:
    """What a prune removed (or, with ``dry_run``, would remove)."""

    threads: list[str]
    """The threads selected (not their subgraphs' child threads), in the order they were removed."""
    checkpoints: int
    """Checkpoints stored under them and their child threads."""
    bytes: int
    """Bytes of their rows (:meth:`Saver.storage_usage`); measured after the delete as the drop of the store's total
    row bytes (rows a surviving fork needs stay, so it can be less than the dry run's figure)."""
    dry_run: bool
    keep_last: int | None = None
    """With ``keep_last``: the threads were trimmed to their last checkpoints, not removed (``threads`` names those
    that lost any, ``checkpoints`` counts the checkpoints that went)."""

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _selected(
    record: ThreadRecord,
    now: float,
    older_than: float | None,
    statuses: frozenset[str] | None,
    thread_ids: frozenset[str] | None,
    expired: bool,
) -> bool:
    if SEPARATOR in record.thread_id and link_of(record.metadata):
        return False  # a subgraph's child thread goes with its parent
    status = record.status  # as the saver reports it: ``crashed`` for a running thread whose lease expired
    if status == "running" and record.lease is not None:
        return False  # a live run
    if thread_ids is not None and record.thread_id not in thread_ids:
        return False
    if statuses is not None and status not in statuses:
        return False
    if older_than is not None and record.updated_at > now - older_than:
        return False
    if expired:
        ttl = ttl_of(record.metadata)
        if ttl is None or record.updated_at > now - ttl:
            return False
    return True


async def prune(
    saver: Saver,
    *,
    older_than: Any = None,
    status: Iterable[Status] | None = None,
    thread_ids: Iterable[str] | None = None,
    expired: bool = False,
    keep_last: int | None = None,
    dry_run: bool = False,
    measure: bool = True,
) -> PruneReport:
    """Remove the threads matching every policy given (at least one): last activity older than ``older_than``
    (seconds or a duration), a status in ``status``, an id in ``thread_ids``, a TTL that ran out (``expired``).
    With ``keep_last`` (alone, or with the others to choose the threads) the threads are not removed but keep
    their last ``keep_last`` checkpoints (see :mod:`graphckpt.keep_last`).
    ``measure=False`` skips the two :meth:`~Saver.storage_usage` reads (the report's counts are then 0)."""
    if keep_last is not None and (isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1):
        raise InvalidUpdateError(f"keep_last must be a number of checkpoints (1 or more), not {keep_last!r}")
    if older_than is None and status is None and thread_ids is None and not expired and keep_last is None:
        raise InvalidUpdateError("prune needs a policy: older_than, status, thread_ids, expired or keep_last")
    age = None if older_than is None else parse_duration(older_than, what="older_than")
    statuses = None if status is None else frozenset(status)
    wanted = None if thread_ids is None else frozenset(thread_ids)
    now = ids.now()
    chosen = [r for r in await saver.list_threads() if _selected(r, now, age, statuses, wanted, expired)]
    measure = measure and bool(chosen)
    before = await saver.storage_usage(top=1 << 30) if measure else None
    if keep_last is not None:
        return await _keep_last(saver, chosen, keep_last, dry_run, before)
    sizes = {t.thread_id: t for t in before.threads} if before is not None else {}
    removed: list[str] = []
    checkpoints = planned = 0
    for record in chosen:
        family = [c.thread_id for c in await subgraph_threads(saver, [record.thread_id])] + [record.thread_id]
        gone = dry_run
        for tid in family if not dry_run else ():
            try:
                await saver.delete_thread(tid)
                gone = gone or tid == record.thread_id
            except ThreadNotFoundError:  # another sweeper was first
                pass
        if gone:
            removed.append(record.thread_id)
            checkpoints += sum(sizes[t].checkpoints for t in family if t in sizes)
            planned += sum(sizes[t].bytes for t in family if t in sizes)
    if dry_run or not removed or before is None:
        return PruneReport(removed, checkpoints, planned, dry_run)
    after = await saver.storage_usage(top=1 << 30)
    freed = sum(t.bytes for t in before.threads) - sum(t.bytes for t in after.threads)
    return PruneReport(removed, checkpoints, freed, dry_run)


async def _keep_last(
    saver: Saver, chosen: list[ThreadRecord], keep: int, dry_run: bool, before: StorageUsage | None
) -> PruneReport:
    trimmed: list[str] = []
    checkpoints = planned = 0
    forks: dict[str, list[ThreadRecord]] = {}
    for r in await saver.list_threads():
        if r.parent_thread_id is not None and r.parent_thread_id != r.thread_id:
            forks.setdefault(r.parent_thread_id, []).append(r)
    for record in chosen:
        trim = await trim_thread(saver, record, keep, forks.get(record.thread_id, []), dry_run=dry_run)
        if trim.checkpoints:
            trimmed.append(record.thread_id)
            checkpoints += trim.checkpoints
            planned += trim.bytes
    if dry_run or not trimmed or before is None:
        return PruneReport(trimmed, checkpoints, planned, dry_run, keep)
    after = await saver.storage_usage(top=1 << 30)
    freed = sum(t.bytes for t in before.threads) - sum(t.bytes for t in after.threads)
    return PruneReport(trimmed, checkpoints, freed, dry_run, keep)


async def sweep_expired(saver: Saver) -> PruneReport | None:
    """One TTL sweep: remove the threads whose TTL ran out, unless another process is sweeping this store (then
    ``None``; see :meth:`~graphckpt.savers.base.Saver.sweep_lock`)."""
    async with saver.sweep_lock("ttl") as mine:
        if not mine:
            return None
        report = await prune(saver, expired=True, measure=False)
    if report.threads:
        logger.info("ttl sweep removed %d expired thread(s)", len(report.threads))
    return report
