"""The end of a store-error retry: a worker re-queues a run that failed on the store, and after ``store_attempts``
attempts that made no progress it ends the run and its thread ``failed``, naming the cause, instead of stranding them.
The store error is real: the graph's first node terminates the PostgreSQL connections of the saver (by their
``application_name``), so the step's commit fails on its dropped connection."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from support import store_fault_graph
from support.postgres import PG_DSN
from support.waiting import await_for

from graphckpt import Worker
from graphckpt.savers.postgres import PostgresSaver

GRAPH = "support.store_fault_graph:graph"


@pytest.mark.parametrize("attempts", [1, 2])
async def test_a_run_failing_on_the_store_ends_failed_at_the_cap_or_succeeds_on_a_later_attempt(
    tmp_path: Path, pg_schema: str, monkeypatch: pytest.MonkeyPatch, attempts: int
) -> None:
    name = f"gc-cap-{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("STORE_FAULT_FLAG", str(tmp_path / "terminated-once"))
    monkeypatch.setenv("STORE_FAULT_PG_APP", name)
    monkeypatch.setenv("STORE_FAULT_PG_DSN", PG_DSN)
    saver = PostgresSaver(f"{PG_DSN}?application_name={name}", schema=pg_schema)
    app = store_fault_graph.graph.compile(saver=saver)
    watch = PostgresSaver(PG_DSN, schema=pg_schema)
    worker = Worker({GRAPH: app}, poll=0.05, store_attempts=attempts, store_backoff=0)
    loop = asyncio.ensure_future(worker.run())
    try:
        run = await app.asubmit({}, thread_id="capped", graph=GRAPH)

        async def ended() -> bool:  # read by another saver: its connections are not the ones terminated
            found = await watch.get_run(run.run_id)
            return found is not None and found.status in ("done", "failed")

        await await_for(ended, 30, what="the run's end")
        found = await watch.get_run(run.run_id)
        info = await watch.get_thread("capped")
        reader = store_fault_graph.graph.compile(saver=watch)  # not app: its pool may hold a terminated connection
        values = (await reader.aget_state("capped")).values if attempts == 2 else None
    finally:
        worker.stop()
        await loop
        await app.aclose()
        await watch.aclose()
    assert found is not None
    if attempts == 1:  # the only attempt failed on the store: the run and the thread end failed, naming it
        assert found.status == "failed", found
        assert found.error is not None and found.error.startswith("store error on 1 attempt: "), found.error
        assert (
            info is not None
            and info.status == "failed"
            and info.error is not None
            and "store error on 1 attempt" in info.error
        )
    else:  # the second attempt claims the thread at once and finishes it
        assert info is not None and (found.status, found.attempt, info.status) == ("done", 2, "done"), found
        assert values is not None and values.done == ["lock", "count after 1"]
