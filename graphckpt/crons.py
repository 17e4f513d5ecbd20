"""Schedules: run a graph (a new thread per tick) or a thread (a new turn per tick) on a cron expression, fired by
workers exactly once per tick (see :mod:`graphckpt.savers.crons`).

A cron expression is parsed by ``cronsim`` (the optional extra ``cron``: ``pip install 'graphckpt[cron]'``): five
fields, or six with seconds last (``* * * * * *``: every second), in the cron's time zone (an IANA name, default
``UTC``), so daylight-saving changes follow the zone's wall clock. Each worker's sweep (every second) calls
:func:`fire_due`: it computes the cron's due ticks from its ``next_run_at``, and one compare-and-set on
``next_run_at`` queues their runs; a concurrent firing of the same cron loses the compare-and-set and queues nothing.

**Missed ticks.** A tick is *missed* when it is more than :data:`MISSED_GRACE` seconds in the past when a worker
fires it (every worker was down, or stalled). Ticks within the grace all run, one run each, late. Missed ticks follow
the cron's ``missed`` policy: ``"once"`` (the default) runs the newest missed tick once and counts the others as
skipped; ``"skip"`` runs none of them and counts them all. The counts are in the cron's record (``runs``,
``skipped``, ``last_run_at``), shown by ``list_crons``. A cron past its ``end_at`` has ``next_run_at=None`` and
never fires again.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from graphckpt import ids
from graphckpt.errors import GraphckptError
from graphckpt.savers.crons import CronRow, CronTable, Missed
from graphckpt.savers.queue import RunRecord

__all__ = ["MISSED_GRACE", "CronError", "add_cron", "fire_due", "next_tick", "update_cron"]

MISSED_GRACE = 60.0
"""Seconds after its time within which a tick still runs (late); older ticks are missed (see the module docstring)."""
MAX_TICKS = 100_000
"""The most due ticks one firing walks (a per-second cron after a day down: 86,400); beyond, the cron restarts from
now and the rest count as skipped."""


class CronError(GraphckptError, ValueError):
    """A cron that cannot be stored: its expression, time zone, end or policy, named."""


def _zone(timezone: str) -> dt.tzinfo:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise CronError(f"timezone {timezone!r} is not a known IANA time zone") from None


def next_tick(schedule: str, timezone: str, after: float) -> float:
    """The first tick of ``schedule`` in ``timezone`` strictly after ``after`` (seconds since the epoch)."""
    try:
        from cronsim import CronSim, CronSimError
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise CronError(f"crons need the cron extra: pip install 'graphckpt[cron]' ({exc})") from exc
    start = dt.datetime.fromtimestamp(after, _zone(timezone))
    try:
        return float(next(iter(CronSim(schedule, start))).timestamp())
    except CronSimError as exc:
        raise CronError(f"schedule {schedule!r} is not a cron expression: {exc}") from None
    except StopIteration:
        raise CronError(f"schedule {schedule!r} never fires") from None


async def add_cron(
    app: Any,
    schedule: str,
    *,
    graph: str,
    input: Any = None,
    thread_id: str | None = None,
    timezone: str = "UTC",
    metadata: Mapping[str, Any] | None = None,
    end_at: dt.datetime | float | None = None,
    missed: Missed = "once",
    cron_id: str | None = None,
) -> CronRow:
    """Store a cron of ``app``'s graph (``graph`` is its ``module:attr`` reference, what workers run): each tick
    queues a run with ``input`` on a new thread (``thread_id=None``) or as a new turn of ``thread_id``, with
    ``metadata`` (and ``cron_id``) as the run's metadata, until ``end_at``."""
    if missed not in ("once", "skip"):
        raise CronError(f"missed must be 'once' or 'skip', not {missed!r}")
    if not isinstance(graph, str) or ":" not in graph:
        raise CronError(f"graph must be a 'module:attr' reference, not {graph!r}")
    end = end_at.timestamp() if isinstance(end_at, dt.datetime) else end_at
    now = ids.now()
    first = next_tick(schedule, timezone, now)  # checks the expression and the zone
    saver = app.saver
    if not isinstance(saver, CronTable):
        raise CronError(f"{type(saver).__name__} has no schedules")
    cron_id = cron_id or ids.new_id()
    meta = {**(metadata or {}), "cron_id": cron_id}
    envelope = {"__graphckpt_run__": 1, "multitask": "enqueue", "metadata": meta}
    envelope["value"] = dict(app.graph.validate_input(input if input is not None else {}))
    row = CronRow(
        cron_id,
        schedule,
        timezone,
        graph,
        thread_id,
        app.store.codec.serde.dumps(envelope),
        json.dumps(meta),
        end,
        missed,
        first if end is None or first <= end else None,
        now,
    )
    await saver.put_cron(row)
    return row


