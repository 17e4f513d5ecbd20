"""What a queued run carries to its worker, on every saver: ``submit(recursion_limit=, metadata=)`` travel in the
run's payload envelope (:data:`graphckpt.runs.ENVELOPE`); the worker applies the recursion limit (a run past it ends
``failed`` with the engine's ``RecursionLimitError``); anyone reads the options back from the row
(:func:`graphckpt.runs.submitted`); a payload written before the options existed reads as none of them; bad options
are refused at submit, naming the argument, with nothing queued."""

from __future__ import annotations

import asyncio
from typing import Any, TypedDict

import pytest
from support.waiting import await_for

from graphckpt import END, START, StateGraph, Worker, runs
from graphckpt.records import NO_ANSWER
from graphckpt.savers.base import Saver
from graphckpt.savers.queue import RunRecord

GRAPH = "tests:count"


class S(TypedDict):
    n: int


def _app(saver: Saver, steps: int = 6) -> Any:
    def count(state: S) -> dict[str, Any]:
        return {"n": state["n"] + 1}

    g = StateGraph(S)
    g.add_node("count", count)
    g.add_edge(START, "count")
    g.add_conditional_edges("count", lambda s: "count" if s["n"] < steps else END)
    app = g.compile(saver=saver)
    app.graph_ref = GRAPH
    return app


async def _ended(saver: Any, run_id: str, within: float = 20.0) -> RunRecord:
    """The run once it has ended (polled every 20 ms, at most ``within`` seconds)."""

    async def ended() -> RunRecord | None:
        run: RunRecord = await saver.get_run(run_id)
        return run if run.status not in ("queued", "running") else None

    run: RunRecord = await await_for(ended, within, what=f"run {run_id} to end")
    return run


async def test_a_worker_applies_the_recursion_limit_a_run_was_submitted_with(saver: Saver) -> None:
    app = _app(saver)
    worker = Worker({GRAPH: app}, poll=0.05)
    loop = asyncio.ensure_future(worker.run())
    try:
        limited = await app.asubmit({"n": 0}, thread_id="limited", recursion_limit=3, metadata={"who": "ann"})
        free = await app.asubmit({"n": 0}, thread_id="free")
        run = await _ended(saver, limited.run_id)
        assert run.status == "failed"
        assert run.error is not None and run.error.startswith("RecursionLimitError: ")
        assert "recursion_limit=3" in run.error
        assert (await app.athread("limited")).step < 6  # stopped by the limit, not by the graph's end
        assert (await _ended(saver, free.run_id)).status == "done"  # the app's limit (25) is plenty for 6 steps
        assert (await app.aget_state("free")).values == {"n": 6}
    finally:
        worker.stop()
        await loop
    found = runs.submitted(app.codec.serde, run)
    assert (found.recursion_limit, found.metadata, found.multitask) == (3, {"who": "ann"}, "reject")
    assert found.value == {"n": 0} and found.tags is None and found.start is None


async def test_submit_refuses_bad_options_naming_them_and_queues_nothing(saver: Saver) -> None:
    app = _app(saver)
    bad: list[tuple[dict[str, Any], str]] = [
        ({"recursion_limit": 0}, "recursion_limit must be a positive number"),
        ({"recursion_limit": True}, "recursion_limit must be a positive number"),
        ({"recursion_limit": "3"}, "recursion_limit must be a positive number"),
        ({"metadata": ["a"]}, "metadata must be a mapping"),
        ({"metadata": {1: "a"}}, "metadata must be a mapping with string keys"),
    ]
    for options, message in bad:
        with pytest.raises(ValueError, match=message):
            await app.asubmit({"n": 0}, thread_id="t", **options)
    assert await app.aruns() == []
    with pytest.raises(ValueError, match="start must be an event cursor"):
        parts = (runs.queue_of(app.saver), app.graph, app.codec.serde)
        await runs.submit(*parts, {"n": 0}, graph=GRAPH, thread_id="t", start=(1, "x"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stream_mode must be a list of stream mode names"):
        await runs.submit(*parts, {"n": 0}, graph=GRAPH, thread_id="t", stream_mode="values")


async def test_the_options_read_back_and_an_old_payload_means_none(saver: Saver) -> None:
    app = _app(saver)
    parts, serde = (runs.queue_of(app.saver), app.graph, app.codec.serde), app.codec.serde
    run = await runs.submit(
        *parts,
        graph=GRAPH,
        thread_id="t",
        resume=True,
        answer="yes",
        multitask="enqueue",
        tags={"via": "ui"},
        recursion_limit=7,
        metadata={"k": [1, 2]},
        start=(4, -1),
        stream_mode=("values", "messages-tuple"),
    )
    stored = await saver.get_run(run.run_id)  # type: ignore[attr-defined]
    modes = ("values", "messages-tuple")
    assert runs.submitted(serde, stored) == runs.Submitted(
        "yes", {"via": "ui"}, 7, {"k": [1, 2]}, "enqueue", (4, -1), modes
    )
    assert runs.unpack(serde, stored) == ("yes", {"via": "ui"})
    resume = await runs.submit(*parts, graph=GRAPH, thread_id="t2", resume=True, multitask="enqueue")
    assert runs.submitted(serde, resume).value is NO_ANSWER
    old_envelope = RunRecord(
        "r", "t", "input", "queued", GRAPH, serde.dumps({runs.ENVELOPE: 1, "tags": {"a": 1}, "value": {"n": 1}})
    )
    assert runs.submitted(serde, old_envelope) == runs.Submitted({"n": 1}, {"a": 1})
    bare = RunRecord("r", "t", "input", "queued", GRAPH, serde.dumps({"n": 2}))
    assert runs.submitted(serde, bare) == runs.Submitted({"n": 2})
    assert runs.submitted(serde, RunRecord("r", "t", "resume", "queued", GRAPH, None)) == runs.Submitted()
    wrong = RunRecord(
        "r",
        "t",
        "input",
        "queued",
        GRAPH,
        serde.dumps({runs.ENVELOPE: 1, "recursion_limit": -1, "start": "x", "multitask": "all"}),
    )
    assert runs.submitted(serde, wrong) == runs.Submitted()  # keys of the wrong type read as absent


def test_the_sync_submit_takes_the_options(unopened_saver: Saver) -> None:
    app = _app(unopened_saver)
    try:
        run = app.submit({"n": 0}, thread_id="s", recursion_limit=2, metadata={"a": 1})
        found = runs.submitted(app.codec.serde, run)
        assert (found.recursion_limit, found.metadata) == (2, {"a": 1})
    finally:
        app.close()
