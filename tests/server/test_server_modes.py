"""Stream modes of ``graphckpt serve`` and its ephemeral events, against the real server over loopback.

Durable modes (``values``, ``updates``, ``checkpoints``, ``events``) are renderings of the event log. Ephemeral ones
(``messages``, ``custom``, ``tasks``, ``debug``) come from this server's own workers as the run goes and are placed
between the durable events they happened between, with ids ``{durable id}~{epoch}.{n}``: a reconnect with one
continues right after it while the server still holds what came next; a restarted server says ``stream.reset``
(the ephemeral events are lost) and continues after the durable event the id names.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import server_graphs
from support.openai_server import FakeOpenAIServer
from support.serving import Served, SseFrames, durable, read_events

from graphckpt.savers.memory import MemorySaver

Event = tuple[str | None, str, Any]
MODES = {"stream_mode": "messages-tuple,custom,events"}


@pytest.fixture
def model() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


def _key(event_id: str | None) -> tuple[int, int, int]:
    """An id's place in the stream: ``(step, seq, -1)`` for a durable one, ``(step, seq, n)`` for an ephemeral."""
    assert event_id is not None
    _, step, rest = event_id.rsplit(":", 2)
    seq, _, suffix = rest.partition("~")
    return int(step), int(seq), int(suffix.rpartition(".")[2]) if suffix else -1


def _library_updates(graph: Any, data: dict[str, Any]) -> list[Any]:
    return list(graph.compile(MemorySaver()).stream(data, thread_id="lib", mode="updates"))


def _stream_run(client: httpx.Client, thread: str, body: dict[str, Any], **kw: Any) -> list[Event]:
    return read_events(client, f"/threads/{thread}/runs/stream", method="POST", json_body=body, **kw)


@pytest.mark.parametrize(("target", "data"), [("counter", {"limit": 5}), ("fanout", {"width": 16})])
def test_updates_equal_the_librarys_stream(serve: Callable[..., Served], target: str, data: dict[str, Any]) -> None:
    server = serve([f"support.server_graphs:{target}"])
    with httpx.Client(base_url=server.url, timeout=30) as client:
        events = _stream_run(client, "u", {"input": data, "stream_mode": "updates"})
        assert events[0][1] == "metadata" and events[-1][1] == "end"
        updates = [d for _, k, d in events if k == "updates"]
        expected = _library_updates(getattr(server_graphs, target)(), data)
        assert len(expected) == (5 if target == "counter" else 16)
        key = repr  # a fan-out's tasks finish in any order
        assert sorted(updates, key=key) == sorted(expected, key=key)
        again = read_events(client, "/threads/u/stream", params={"stream_mode": "updates"})  # after the run: the log
        assert [d for _, k, d in again if k == "updates"] == updates
        raw = read_events(client, "/threads/u/stream")  # the log's own events carry each update, filled in
        assert [{d["node"]: d["update"]} for _, k, d in raw if k == "task.finished"] == updates


def test_messages_arrive_before_their_steps_task_finished(
    serve: Callable[..., Served], model: FakeOpenAIServer
) -> None:
    server = serve(["support.server_graphs:asking"], env={"OPENAI_BASE_URL": model.base_url})
    with httpx.Client(base_url=server.url, timeout=30) as client:
        events = _stream_run(
            client, "m", {"input": {"limit": 3}, "stream_mode": ["messages-tuple", "values", "events"]}
        )
        keys = [_key(i) for i, _, _ in events if i]
        assert keys == sorted(keys)  # ids increase, ephemeral ones too; one event's two renderings share its id
        assert [k for k in keys if k[2] >= 0] == sorted({k for k in keys if k[2] >= 0})
        pieces: dict[int, list[str]] = {}
        finished: set[int] = set()
        for eid, kind, data in events:
            if kind == "messages":
                chunk, metadata = data
                step = metadata["langgraph_step"]
                assert step not in finished, "a piece after its step's task.finished"
                assert metadata["langgraph_node"] == "ask" and metadata["thread_id"] == "m"
                pieces.setdefault(step, []).append(chunk["content"])
            elif kind == "task.finished":
                finished.add(_key(eid)[0])
        values = [d for _, k, d in events if k == "values"]
        answers = {step: "".join(p) for step, p in pieces.items()}
        assert len(answers) == 3 and all(len(p) > 1 for p in pieces.values())  # streamed piece by piece
        assert list(answers.values()) == [v["last"] for v in values[1:]]  # the pieces make each step's message
        assert all(r.json["stream"] is True for r in model.requests)


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_custom_writes_arrive_in_their_step(
    serve: Callable[..., Served], model: FakeOpenAIServer, store: str, request: pytest.FixtureRequest
) -> None:
    db = None
    if store == "postgres":
        db = f"postgresql://postgres@127.0.0.1:5432/test?schema={request.getfixturevalue('pg_schema_name')}"
    server = serve(["support.server_graphs:asking"], env={"OPENAI_BASE_URL": model.base_url}, db=db)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        events = _stream_run(client, "c", {"input": {"limit": 3}, "stream_mode": ["custom", "updates"]})
        named = [(k, d) for _, k, d in events if k in ("custom", "updates")]
        assert [k for k, _ in named] == ["custom", "updates"] * 3
        assert [d for k, d in named if k == "custom"] == [{"asking": 1}, {"asking": 2}, {"asking": 3}]
        assert not any("stream" in r.json for r in model.requests)  # nobody read messages: whole completions


