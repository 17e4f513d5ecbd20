"""langgraph-sdk (the official Python client, async and sync) against a real ``graphckpt serve``: what a LangGraph
user hits first. Join streams with the sdk's defaults, time travel through ``checkpoint_id`` (the thread continues
from the past checkpoint, the old branch stays in its history), ``config.recursion_limit``, ``__interrupt__`` in the
``updates``/``values`` streams, the flat ``checkpoint_id``/``parent_checkpoint_id`` of a state, and a field the
server cannot honour refused with a 422 naming it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from support.serving import Served

COUNTER = "support.server_graphs:counter"
GRAPHS = [COUNTER, "review=support.server_graphs:approval"]


def _at(history: list[dict[str, Any]], n: int) -> str:
    [found] = [h["checkpoint_id"] for h in history if h["values"]["n"] == n]
    return str(found)


def test_async_client_time_travel_join_stream_interrupts_and_refusals(serve: Callable[..., Served]) -> None:
    from langgraph_sdk import get_client

    server = serve(GRAPHS)

    async def main() -> None:
        client = get_client(url=server.url)
        tid = (await client.threads.create())["thread_id"]
        final = await client.runs.wait(tid, COUNTER, input={"limit": 5}, config={"recursion_limit": 50})
        assert final["n"] == 5
        state = await client.threads.get_state(tid)
        assert state["checkpoint_id"] == state["checkpoint"]["checkpoint_id"]
        assert state["parent_checkpoint_id"] == state["parent_checkpoint"]["checkpoint_id"] is not None
        history = await client.threads.get_history(tid, limit=20)
        at2 = _at(history, 2)
        # time travel: from n == 2 with a new limit; the thread's state is the new branch
        branched = await client.runs.wait(tid, COUNTER, input={"limit": 3}, checkpoint_id=at2)
        assert branched["n"] == 3 and branched["log"] == ["tick 1", "tick 2", "tick 3"]
        after = await client.threads.get_history(tid, limit=50)
        assert after[0]["values"]["n"] == 3
        assert 5 in [h["values"]["n"] for h in after]  # the old branch stays in the history
        [mark] = [h for h in after if h["metadata"].get("branched_from")]
        assert mark["metadata"]["branched_from"]["checkpoint_id"] == at2
        # time travel without input: the run continues from that checkpoint as it was
        again = await client.runs.wait(tid, COUNTER, checkpoint_id=_at(after, 1))
        assert again["n"] == 5 and again["limit"] == 5  # that checkpoint had limit 5
        # join_stream with the sdk's defaults (stream_mode="run_modes"); "0" replays everything
        parts = [p async for p in await client.threads.join_stream(tid, last_event_id="0")]
        assert parts[-1].event == "end"
        values = [p.data["n"] for p in parts if p.event == "values"]
        assert values[:6] == [0, 1, 2, 3, 4, 5] and values[-1] == 5
        assert any(p.event == "updates" and p.data == {"tick": {"n": 1, "log": ["tick 1"]}} for p in parts)
        lifecycle = [p.event async for p in await client.threads.join_stream(tid, stream_mode="lifecycle")]
        assert set(lifecycle) - {"end"} <= {"run.started", "run.done", "run.failed", "run.interrupted"}
        assert "run.done" in lifecycle
        # config.recursion_limit stops a run after that many steps
        limited = await client.threads.create()
        await client.runs.wait(limited["thread_id"], COUNTER, input={"limit": 10}, config={"recursion_limit": 2})
        assert (await client.threads.get_state(limited["thread_id"]))["values"]["n"] == 2
        # __interrupt__ where LangGraph's clients read it
        rid = (await client.threads.create())["thread_id"]
        chunks = [p async for p in client.runs.stream(rid, "review", input={}, stream_mode=["updates", "values"])]
        interrupts = [p for p in chunks if p.event in ("updates", "values") and "__interrupt__" in p.data]
        assert {p.event for p in interrupts} == {"updates", "values"}
        assert interrupts[0].data["__interrupt__"][0]["value"] == {"question": "approve 'a draft'?"}
        resumed = await client.runs.wait(rid, "review", command={"resume": "yes"})
        assert resumed["verdict"] == "yes"
        # a field the server cannot honour is a 422 naming it (a webhook: only to hosts serve --webhook-host allows)
        with pytest.raises(httpx.HTTPStatusError, match="webhook"):
            await client.runs.wait(tid, COUNTER, input={}, webhook="http://127.0.0.1:9/hook")
        with pytest.raises(httpx.HTTPStatusError, match="after_seconds"):
            await client.runs.create(tid, COUNTER, input={}, after_seconds=5)
        await client.aclose()

    asyncio.run(main())
    with httpx.Client(base_url=server.url, timeout=30) as c:
        refused = c.post("/threads/x/runs", json={"input": {}, "bogus": 1})
        assert refused.status_code == 422 and "body.bogus" in refused.json()["message"]


def test_sync_client_time_travel_and_join_stream(serve: Callable[..., Served]) -> None:
    from langgraph_sdk import get_sync_client

    server = serve(GRAPHS)
    client = get_sync_client(url=server.url)
    tid = client.threads.create()["thread_id"]
    assert client.runs.wait(tid, COUNTER, input={"limit": 4})["n"] == 4
    history = client.threads.get_history(tid, limit=20)
    branched = client.runs.wait(tid, COUNTER, input={"limit": 2}, checkpoint={"checkpoint_id": _at(history, 1)})
    assert branched["n"] == 2
    parts = list(client.threads.join_stream(tid, last_event_id="0"))
    assert [p.data["n"] for p in parts if p.event == "values"][-1] == 2 and parts[-1].event == "end"
    state = client.threads.get_state(tid)
    assert state["checkpoint_id"] and state["parent_checkpoint_id"]
    client.close()


def test_thread_update_state_copy_count_prune_async_and_sync(serve: Callable[..., Served]) -> None:
    from langgraph_sdk import get_client, get_sync_client

    server = serve(GRAPHS)

    async def main() -> None:
        client = get_client(url=server.url)
        tid = (await client.threads.create(metadata={"team": "a"}))["thread_id"]
        await client.runs.wait(tid, COUNTER, input={"limit": 4})
        # on the head: a new checkpoint of the same thread
        done = await client.threads.update_state(tid, {"limit": 6})
        assert set(done["checkpoint"]) >= {"thread_id", "checkpoint_id"} and done["checkpoint"]["thread_id"] == tid
        state = await client.threads.get_state(tid)
        assert state["checkpoint_id"] == done["checkpoint"]["checkpoint_id"] and state["values"]["limit"] == 6
        # as a node: its edges route again (tick runs next)
        await client.threads.update_state(tid, {"n": 4}, as_node="tick")
        assert (await client.threads.get_state(tid))["next"] == ["tick"]
        assert (await client.runs.wait(tid, COUNTER, command={}))["n"] == 6
        # on a past checkpoint: the thread branches there, the rest stays in its history
        history = await client.threads.get_history(tid, limit=50)
        at1 = _at(history, 1)
        branched = await client.threads.update_state(tid, {"limit": 2}, checkpoint_id=at1)
        state = await client.threads.get_state(tid)
        assert state["checkpoint_id"] == branched["checkpoint"]["checkpoint_id"]
        assert state["values"]["n"] == 1 and state["values"]["limit"] == 2 and state["next"] == ["tick"]
        assert (await client.runs.wait(tid, COUNTER, command={}))["n"] == 2
        # copy: a new thread with the same state; count and prune
        copy = await client.threads.copy(tid)
        assert copy["thread_id"] != tid and copy["metadata"] == {"team": "a"}
        assert (await client.threads.get_state(copy["thread_id"]))["values"]["n"] == 2
        assert await client.threads.count() == 2
        assert await client.threads.count(metadata={"team": "a"}) == 2
        assert await client.threads.count(metadata={"team": "b"}) == 0
        pruned = await client.threads.prune([copy["thread_id"], "no-such-thread"])
        assert pruned == {"pruned_count": 1}
        assert await client.threads.count() == 1
        await client.aclose()

    asyncio.run(main())
    sync = get_sync_client(url=server.url)
    tid = sync.threads.create()["thread_id"]
    sync.runs.wait(tid, COUNTER, input={"limit": 3})
    at1 = _at(sync.threads.get_history(tid, limit=20), 1)
    sync.threads.update_state(tid, {"limit": 1}, checkpoint_id=at1)
    assert sync.threads.get_state(tid)["values"] == {"n": 1, "limit": 1, "log": ["tick 1"], "last": ""}
    assert sync.threads.count() == 2
    copy = sync.threads.copy(tid)["thread_id"]
    assert copy != tid and sync.threads.count() == 3
    # a copy is a fork of the thread's head: deleting the thread alone is refused while the copy depends on it
    # (graphckpt's erasure rule, issue 26); pruned together, the copy first, both go
    assert sync.threads.prune([copy, tid])["pruned_count"] == 2
    sync.close()


def test_stateless_runs_batch_cancel_many_and_rollback(serve: Callable[..., Served]) -> None:
    from langgraph_sdk import get_client, get_sync_client
    from support.waiting import await_for

    server = serve(GRAPHS, env={"SERVE_TEST_DELAY": "0.05"})

    async def main() -> None:
        client = get_client(url=server.url)
        # a run without a thread: its temporary thread is deleted after it (on_completion="delete" by default)
        assert (await client.runs.wait(None, COUNTER, input={"limit": 2}))["n"] == 2
        kept = await client.runs.wait(None, COUNTER, input={"limit": 3}, on_completion="keep")
        assert kept["n"] == 3
        parts = [p async for p in client.runs.stream(None, COUNTER, input={"limit": 2}, stream_mode="values")]
        assert parts[0].event == "metadata" and [p.data["n"] for p in parts if p.event == "values"][-1] == 2

        async def only_kept() -> bool:
            return await client.threads.count() == 1

        await await_for(only_kept, 20, what="the temporary threads deleted")
        [thread] = await client.threads.search()
        assert (await client.threads.get_state(thread["thread_id"]))["values"]["n"] == 3
        background = await client.runs.create(None, COUNTER, input={"limit": 1}, on_completion="keep")
        assert background["status"] in ("pending", "running", "success")
        made = await client.runs.create_batch(
            [{"assistant_id": COUNTER, "input": {"limit": 1}}, {"assistant_id": COUNTER, "input": {"limit": 2}}]
        )
        assert len(made) == 2 and all(set(r) >= {"run_id", "thread_id", "status"} for r in made)
        # cancel_many on a thread's runs; rollback takes the thread back to before the run
        tid = (await client.threads.create())["thread_id"]
        await client.runs.wait(tid, COUNTER, input={"limit": 2})
        before = (await client.threads.get_state(tid))["checkpoint_id"]
        run = await client.runs.create(tid, COUNTER, input={"limit": 200})

        async def stepped() -> bool:
            return (await client.threads.get_state(tid))["values"]["n"] >= 4

        await await_for(stepped, 20, what="the run's steps")
        await client.runs.cancel_many(thread_id=tid, action="rollback")
        assert (await client.runs.get(tid, run["run_id"]))["status"] in ("cancelled", "interrupted")
        state = await client.threads.get_state(tid)
        assert state["values"]["n"] == 2 and state["metadata"]["branched_from"]["checkpoint_id"] == before
        # cancel one run with wait and action="rollback"
        run = await client.runs.create(tid, COUNTER, input={"limit": 200})
        await await_for(stepped, 20, what="the run's steps")
        await client.runs.cancel(tid, run["run_id"], wait=True, action="rollback")
        assert (await client.threads.get_state(tid))["values"]["n"] == 2
        await client.aclose()

    asyncio.run(main())
    sync = get_sync_client(url=server.url)
    assert sync.runs.wait(None, COUNTER, input={"limit": 1})["n"] == 1
    assert len(sync.runs.create_batch([{"assistant_id": COUNTER, "input": {"limit": 1}}])) == 1
    sync.runs.cancel_many(status="all")
    sync.close()
