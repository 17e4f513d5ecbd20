"""What one request that starts a run reads: the thread once, and its input checked once, before the run is queued.

The server is built in process over a saver that counts its thread reads (``get_thread`` and
``get_thread_and_checkpoint``) and notes the count when a run is queued (``enqueue_run``); the graph counts its
input checks. Each run-starting route is asked once, on a thread that has finished a run (the common case: a new
turn), on a thread created by ``POST /threads`` and not run yet, and on an id nobody created.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel
from starlette.testclient import TestClient

from graphckpt import END, START, StateGraph
from graphckpt.compiled import CompiledGraph
from graphckpt.savers.base import StoredCheckpoint, ThreadRecord
from graphckpt.savers.memory import MemorySaver
from graphckpt.savers.queue import RunRecord
from graphckpt.server import create_app


class S(BaseModel):
    n: int = 0


class CountingSaver(MemorySaver):
    """A memory saver that counts thread reads and keeps the count each queued run found."""

    def __init__(self, checks: list[Any]) -> None:
        super().__init__()
        self.checks = checks
        self.reads = 0
        self.when_queued: list[tuple[int, int]] = []
        """(thread reads, input checks) so far, as each run was queued."""

    async def get_thread(self, thread_id: str) -> ThreadRecord | None:
        self.reads += 1
        return await super().get_thread(thread_id)

    async def get_thread_and_checkpoint(
        self, thread_id: str, checkpoint_id: str | None = None, *, step: int | None = None
    ) -> tuple[ThreadRecord | None, StoredCheckpoint | None]:
        self.reads += 1
        return await super().get_thread_and_checkpoint(thread_id, checkpoint_id, step=step)

    async def enqueue_run(self, run: RunRecord, *, reject_busy: bool) -> None:
        self.when_queued.append((self.reads, len(self.checks)))
        await super().enqueue_run(run, reject_busy=reject_busy)


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every input check of a compiled graph, in order."""
    seen: list[Any] = []
    original = CompiledGraph.validate_input

    def counted(self: CompiledGraph, input: Any) -> dict[str, Any]:
        seen.append(input)
        return original(self, input)

    monkeypatch.setattr(CompiledGraph, "validate_input", counted)
    return seen


@pytest.fixture
def served(checks: list[Any]) -> Iterator[tuple[TestClient, CountingSaver]]:
    saver = CountingSaver(checks)
    graph = StateGraph(S).add_node("inc", lambda s: {"n": s.n + 1}).add_edge(START, "inc").add_edge("inc", END)
    with TestClient(create_app({"g": graph.compile(saver)}, saver, ui=False), base_url="http://localhost") as client:
        yield client, saver


def _ask(client: TestClient, route: str, thread_id: str) -> None:
    body = {"input": {"n": 1}, "assistant_id": "g"}
    if route == "stream":
        with client.stream("POST", f"/threads/{thread_id}/runs/stream", json=body) as response:
            assert response.status_code == 200
            assert "event: end" in "".join(response.iter_text())
        return
    response = client.post(f"/threads/{thread_id}/runs" + ("/wait" if route == "wait" else ""), json=body)
    assert response.status_code == 200, response.text
    if route == "create":
        client.get(f"/threads/{thread_id}/runs/{response.json()['run_id']}/join")


def _count(saver: CountingSaver) -> None:
    saver.reads, saver.when_queued[:] = 0, []
    saver.checks.clear()


@pytest.mark.parametrize("route", ["stream", "wait", "create"])
def test_a_new_turn_reads_its_thread_once_and_checks_its_input_once_before_it_is_queued(
    served: tuple[TestClient, CountingSaver], route: str
) -> None:
    client, saver = served
    _ask(client, "wait", "t1")  # the thread has finished a run
    _count(saver)
    _ask(client, route, "t1")
    assert saver.when_queued == [(1, 1)]


@pytest.mark.parametrize("route", ["stream", "wait", "create"])
def test_a_first_run_of_a_created_or_unknown_thread_reads_it_once_before_it_is_queued(
    served: tuple[TestClient, CountingSaver], route: str
) -> None:
    client, saver = served
    assert client.post("/threads", json={"thread_id": "made", "metadata": {"who": "me"}}).status_code == 200
    for thread_id in ("made", "nobody-made-it"):
        _count(saver)
        _ask(client, route, thread_id)
        assert saver.when_queued == [(1, 1)], thread_id
    made = client.get("/threads/made").json()
    assert made["metadata"] == {"who": "me"} and made["values"] == {"n": 2}
