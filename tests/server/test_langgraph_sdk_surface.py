"""Every public method of langgraph-sdk's client, async and sync, called against a real ``graphckpt serve`` (the
methods enumerated with ``inspect``, so a new sdk method shows up here as uncovered). Each answered call's result is
checked for LangGraph's shape; the methods the server does not answer yet are listed in :data:`NOT_YET`, and
``crons``/``store`` included, so the count answered is exact. The v3 thread stream (``threads.stream``) starts a
run with ``run.start`` and reads its ``output`` (its events: ``test_langgraph_sdk_thread_stream``).
Every call is bounded (client timeouts and ``asyncio.wait_for``): a stream that does not end fails the test instead
of hanging it."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import httpx
from support.serving import Served

COUNTER = "support.server_graphs:counter"
TIMEOUT = httpx.Timeout(30.0)
NOT_YET: set[str] = set()
"""Methods this server does not answer yet (each fails here; the test checks they still do, so this list is true)."""


def _methods(client: Any) -> list[str]:
    found = []
    for group in ("assistants", "threads", "runs", "crons", "store"):
        obj = getattr(client, group)
        for name, _ in inspect.getmembers(type(obj), inspect.isfunction):
            if not name.startswith("_"):
                found.append(f"{group}.{name}")
    return sorted(found)


def _is_thread(x: Any) -> bool:
    return isinstance(x, dict) and {"thread_id", "status", "metadata", "created_at"} <= set(x)


def _is_run(x: Any) -> bool:
    return isinstance(x, dict) and {"run_id", "thread_id", "status", "assistant_id"} <= set(x)


def _is_state(x: Any) -> bool:
    return isinstance(x, dict) and {"values", "next", "checkpoint", "metadata", "tasks", "checkpoint_id"} <= set(x)


def _is_assistant(x: Any) -> bool:
    return isinstance(x, dict) and {"assistant_id", "graph_id", "config", "metadata", "version"} <= set(x)


def _is_cron(x: Any) -> bool:
    return isinstance(x, dict) and {"cron_id", "schedule"} <= set(x)


def _calls(
    c: Any, tid: str, other: str, gone: str, run_id: str, cron_id: str, aid: str
) -> dict[str, tuple[Callable[[], Any], Callable[[Any], bool]]]:
    """name -> (the call, the check of its result); ``c`` is either client (sync calls return the value)."""
    streamed = "stream"  # a stream's parts are listed by the caller
    return {
        "assistants.get": (lambda: c.assistants.get(COUNTER), _is_assistant),
        "assistants.get_graph": (lambda: c.assistants.get_graph(COUNTER), lambda r: "nodes" in r),
        "assistants.get_schemas": (lambda: c.assistants.get_schemas(COUNTER), lambda r: "state_schema" in r),
        "assistants.get_subgraphs": (lambda: c.assistants.get_subgraphs(COUNTER), lambda r: isinstance(r, dict)),
        "assistants.search": (lambda: c.assistants.search(), lambda r: all(map(_is_assistant, r)) and r),
        "assistants.count": (lambda: c.assistants.count(), lambda r: isinstance(r, int) and r >= 2),
        "assistants.create": (lambda: c.assistants.create(COUNTER, config={}, name="a2"), _is_assistant),
        "assistants.update": (lambda: c.assistants.update(aid, metadata={"x": 1}), _is_assistant),
        "assistants.get_versions": (
            lambda: c.assistants.get_versions(aid),
            lambda r: [v["version"] for v in r] == [2, 1],
        ),
        "assistants.set_latest": (lambda: c.assistants.set_latest(aid, 1), lambda r: r["version"] == 1),
        "assistants.delete": (lambda: c.assistants.delete(aid), lambda r: r is None),
        "threads.create": (lambda: c.threads.create(metadata={"k": "v"}), _is_thread),
        "threads.get": (lambda: c.threads.get(tid), _is_thread),
        "threads.update": (lambda: c.threads.update(tid, metadata={"seen": True}), _is_thread),
        "threads.search": (lambda: c.threads.search(limit=5), lambda r: r and all(map(_is_thread, r))),
        "threads.count": (lambda: c.threads.count(), lambda r: isinstance(r, int) and r >= 1),
        "threads.copy": (lambda: c.threads.copy(tid), _is_thread),
        "threads.get_state": (lambda: c.threads.get_state(tid), _is_state),
        "threads.update_state": (lambda: c.threads.update_state(tid, {"limit": 3}), lambda r: "checkpoint" in r),
        "threads.get_history": (lambda: c.threads.get_history(tid, limit=3), lambda r: all(map(_is_state, r))),
        "threads.join_stream": (lambda: c.threads.join_stream(tid, last_event_id="0"), streamed),
        "threads.stream": (lambda: c.threads.stream(tid, assistant_id=COUNTER), streamed),
        "threads.prune": (lambda: c.threads.prune([other]), lambda r: r == {"pruned_count": 1}),
        "threads.delete": (lambda: c.threads.delete(gone), lambda r: r is None),
        "runs.create": (lambda: c.runs.create(tid, COUNTER, input={"limit": 1}, multitask_strategy="enqueue"), _is_run),
        "runs.create_batch": (
            lambda: c.runs.create_batch([{"assistant_id": COUNTER, "input": {"limit": 1}}]),
            lambda r: all(map(_is_run, r)),
        ),
        "runs.stream": (lambda: c.runs.stream(None, COUNTER, input={"limit": 1}), streamed),
        "runs.wait": (lambda: c.runs.wait(None, COUNTER, input={"limit": 1}), lambda r: r["n"] == 1),
        "runs.list": (lambda: c.runs.list(tid), lambda r: r and all(map(_is_run, r))),
        "runs.get": (lambda: c.runs.get(tid, run_id), _is_run),
        "runs.join": (lambda: c.runs.join(tid, run_id), lambda r: "n" in r),
        "runs.join_stream": (lambda: c.runs.join_stream(tid, run_id, last_event_id="0"), streamed),
        "runs.cancel": (lambda: c.runs.cancel(tid, run_id, wait=True), _is_run),
        "runs.cancel_many": (lambda: c.runs.cancel_many(thread_id=tid), lambda r: r is None),
        "runs.delete": (lambda: c.runs.delete(tid, run_id), lambda r: r is None),
        "crons.create": (lambda: c.crons.create(COUNTER, schedule="0 0 1 1 *", input={"limit": 1}), _is_cron),
        "crons.create_for_thread": (
            lambda: c.crons.create_for_thread(tid, COUNTER, schedule="0 0 1 1 *", input={"limit": 1}),
            _is_cron,
        ),
        "crons.search": (lambda: c.crons.search(), lambda r: isinstance(r, list) and all(map(_is_cron, r))),
        "crons.count": (lambda: c.crons.count(), lambda r: isinstance(r, int) and r >= 1),
        "crons.update": (lambda: c.crons.update(cron_id, schedule="0 0 2 1 *"), _is_cron),
        "crons.delete": (lambda: c.crons.delete(cron_id), lambda r: r is None),
        "store.put_item": (lambda: c.store.put_item(["docs", tid], "k", {"v": 1}), lambda r: r is None),
        "store.get_item": (lambda: c.store.get_item(["docs", tid], key="k"), lambda r: r["value"] == {"v": 1}),
        "store.search_items": (lambda: c.store.search_items(["docs"]), lambda r: len(r["items"]) >= 1),
        "store.list_namespaces": (lambda: c.store.list_namespaces(prefix=["docs"]), lambda r: "namespaces" in r),
        "store.delete_item": (lambda: c.store.delete_item(["docs", tid], key="k"), lambda r: r is None),
    }


async def _collect(parts: Any) -> list[Any]:
    return [p async for p in parts]


async def _thread_stream_output(stream: Any) -> bool:
    async with stream as thread:
        await thread.run.start(input={"limit": 1})
        out = await thread.output
    return isinstance(out, dict) and "n" in out


def _sync_thread_stream_output(stream: Any) -> bool:
    with stream as thread:
        thread.run.start(input={"limit": 1})
        out = thread.output
    return isinstance(out, dict) and "n" in out


def _check_parts(parts: list[Any]) -> bool:
    return bool(parts) and parts[-1].event == "end" and all(p.event != "error" for p in parts)


def test_every_method_of_the_async_and_sync_clients(serve: Callable[..., Served]) -> None:
    from langgraph_sdk import get_client, get_sync_client

    server = serve([COUNTER])
    async_client = get_client(url=server.url, timeout=TIMEOUT)
    sync_client = get_sync_client(url=server.url, timeout=TIMEOUT)
    methods = _methods(async_client)
    assert methods == _methods(sync_client)
    assert len(methods) == 46

    async def run_async() -> set[str]:
        c = async_client
        tid = (await c.threads.create())["thread_id"]
        other = (await c.threads.create())["thread_id"]
        gone = (await c.threads.create())["thread_id"]
        run = await c.runs.create(tid, COUNTER, input={"limit": 2})
        await c.runs.join(tid, run["run_id"])
        cron = await c.crons.create(COUNTER, schedule="0 0 1 1 *", input={"limit": 1})
        aid = (await c.assistants.create(COUNTER, name="mine"))["assistant_id"]
        answered: set[str] = set()
        for name, (call, check) in _calls(c, tid, other, gone, run["run_id"], cron["cron_id"], aid).items():
            try:
                result = call()
                if check == "stream":
                    if inspect.isawaitable(result):
                        result = await asyncio.wait_for(result, 60)
                    try:
                        if "ThreadStream" in type(result).__name__:  # the v3 thread stream
                            ok = await asyncio.wait_for(_thread_stream_output(result), 60)
                        else:
                            ok = _check_parts(await asyncio.wait_for(_collect(result), 60))
                    except TimeoutError:
                        raise AssertionError(f"{name}: the stream did not end") from None
                else:
                    ok = check(await asyncio.wait_for(result, 60))
            except (httpx.HTTPStatusError, NotImplementedError):
                continue
            assert ok, f"{name}: not LangGraph's shape"
            answered.add(name)
        await c.aclose()
        return answered

    answered_async = asyncio.run(run_async())

    c = sync_client
    tid, other = c.threads.create()["thread_id"], c.threads.create()["thread_id"]
    gone = c.threads.create()["thread_id"]
    run = c.runs.create(tid, COUNTER, input={"limit": 2})
    c.runs.join(tid, run["run_id"])
    cron = c.crons.create(COUNTER, schedule="0 0 1 1 *", input={"limit": 1})
    aid = c.assistants.create(COUNTER, name="mine")["assistant_id"]
    answered_sync: set[str] = set()
    for name, (call, check) in _calls(c, tid, other, gone, run["run_id"], cron["cron_id"], aid).items():
        try:
            result = call()
            if check == "stream":
                if "ThreadStream" in type(result).__name__:  # the v3 thread stream
                    ok = _sync_thread_stream_output(result)
                else:
                    ok = _check_parts(list(result))  # bounded by the client's read timeout
            else:
                ok = check(result)
        except (httpx.HTTPStatusError, NotImplementedError):
            continue
        assert ok, f"{name} (sync): not LangGraph's shape"
        answered_sync.add(name)
    c.close()

    assert set(_calls(c, "", "", "", "", "", "")) == set(methods)
    expected = set(methods) - NOT_YET
    assert answered_async == expected, (sorted(expected - answered_async), sorted(answered_async - expected))
    assert answered_sync == expected, (sorted(expected - answered_sync), sorted(answered_sync - expected))
    print(f"answered {len(expected)} of {len(methods)}")