def test_tasks_and_debug_modes(serve: Callable[..., Served]) -> None:
    server = serve(["support.server_graphs:counter"])
    with httpx.Client(base_url=server.url, timeout=30) as client:
        events = _stream_run(client, "d", {"input": {"limit": 2}, "stream_mode": ["tasks", "debug"]})
        tasks = [d for _, k, d in events if k == "tasks"]
        assert [("input" in t, t["name"]) for t in tasks] == [(True, "tick"), (False, "tick")] * 2
        assert tasks[0]["input"]["n"] == 0 and tasks[2]["input"]["n"] == 1
        assert tasks[1] == {"id": tasks[0]["id"], "name": "tick", "result": {"n": 1, "log": ["tick 1"]}}
        assert tasks[3]["id"] == tasks[2]["id"] != tasks[0]["id"]  # a start and its result name one task
        debug = [d["type"] for _, k, d in events if k == "debug"]
        assert debug == ["checkpoint"] + ["task", "task_result", "checkpoint"] * 2
        bad = client.post("/threads/d/runs/stream", json={"stream_mode": ["values", "nonsense"]})
        assert bad.status_code == 422 and "body.stream_mode" in bad.json()["message"]
        bad = client.get("/threads/d/stream", params={"stream_mode": "nonsense"})
        assert bad.status_code == 422 and "query.stream_mode" in bad.json()["message"]


def test_a_run_streams_location_reapplies_its_modes(serve: Callable[..., Served], model: FakeOpenAIServer) -> None:
    """langgraph-sdk reconnects to a run stream's ``Location`` with ``Last-Event-ID`` (no body): the modes are
    in its query."""
    server = serve(
        ["support.server_graphs:asking"], env={"OPENAI_BASE_URL": model.base_url, "SERVE_TEST_DELAY": "0.05"}
    )
    with httpx.Client(base_url=server.url, timeout=30) as client:
        seen: list[httpx.Response] = []
        body = {"input": {"limit": 3}, "stream_mode": ["messages-tuple", "custom"]}
        head = durable(_stream_run(client, "l", body, limit=4, on_response=seen.append))
        location = seen[0].headers["location"]
        assert location.endswith("/stream?stream_mode=messages-tuple&stream_mode=custom")
        rest = read_events(client, location, last_id=head[-1][0])
        assert rest[-1][1] == "end" and not any(k == "stream.reset" for _, k, _ in rest)
        got = head + durable(rest)
        assert {k for _, k, _ in got} == {"messages", "custom"}
        again = read_events(client, "/threads/l/stream", params={"stream_mode": "messages-tuple,custom"})
        assert durable(again) == got  # no gap, no duplicate


def test_a_16_way_fan_out_starts_16_tasks_between_the_checkpoints(serve: Callable[..., Served]) -> None:
    server = serve(["support.server_graphs:fanout"])
    with httpx.Client(base_url=server.url, timeout=30) as client:
        events = _stream_run(client, "f", {"input": {"width": 16}, "stream_mode": ["tasks", "events"]})
        kinds = [("start" if "input" in d else "result") if k == "tasks" else k for _, k, d in events]
        first = kinds.index("start")
        assert kinds[first - 1] == "checkpoint"  # after the input step's checkpoint
        assert kinds[first : first + 16] == ["start"] * 16 and kinds.count("start") == 16
        starts = {d["id"]: d["input"] for _, k, d in events if k == "tasks" and "input" in d}
        results = {d["id"]: d["result"] for _, k, d in events if k == "tasks" and "result" in d}
        assert set(starts) == set(results) and sorted(starts.values()) == list(range(16))
        assert all(results[t] == {"done": [p]} for t, p in starts.items())  # each Send's payload and its update


