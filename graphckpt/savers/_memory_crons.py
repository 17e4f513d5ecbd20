"""MemorySaver's schedules: the reference of :mod:`graphckpt.savers.crons`' rules, in one dictionary."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from graphckpt.savers.crons import CronRow, CronTable
from graphckpt.savers.queue import RunRecord


class MemoryCrons(CronTable):
    """Mixed into :class:`~graphckpt.savers.memory.MemorySaver` (whose runs it writes)."""

    if TYPE_CHECKING:

        @property
        def _runs(self) -> dict[str, RunRecord]: ...

    @property
    def _crons(self) -> dict[str, CronRow]:
        crons: dict[str, CronRow] | None = self.__dict__.get("_cron_rows")
        if crons is None:
            crons = self.__dict__["_cron_rows"] = {}
        return crons

    async def put_cron(self, row: CronRow) -> None:
        self._crons[row.cron_id] = row

    async def get_cron(self, cron_id: str) -> CronRow | None:
        return self._crons.get(cron_id)

    async def list_crons(self) -> list[CronRow]:
        return sorted(self._crons.values(), key=lambda c: (c.created_at, c.cron_id))

    async def delete_cron(self, cron_id: str) -> bool:
        return self._crons.pop(cron_id, None) is not None

    async def due_crons(self, now: float) -> list[CronRow]:
        return [c for c in await self.list_crons() if c.next_run_at is not None and c.next_run_at <= now]

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
        row = self._crons.get(cron_id)
        if row is None or row.next_run_at != expected_next:
            return False
        last = last_run_at if last_run_at is not None else row.last_run_at
        self._crons[cron_id] = dataclasses.replace(
            row, next_run_at=next_run_at, last_run_at=last, runs=row.runs + len(runs), skipped=row.skipped + skipped
        )
        for run in runs:
            self._runs[run.run_id] = run
        return True
