"""The Agent Protocol against the real server, as a client of the protocol uses it: an agent, a thread, a run on it
(background, waited for, streamed), the runs by id, the thread's event subscription with its commands (a run, an
interrupt answered, a time-travel fork, ``since`` to reconnect), and the thread patch. Responses are checked against
the protocol's own document (``agent_protocol/openapi.json``; formats aside: graphckpt's checkpoint ids are not
UUIDs)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from support.serving import Served, SseFrames, read_events
from support.waiting import wait_for

DOC = json.loads((Path(__file__).parent / "agent_protocol" / "openapi.json").read_text())


def conforms(value: Any, name: str) -> None:
    """``value`` is valid as the document's schema ``name`` (its ``$ref`` s resolved in the document)."""
    schema = {"$ref": f"#/components/schemas/{name}", "components": DOC["components"]}
    jsonschema.validate(value, schema)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    tmp = tmp_path_factory.mktemp("ap")
    server = Served(tmp, ["agent=support.server_graphs:echo", "guarded=support.server_graphs:guarded"]).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as c:
            yield c
    finally:
        server.stop()


def test_agents_are_the_served_graphs_with_their_schemas(client: httpx.Client) -> None:
    found = client.post("/agents/search", json={}).json()
    assert sorted(a["agent_id"] for a in found) == ["agent", "guarded"]
    for agent in found:
        conforms(agent, "Agent")
    agent = client.get("/agents/agent").json()
    assert agent["capabilities"] == {"ap.io.messages": True, "ap.io.streaming": True}
    schemas = client.get("/agents/agent/schemas").json()
    conforms(schemas, "AgentSchema")
    assert "messages" in schemas["state_schema"]["properties"]
    assert client.post("/agents/search", json={"name": "guar"}).json()[0]["agent_id"] == "guarded"
    missing = client.get("/agents/nobody")
    assert missing.status_code == 404 and "nobody" in missing.json()["message"]


def test_a_thread_run_in_the_background_then_waited_for_by_id(client: httpx.Client) -> None:
    thread = client.post("/threads", json={"metadata": {"who": "ap"}}).json()
    conforms(thread, "Thread")
    uuid.UUID(thread["thread_id"])
    body = {"thread_id": thread["thread_id"], "agent_id": "agent", "messages": [{"role": "user", "content": "hi"}]}
    run = client.post("/runs", json=body).json()
    conforms(run, "Run")
    assert run["thread_id"] == thread["thread_id"] and run["agent_id"] == "agent"
    done = client.get(f"/runs/{run['run_id']}/wait").json()
    conforms(done, "RunWaitResponse")
    assert done["run"]["status"] == "success"
    assert done["messages"][-1] == {"role": "assistant", "content": "echo: hi"}
    assert client.get(f"/runs/{run['run_id']}").json()["status"] == "success"
    listed = client.post("/runs/search", json={"thread_id": thread["thread_id"]}).json()
    assert [r["run_id"] for r in listed] == [run["run_id"]]
    history = client.get(f"/threads/{thread['thread_id']}/history").json()
    for state in history:
        conforms(state, "ThreadState")
    assert client.delete(f"/runs/{run['run_id']}").status_code == 204
    assert client.get(f"/runs/{run['run_id']}").status_code == 404
    # a thread the protocol's if_not_exists (default reject) does not find
    missing = client.post("/runs/wait", json={"thread_id": str(uuid.uuid4()), "input": {}})
    assert missing.status_code == 404


def test_a_stateless_run_waited_for_and_one_streamed(client: httpx.Client) -> None:
    done = client.post(
        "/runs/wait", json={"agent_id": "agent", "input": {"messages": [{"role": "user", "content": "x"}]}}
    )
    answer = done.json()
    conforms(answer, "RunWaitResponse")
    assert answer["values"]["messages"][-1]["content"] == "echo: x"
    thread_id = answer["run"]["thread_id"]
    wait_for(lambda: client.get(f"/threads/{thread_id}").status_code == 404, 10, what="the temporary thread deleted")
    events = read_events(
        client,
        "/runs/stream",
        method="POST",
        json_body={"agent_id": "agent", "messages": [{"role": "user", "content": "s"}], "stream_mode": "values"},
    )
    values = [data for _, event, data in events if event == "values"]
    assert values[-1]["messages"][-1] == {"role": "assistant", "content": "echo: s"}
    # langgraph-sdk's body (assistant_id) on the same route keeps LangGraph's answer: the values themselves
    plain = client.post("/runs/wait", json={"assistant_id": "agent", "input": {"messages": []}}).json()
    assert plain["messages"][-1]["content"] == "echo: "


