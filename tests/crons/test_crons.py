"""Schedules on every saver: a per-second cron fired by 3 workers for a measured window queues one run per tick,
none lost, none doubled; missed ticks after downtime follow the stated policy (``once``: the newest missed tick runs
once, ``skip``: none) with the counts visible; an end date stops it; bad expressions and zones are named."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from support.tick_graph import tick_graph
from support.waiting import await_for

from graphckpt import Worker, ids
from graphckpt.crons import CronError, add_cron, fire_due
from graphckpt.savers.crons import CronRow

GRAPH = "tests:cron"


async def test_a_per_second_cron_fired_by_three_workers_runs_each_tick_once(saver: Any) -> None:
    app = tick_graph().compile(saver=saver)
    cron = await add_cron(app, "* * * * * *", graph=GRAPH, input={"n": 10}, metadata={"job": "tick"})
    workers = [Worker({GRAPH: tick_graph().compile(saver=saver)}, poll=0.05) for _ in range(3)]
    loops = [asyncio.ensure_future(w.run()) for w in workers]
    started = ids.now()
    try:
        await asyncio.sleep(0)  # the window below is measured by the cron's own counters

        async def ran_enough() -> bool:
            row = await saver.get_cron(cron.cron_id)
            return row is not None and row.runs >= 5

        await await_for(ran_enough, 30, what="five ticks")
        await saver.delete_cron(cron.cron_id)  # stop the schedule, then let the queued runs finish

        async def all_done() -> bool:
            runs = [r for r in await saver.list_runs() if r.thread_id.startswith(cron.cron_id)]
            return bool(runs) and all(r.status == "done" for r in runs)

        await await_for(all_done, 30, what="the ticks' runs")
    finally:
        for w in workers:
            w.stop()
        await asyncio.gather(*loops)
    runs = [r for r in await saver.list_runs() if r.thread_id.startswith(cron.cron_id)]
    ticks = sorted(int(r.thread_id.rsplit("-", 1)[1]) for r in runs)
    assert len(ticks) == len(set(ticks)), ticks  # none doubled
    assert ticks == list(range(ticks[0], ticks[-1] + 1)), ticks  # none lost: consecutive seconds
    assert ticks[0] >= int(started) and len(ticks) >= 5
    state = await app.aget_state(runs[0].thread_id)
    assert state.values.n == 11 and state.status == "done"


async def _row(saver: Any, **changes: Any) -> CronRow:
    app = tick_graph().compile(saver=saver)
    cron = await add_cron(app, "* * * * *", graph=GRAPH, missed=changes.pop("missed", "once"))
    row = CronRow(**{**{f: getattr(cron, f) for f in CronRow.__dataclass_fields__}, **changes})
    await saver.put_cron(row)
    return row


async def test_missed_ticks_follow_the_policy_and_are_counted(saver: Any) -> None:
    now = float(int(ids.now()) // 60 * 60) + 30.0  # half past a minute: ticks at whole minutes
    once = await _row(saver, next_run_at=now - 30 - 300)  # 6 ticks due: 5 missed (older than 60 s), 1 recent
    skip = await _row(saver, next_run_at=now - 30 - 300, missed="skip")
    await fire_due(saver, now)
    got_once = await saver.get_cron(once.cron_id)
    got_skip = await saver.get_cron(skip.cron_id)
    assert (got_once.runs, got_once.skipped, got_once.next_run_at) == (2, 4, now + 30)  # newest missed + the recent
    assert (got_skip.runs, got_skip.skipped, got_skip.next_run_at) == (1, 5, now + 30)
    assert got_once.last_run_at == now - 30
    queued = [r.thread_id for r in await saver.list_runs() if r.thread_id.startswith(once.cron_id)]
    assert sorted(queued) == [f"{once.cron_id}-{int(now - 90)}", f"{once.cron_id}-{int(now - 30)}"]
    assert await fire_due(saver, now) == 0  # nothing is due again
    again = await saver.get_cron(once.cron_id)
    assert again.runs == 2


async def test_a_firing_that_lost_the_compare_and_set_queues_nothing(saver: Any) -> None:
    row = await _row(saver, next_run_at=ids.now() - 1)
    assert await saver.fire_cron(
        row.cron_id,
        expected_next=row.next_run_at,
        next_run_at=row.next_run_at + 60,
        last_run_at=None,
        runs=[],
        skipped=0,
    )
    assert not await saver.fire_cron(
        row.cron_id,
        expected_next=row.next_run_at,
        next_run_at=row.next_run_at + 120,
        last_run_at=None,
        runs=[],
        skipped=0,
    )
    assert (await saver.get_cron(row.cron_id)).next_run_at == row.next_run_at + 60


async def test_an_end_date_stops_the_cron_and_bad_input_is_named(saver: Any) -> None:
    app = tick_graph().compile(saver=saver)
    now = ids.now()
    ended = await add_cron(app, "* * * * * *", graph=GRAPH, end_at=now + 1.5, thread_id="one-thread")
    await fire_due(saver, now + 5)
    row = await saver.get_cron(ended.cron_id)
    assert row.next_run_at is None and 1 <= row.runs <= 2
    assert {r.thread_id for r in await saver.list_runs() if r.graph == GRAPH and r.thread_id == "one-thread"}
    assert json.loads(row.metadata) == {"cron_id": ended.cron_id}
    with pytest.raises(CronError, match="not a cron expression"):
        await add_cron(app, "every day", graph=GRAPH)
    with pytest.raises(CronError, match="time zone"):
        await add_cron(app, "* * * * *", graph=GRAPH, timezone="Mars/Olympus")
    with pytest.raises(CronError, match="missed"):
        await add_cron(app, "* * * * *", graph=GRAPH, missed="all")  # type: ignore[arg-type]