def test_ephemeral_events_in_a_namespace(serve: Callable[..., Served], model: FakeOpenAIServer, tmp_path: Path) -> None:
    """With tokens, a thread is stored under its namespace; its ephemeral events name it as the client does, and
    another namespace cannot follow them."""
    tokens = tmp_path / "tokens"
    tokens.write_text("token-a alpha\ntoken-b beta\n")
    server = serve(
        ["support.server_graphs:asking"], env={"OPENAI_BASE_URL": model.base_url}, args=["--tokens-file", str(tokens)]
    )
    a = httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": "Bearer token-a"})
    b = httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": "Bearer token-b"})
    with a, b:
        events = durable(_stream_run(a, "ns", {"input": {"limit": 2}, "stream_mode": ["messages-tuple", "custom"]}))
        assert events and all(i is not None and i.startswith("ns:") for i, _, _ in events)
        assert all(d[1]["thread_id"] == "ns" for _, k, d in events if k == "messages")
        rest = read_events(
            a, "/threads/ns/stream", last_id=events[2][0], params={"stream_mode": "messages-tuple,custom"}
        )
        assert durable(rest) == events[3:] and not any(k == "stream.reset" for _, k, _ in rest)
        assert b.get("/threads/ns/stream", headers={"Last-Event-ID": events[2][0] or ""}).status_code == 404


def test_subgraph_events_carry_their_namespace(serve: Callable[..., Served]) -> None:
    """``stream_subgraphs``: a subgraph's events come as ``event: MODE|node:task_id`` (LangGraph's names), like the
    library's ``stream(..., subgraphs=True)``; without it, only the graph's own."""
    server = serve(["support.server_graphs:nested"])
    app = server_graphs.nested().compile(MemorySaver())
    library = [
        (ns, mode, chunk)
        for ns, mode, chunk in app.stream({}, thread_id="lib", mode=["updates", "custom"], subgraphs=True)
    ]
    with httpx.Client(base_url=server.url, timeout=30) as client:
        body = {"input": {}, "stream_mode": ["updates", "custom"], "stream_subgraphs": True}
        events = [(k, d) for _, k, d in _stream_run(client, "s", body) if k not in ("metadata", "end")]
        named = [(k.split("|")[0], [p.split(":")[0] for p in k.split("|")[1:]], d) for k, d in events]
        expected = [(mode, [p.split(":")[0] for p in ns], chunk) for ns, mode, chunk in library]
        assert named == expected
        assert ("custom", ["inner"], {"inner": 1}) in named and ("updates", [], {"after": {"log": ["after"]}}) in named
        plain = _stream_run(client, "p", {"input": {}, "stream_mode": ["updates", "custom"]})
        assert [k for _, k, _ in plain if k not in ("metadata", "end")] == ["updates", "updates"]


def _cut_every(client: httpx.Client, path: str, n: int, params: dict[str, str]) -> list[Event]:
    got: list[Event] = []
    last = None
    while True:
        part = read_events(client, path, last_id=last, limit=n, params=params)
        assert not any(k == "stream.reset" for _, k, _ in part), part[:2]
        got += durable(part)
        if (part and part[-1][1] == "end") or not durable(part):
            return got
        last = got[-1][0]


def test_reconnect_with_an_ephemeral_id_continues_without_duplicates(
    serve: Callable[..., Served], model: FakeOpenAIServer
) -> None:
    server = serve(
        ["support.server_graphs:asking"], env={"OPENAI_BASE_URL": model.base_url, "SERVE_TEST_DELAY": "0.02"}
    )
    with httpx.Client(base_url=server.url, timeout=30) as client:
        live = durable(
            _stream_run(client, "r", {"input": {"limit": 4}, "stream_mode": ["messages-tuple", "custom", "events"]})
        )
        whole = durable(read_events(client, "/threads/r/stream", params=MODES))
        assert whole == live  # after the run, the thread's stream is the same, from the ring and the log
        ephemeral = [i for i, _, _ in whole if i and "~" in i]
        assert len(ephemeral) > 8
        for n in (1, 2, 3, 5, 8):
            assert _cut_every(client, "/threads/r/stream", n, MODES) == whole, f"cut every {n}"
        for i, (eid, _, _) in enumerate(whole):  # once after each event
            assert durable(read_events(client, "/threads/r/stream", last_id=eid, params=MODES)) == whole[i + 1 :]