def test_refusals_name_the_field(client: httpx.Client) -> None:
    refused = client.post("/runs", json={"agent_id": "agent", "input": "just text"})
    assert refused.status_code == 422 and "body.input" in refused.json()["message"]
    refused = client.post("/runs", json={"agent_id": "agent", "input": {}, "colour": "red"})
    assert refused.status_code == 422 and "colour" in refused.json()["message"]
    refused = client.post(f"/threads/{uuid.uuid4()}/stream", json={"channels": ["nope"]})
    assert refused.status_code == 422 and "body.channels.0" in refused.json()["message"]


def test_the_event_subscription_with_commands_an_interrupt_and_since(client: httpx.Client) -> None:
    thread_id = client.post("/threads", json={}).json()["thread_id"]
    command = {"id": 1, "method": "run.start", "params": {"assistantId": "guarded", "input": {"messages": []}}}
    started = client.post(f"/threads/{thread_id}/commands", json=command).json()
    assert started["type"] == "success" and started["id"] == 1 and started["result"]["runId"]
    channels = ["lifecycle", "input", "values", "checkpoints"]
    bodies = subscription(client, thread_id, {"channels": channels}, until="input.requested")
    for body in bodies:
        conforms(body, "StreamingEvent")
    assert [b["seq"] for b in bodies] == sorted(b["seq"] for b in bodies)
    assert {b["method"] for b in bodies} == {"lifecycle", "input.requested", "values", "checkpoints"}
    asked = bodies[-1]
    interrupt_id = asked["params"]["data"]["interruptId"]
    assert asked["params"]["data"]["payload"] == {"question": "send the reply?"}
    respond = {
        "id": 2,
        "method": "input.respond",
        "params": {"namespace": [], "interruptId": interrupt_id, "response": "yes"},
    }
    answered = client.post(f"/threads/{thread_id}/commands", json=respond).json()
    assert answered["type"] == "success"
    done = client.get(f"/runs/{answered['result']['runId']}/wait").json()
    assert done["values"]["approved"] == "yes"
    state = client.post(f"/threads/{thread_id}/commands", json={"id": 3, "method": "state.get", "params": {}}).json()
    assert state["result"]["values"]["approved"] == "yes"
    # since: only what follows the event a client saw last
    last = asked["seq"]
    after = subscription(client, thread_id, {"channels": ["lifecycle"], "since": last}, until="completed")
    assert [d["params"]["data"]["event"] for d in after][-1] == "completed"
    assert "interrupted" not in [d["params"]["data"]["event"] for d in after]
    assert all(d["seq"] > last for d in after)
    unknown = client.post(f"/threads/{thread_id}/commands", json={"id": 4, "method": "agent.getTree"}).json()
    conforms(unknown, "StreamingCommandResponse")
    assert unknown["type"] == "error" and unknown["id"] == 4


def subscription(client: httpx.Client, thread_id: str, body: dict[str, Any], *, until: str) -> list[dict[str, Any]]:
    """The events of a subscription up to the first whose method (or lifecycle event) is ``until``; then it is
    closed (a subscription never ends by itself)."""
    found: list[dict[str, Any]] = []
    frames = SseFrames()
    with client.stream("POST", f"/threads/{thread_id}/stream", json=body) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            event = frames.feed(line)
            if event is None:
                continue
            found.append(event[2])
            data = event[2]["params"]["data"]
            if until in (event[2]["method"], data.get("event") if isinstance(data, dict) else None):
                return found
    raise AssertionError(f"the subscription ended before {until!r}: {found}")


