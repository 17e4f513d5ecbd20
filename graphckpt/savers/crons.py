"""Schedules' part of the saver interface (DESIGN.md §7 "schedule"): ``crons`` rows in graphckpt's own schema.

A cron row holds its expression and time zone, what each tick runs (a graph: a new thread per tick; or a thread: a
new turn per tick), the engine-encoded input, its metadata, an optional end, the missed-ticks policy, and
``next_run_at``: the time of its next tick. :meth:`CronTable.fire_cron` is the firing's compare-and-set: in one
transaction it moves ``next_run_at`` from the value the firing read to the next one and queues the tick's runs, so
whichever and however many workers fire a cron, each tick's runs are queued once (a loser's update matches no row and
it queues nothing).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from graphckpt.savers.queue import RunRecord

__all__ = ["CronRow", "CronTable", "Missed"]

Missed = Literal["once", "skip"]


@dataclass(frozen=True, slots=True)
class CronRow:
    """A ``crons`` row."""

    cron_id: str
    schedule: str
    timezone: str
    graph: str
    thread_id: str | None
    """``None``: a new thread per tick; else a new turn of this thread per tick."""
    payload: bytes | None
    metadata: str
    """JSON text."""
    end_at: float | None
    missed: Missed
    next_run_at: float | None
    """``None``: ended (past ``end_at``)."""
    created_at: float
    last_run_at: float | None = None
    """The time of the last tick that queued a run."""
    runs: int = 0
    skipped: int = 0
    """Ticks missed (workers all down past them) that the policy did not run."""


class CronTable(abc.ABC):
    """Mixed into every saver (with its run queue)."""

    @abc.abstractmethod
    async def put_cron(self, row: CronRow) -> None:
        """Insert or replace the cron ``row.cron_id``."""

    @abc.abstractmethod
    async def get_cron(self, cron_id: str) -> CronRow | None: ...

    @abc.abstractmethod
    async def list_crons(self) -> list[CronRow]:
        """Every cron, by creation time."""

    @abc.abstractmethod
    async def delete_cron(self, cron_id: str) -> bool: ...

    @abc.abstractmethod
    async def due_crons(self, now: float) -> list[CronRow]:
        """The crons whose ``next_run_at`` is at or before ``now``."""

    @abc.abstractmethod
    async def fire_cron(
        self,
        cron_id: str,
        *,
        expected_next: float,
        next_run_at: float | None,
        last_run_at: float | None,
        runs: Sequence[RunRecord],
        skipped: int,
    ) -> bool:
        """The compare-and-set: when the cron's ``next_run_at`` still equals ``expected_next``, set it to
        ``next_run_at``, add ``len(runs)`` to its run count and ``skipped`` to its skipped count, set ``last_run_at``
        (when not ``None``) and queue ``runs``, in one transaction; else change nothing. Whether it fired."""