def test_cuts_while_the_run_is_live(serve: Callable[..., Served], model: FakeOpenAIServer) -> None:
    server = serve(
        ["support.server_graphs:asking"], env={"OPENAI_BASE_URL": model.base_url, "SERVE_TEST_DELAY": "0.05"}
    )
    with httpx.Client(base_url=server.url, timeout=30) as client:
        client.post("/threads", json={"thread_id": "lv"}).raise_for_status()
        params = {"stream_mode": "messages-tuple,custom,events"}

        async def first_part() -> list[Event]:  # subscribed before the run is queued: it sees every event
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as ac:
                opened = asyncio.Event()
                task = asyncio.create_task(_read_async(ac, "/threads/lv/stream", params, opened, limit=5))
                await asyncio.wait_for(opened.wait(), 10)
                (await ac.post("/threads/lv/runs", json={"input": {"limit": 5}})).raise_for_status()
                return await task

        head = durable(asyncio.run(first_part()))
        got = head + _cut_every_after(client, "/threads/lv/stream", 3, params, head[-1][0])
        assert got == durable(read_events(client, "/threads/lv/stream", params=params))
        assert any("~" in (i or "") for i, _, _ in got) and got[-1][1] == "run.done"


def _cut_every_after(client: httpx.Client, path: str, n: int, params: dict[str, str], last: str | None) -> list[Event]:
    got: list[Event] = []
    while True:
        part = read_events(client, path, last_id=last, limit=n, params=params)
        assert not any(k == "stream.reset" for _, k, _ in part), part[:2]
        got += durable(part)
        if (part and part[-1][1] == "end") or not durable(part):
            return got
        last = got[-1][0]


async def _read_async(
    client: httpx.AsyncClient, path: str, params: dict[str, str], opened: asyncio.Event, *, limit: int
) -> list[Event]:
    out: list[Event] = []
    async with client.stream("GET", path, params=params) as response:
        assert response.status_code == 200
        opened.set()
        frames = SseFrames()
        async for line in response.aiter_lines():
            if (event := frames.feed(line)) is not None:
                out.append(event)
                if sum(1 for i, _, _ in out if i) >= limit:
                    break
    return out


def test_after_a_restart_an_ephemeral_id_is_reset_to_its_durable_event(
    serve: Callable[..., Served], model: FakeOpenAIServer
) -> None:
    env = {"OPENAI_BASE_URL": model.base_url}
    first = serve(["support.server_graphs:asking"], env=env)
    with httpx.Client(base_url=first.url, timeout=30) as client:
        events = durable(
            _stream_run(client, "k", {"input": {"limit": 3}, "stream_mode": ["messages-tuple", "custom", "events"]})
        )
    first.kill()
    at = next(i for i, (eid, _, _) in enumerate(events) if eid and "~" in eid and i > 4)
    eid = events[at][0]
    assert eid is not None
    named = eid.partition("~")[0]
    second = serve(["support.server_graphs:asking"], env=env, db=first.db)
    with httpx.Client(base_url=second.url, timeout=30) as client:
        tail = read_events(client, "/threads/k/stream", last_id=eid, params=MODES)
        assert tail[0][1] == "stream.reset" and tail[0][0] is None
        assert tail[0][2]["continue_after"] == named and tail[0][2]["lost"] == "ephemeral"
        after = [e for e in events if "~" not in (e[0] or "") and _key(e[0]) > _key(named)]
        assert durable(tail) == after  # the durable tail after the named event: no full replay, nothing ephemeral
        assert tail[-1][1] == "end"
        for bad in (f"{named}~x", f"{named}~ab.", f"{named}~ab.-1"):
            assert client.get("/threads/k/stream", headers={"Last-Event-ID": bad}).status_code == 400


def test_the_langgraph_sdk_client_streams_updates_messages_and_custom(
    serve: Callable[..., Served], model: FakeOpenAIServer
) -> None:
    from langgraph_sdk import get_client

    server = serve(["support.server_graphs:asking"], env={"OPENAI_BASE_URL": model.base_url})

    async def main() -> list[Any]:
        client = get_client(url=server.url)
        thread = await client.threads.create()
        parts = [
            p
            async for p in client.runs.stream(
                thread["thread_id"],
                "support.server_graphs:asking",
                input={"limit": 2},
                stream_mode=["updates", "messages-tuple", "custom"],
            )
        ]
        await client.aclose()
        return parts

    parts = asyncio.run(main())
    kinds = [p.event for p in parts]
    assert kinds[0] == "metadata" and kinds[-1] == "end"
    assert set(kinds[1:-1]) == {"updates", "messages", "custom"}
    assert [p.data for p in parts if p.event == "custom"] == [{"asking": 1}, {"asking": 2}]
    text = "".join(p.data[0]["content"] for p in parts if p.event == "messages")
    updates = [p.data["ask"] for p in parts if p.event == "updates"]
    assert len(updates) == 2
    assert text == "".join(u["last"] for u in updates)  # the pieces make the messages the updates hold
    assert kinds.index("custom") < kinds.index("messages") < kinds.index("updates")