def test_patch_applies_values_and_messages_and_merges_metadata(client: httpx.Client) -> None:
    run = client.post(
        "/runs/wait",
        json={"agent_id": "agent", "on_completion": "keep", "messages": [{"role": "user", "content": "a"}]},
    )
    thread_id = run.json()["run"]["thread_id"]
    head = client.get(f"/threads/{thread_id}/history").json()[0]["checkpoint"]["checkpoint_id"]
    patched = client.patch(
        f"/threads/{thread_id}",
        json={"metadata": {"k": 1}, "messages": [{"role": "user", "content": "more"}]},
    ).json()
    conforms(patched, "Thread")
    assert patched["metadata"]["k"] == 1 and patched["values"]["messages"][-1]["content"] == "more"
    branched = client.patch(
        f"/threads/{thread_id}", json={"checkpoint": {"checkpoint_id": head}, "values": {"approved": "edited"}}
    ).json()
    assert branched["values"]["approved"] == "edited"
    assert branched["values"]["messages"][-1]["content"] == "echo: a"  # the branch is from the earlier checkpoint
    fresh = client.post("/threads", json={}).json()["thread_id"]
    early = client.patch(f"/threads/{fresh}", json={"values": {"approved": "x"}})
    assert early.status_code == 409 and "no state yet" in early.json()["message"]
    found = client.post("/threads/search", json={"values": {"approved": "edited"}}).json()
    assert [t["thread_id"] for t in found] == [thread_id]
    copy = client.post(f"/threads/{thread_id}/copy").json()
    conforms(copy, "Thread")
    assert copy["values"] == branched["values"] and copy["thread_id"] != thread_id


def test_cancel_a_run_by_id(client: httpx.Client) -> None:
    thread_id = client.post("/threads", json={}).json()["thread_id"]
    run = client.post("/runs", json={"thread_id": thread_id, "agent_id": "guarded", "input": {"messages": []}}).json()
    client.get(f"/runs/{run['run_id']}/wait")
    assert client.post(f"/runs/{run['run_id']}/cancel").status_code == 204
    assert client.get(f"/runs/{run['run_id']}").json()["status"] in ("success", "interrupted")
    assert client.post(f"/runs/{uuid.uuid4()}/cancel").status_code == 404


def test_store_items_with_the_protocols_namespace_parameters(client: httpx.Client) -> None:
    put = client.put("/store/items", json={"namespace": ["ap", "notes"], "key": "k", "value": {"v": 1}})
    assert put.status_code == 204
    item = client.get("/store/items", params=[("key", "k"), ("namespace", "ap"), ("namespace", "notes")]).json()
    conforms(item, "Item")
    assert item["value"] == {"v": 1}
    found = client.post("/store/items/search", json={"namespace_prefix": ["ap"]}).json()
    conforms(found, "SearchItemsResponse")
    deleted = client.request("DELETE", "/store/items", json={"namespace": ["ap", "notes"], "key": "k"})
    assert deleted.status_code == 204


def test_a_runs_stream_joined_by_id_replays_it_and_ends(client: httpx.Client) -> None:
    body = {"agent_id": "agent", "on_completion": "keep", "messages": [{"role": "user", "content": "j"}]}
    run = client.post("/runs", json=body).json()
    events = read_events(client, f"/runs/{run['run_id']}/stream", params={"stream_mode": "values"})
    assert events[-1][1] == "end"
    values = [data for _, event, data in events if event == "values"]
    assert values[-1]["messages"][-1] == {"role": "assistant", "content": "echo: j"}


def test_a_subscription_opened_first_sees_the_run_it_then_starts(client: httpx.Client) -> None:
    thread_id = client.post("/threads", json={}).json()["thread_id"]
    opened, seen = threading.Event(), []

    def subscribe() -> None:
        frames = SseFrames()
        with httpx.Client(base_url=str(client.base_url), timeout=30) as own:
            body = {"channels": ["lifecycle", "updates"], "namespaces": [[]]}
            with own.stream("POST", f"/threads/{thread_id}/stream", json=body) as response:
                opened.set()
                for line in response.iter_lines():
                    if (event := frames.feed(line)) is not None:
                        seen.append(event[2])
                        if event[2]["params"]["data"].get("event") == "completed":
                            return

    reader = threading.Thread(target=subscribe)
    reader.start()
    assert opened.wait(20)
    command = {"id": 7, "method": "run.start", "params": {"assistantId": "agent", "input": {"messages": []}}}
    assert client.post(f"/threads/{thread_id}/commands", json=command).json()["type"] == "success"
    reader.join(30)
    assert not reader.is_alive()
    assert [e["method"] for e in seen] == ["lifecycle", "updates", "lifecycle"]
    assert seen[1]["params"]["data"] == {
        "node": "reply",
        "values": {"messages": [{"role": "assistant", "content": "echo: "}]},
    }