async def fire_due(saver: CronTable, now: float) -> int:
    """Queue the runs of every due tick (see the module docstring); how many runs were queued."""
    queued = 0
    for cron in await saver.due_crons(now):
        assert cron.next_run_at is not None
        ticks: list[float] = []
        tick = cron.next_run_at
        while tick <= now and (cron.end_at is None or tick <= cron.end_at) and len(ticks) < MAX_TICKS:
            ticks.append(tick)
            tick = next_tick(cron.schedule, cron.timezone, tick)
        extra = 0
        if len(ticks) >= MAX_TICKS:
            tick = next_tick(cron.schedule, cron.timezone, now)
            extra = 1  # at least one more was skipped
        recent = [t for t in ticks if t >= now - MISSED_GRACE]
        missed = [t for t in ticks if t < now - MISSED_GRACE]
        run_ticks = ([missed[-1]] if missed and cron.missed == "once" else []) + recent
        skipped = len(missed) - (1 if missed and cron.missed == "once" else 0) + extra
        runs = [
            RunRecord(
                ids.new_id(),
                cron.thread_id or f"{cron.cron_id}-{int(t)}",
                "input",
                "queued",
                cron.graph,
                cron.payload,
                created_at=now,
            )
            for t in run_ticks
        ]
        following = tick if cron.end_at is None or tick <= cron.end_at else None
        last = run_ticks[-1] if run_ticks else None
        fired = await saver.fire_cron(
            cron.cron_id,
            expected_next=cron.next_run_at,
            next_run_at=following,
            last_run_at=last,
            runs=runs,
            skipped=skipped,
        )
        queued += len(runs) if fired else 0
    return queued


_KEEP: Any = object()


async def update_cron(
    app: Any,
    cron_id: str,
    *,
    schedule: str | None = None,
    timezone: str | None = None,
    end_at: dt.datetime | float | None = _KEEP,
    input: Any = _KEEP,
    metadata: Mapping[str, Any] | None = None,
    enabled: bool | None = None,
) -> CronRow:
    """Change a cron: a new schedule or zone restarts its ticks from now; ``enabled=False`` stops it
    (``next_run_at=None``), ``True`` starts it again from now; ``None`` keeps what it was."""
    saver = app.saver
    row = await saver.get_cron(cron_id)
    if row is None:
        raise CronError(f"no cron {cron_id!r}")
    schedule = row.schedule if schedule is None else schedule
    timezone = row.timezone if timezone is None else timezone
    end = row.end_at if end_at is _KEEP else end_at.timestamp() if isinstance(end_at, dt.datetime) else end_at
    now = ids.now()
    following = next_tick(schedule, timezone, now)
    restart = schedule != row.schedule or timezone != row.timezone or enabled is True or end != row.end_at
    running = row.next_run_at is not None if enabled is None else enabled
    next_at = (following if restart else row.next_run_at) if running else None
    if next_at is not None and end is not None and next_at > end:
        next_at = None
    payload, meta = row.payload, json.loads(row.metadata)
    if metadata is not None or input is not _KEEP:
        old = app.store.codec.serde.loads(row.payload) if row.payload is not None else {}
        meta = {**meta, **(metadata or {}), "cron_id": cron_id}
        envelope = {**old, "metadata": meta}
        if input is not _KEEP:
            envelope["value"] = dict(app.graph.validate_input(input if input is not None else {}))
        payload = app.store.codec.serde.dumps(envelope)
    new = CronRow(
        cron_id, schedule, timezone, row.graph, row.thread_id, payload, json.dumps(meta), end, row.missed, next_at,
        row.created_at, row.last_run_at, row.runs, row.skipped,
    )  # fmt: skip
    await saver.put_cron(new)
    return new
