"""The JSON API of ``graphckpt serve`` against the real server: LangGraph-shaped threads, state, history and runs,
graphckpt's fork, diff, tree, export/import and inbox; validation (422 naming the field), body limits, the one
error mapping, bearer tokens scoped to namespaces (another namespace's thread is 404 on every endpoint), the bind
rule, and the official langgraph-sdk client."""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest
from support.serving import Served, durable, read_events, wait_for

from graphckpt import errors
from graphckpt.server import openapi
from graphckpt.server.app import create_app
from graphckpt.server.errors import STATUS, status_of

TOKENS = "token-a  alpha\ntoken-b beta  # a comment\n"
NDJSON = {"Content-Type": "application/x-ndjson"}


def _status(client: httpx.Client, thread: str, want: str, timeout: float = 20) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        body: dict[str, Any] = client.get(f"/threads/{thread}").json()
        return body if body.get("graphckpt_status") == want else None

    result: dict[str, Any] = wait_for(reached, timeout, what=f"thread {thread} {want}")
    return result


def test_threads_state_history_fork_diff_tree(serve: Callable[..., Served]) -> None:
    server = serve(["support.server_graphs:counter", "fan=support.server_graphs:fanout"])
    with httpx.Client(base_url=server.url, timeout=30) as c:
        assert c.get("/ok").json() == {"ok": True}
        assistants = c.post("/assistants/search", json={}).json()
        assert [a["assistant_id"] for a in assistants] == ["support.server_graphs:counter", "fan"]
        assert "tick" in c.get("/assistants/support.server_graphs:counter/graph").json()["mermaid"]
        assert c.get("/assistants/nope").status_code == 404
        made = c.post("/threads", json={"thread_id": "a", "metadata": {"owner": "ann"}}).json()
        assert made["status"] == "idle" and made["metadata"] == {"owner": "ann"}
        assert c.post("/threads", json={"thread_id": "a"}).status_code == 409
        assert c.post("/threads", json={"thread_id": "a", "if_exists": "do_nothing"}).status_code == 200
        final = c.post("/threads/a/runs/wait", json={"input": {"limit": 5}}).json()
        assert final["n"] == 5
        thread = c.get("/threads/a").json()
        assert thread["graphckpt_status"] == "done" and thread["metadata"] == {"owner": "ann"}
        assert thread["values"]["n"] == 5
        state = c.get("/threads/a/state").json()
        assert state["step"] == 5 and state["next"] == [] and state["checkpoint"]["thread_id"] == "a"
        at2 = c.get("/threads/a/state", params={"step": 2}).json()
        assert at2["values"]["n"] == 2
        by_id = c.get(f"/threads/a/state/{at2['checkpoint']['checkpoint_id']}").json()
        assert by_id["values"] == at2["values"]
        page = c.get("/threads/a/history", params={"limit": 2}).json()
        assert [s["step"] for s in page] == [5, 4]
        older = c.post("/threads/a/history", json={"limit": 10, "before": page[-1]["checkpoint"]}).json()
        assert [s["step"] for s in older] == [3, 2, 1, 0]
        fork = c.post("/threads/a/fork", json={"step": 2, "values": {"limit": 3}, "new_thread_id": "b"})
        assert fork.status_code == 201 and fork.headers["location"] == "/threads/b"
        assert fork.json()["parent"]["thread_id"] == "a" and fork.json()["state"]["values"]["limit"] == 3
        c.post("/threads/b/runs/wait", json={"command": {}}).raise_for_status()
        diff = c.get("/threads/a/diff", params={"other": "b"}).json()
        assert {p["path"] for p in diff["patch"]} >= {"/n", "/limit"}
        tree = c.get("/threads/b/tree").json()
        assert tree["thread_id"] == "a" and [ch["thread_id"] for ch in tree["children"]] == ["b"]
        patched = c.patch("/threads/a", json={"metadata": {"stage": "reviewed"}}).json()
        assert patched["metadata"] == {"owner": "ann", "stage": "reviewed"}
        found = c.post("/threads/search", json={"metadata": {"stage": "reviewed"}}).json()
        assert [t["thread_id"] for t in found] == ["a"]
        assert [t["thread_id"] for t in c.post("/threads/search", json={"parent_thread_id": "a"}).json()] == ["b"]
        assert len(c.post("/threads/search", json={"status": "idle", "limit": 1}).json()) == 1
        assert c.post("/threads/search", json={"graph_id": "fan"}).json() == []
        exported = c.get("/threads/b/export")
        assert exported.status_code == 200 and exported.text.count("\n") > 3
        assert c.delete("/threads/b").status_code == 204
        assert c.get("/threads/b").status_code == 404
        imported = c.post("/threads/import", content=exported.content, headers=NDJSON)
        assert imported.status_code == 201, imported.text
        assert c.get("/threads/b/state").json()["values"]["n"] == 3


def test_runs_multitask_cancel_and_inbox(serve: Callable[..., Served]) -> None:
    server = serve(
        ["support.server_graphs:counter", "review=support.server_graphs:approval"], env={"SERVE_TEST_DELAY": "0.05"}
    )
    with httpx.Client(base_url=server.url, timeout=30) as c:
        run = c.post("/threads/m/runs", json={"input": {"limit": 6}}).json()
        assert run["status"] in ("pending", "running")
        second = c.post("/threads/m/runs", json={"input": {"limit": 7}})
        assert second.status_code == 409 and second.json()["error"] == "RunConflict"
        queued = c.post("/threads/m/runs", json={"input": {"limit": 8}, "multitask_strategy": "enqueue"})
        assert queued.status_code == 200
        joined = c.get(f"/threads/m/runs/{queued.json()['run_id']}/join").json()
        assert joined["n"] == 8
        assert c.get(f"/threads/m/runs/{run['run_id']}").json()["status"] == "success"
        assert [r["run_id"] for r in c.get("/threads/m/runs").json()] == [queued.json()["run_id"], run["run_id"]]
        slow = c.post("/threads/s/runs", json={"input": {"limit": 200}}).json()
        wait_for(lambda: c.get("/threads/s").json().get("head") is not None, 10, what="a first step")
        cancelled = c.post(f"/threads/s/runs/{slow['run_id']}/cancel").json()
        assert cancelled["status"] == "cancelled"
        c.post("/threads/r/runs/wait", json={"assistant_id": "review", "input": {}}).raise_for_status()
        inbox = c.get("/inbox").json()
        assert [item["thread"]["thread_id"] for item in inbox] == ["r"]
        [question] = inbox[0]["interrupts"]
        assert question["value"] == {"question": "approve 'a draft'?"} and question["node"] == "review"
        events = [k for _, k, _ in durable(read_events(c, "/threads/r/stream"))]
        assert events[-2:] == ["interrupt.raised", "run.interrupted"]
        answered = c.post("/threads/r/answer", json={"answer": "yes"})
        assert answered.status_code == 202
        c.get(f"/threads/r/runs/{answered.json()['run_id']}/join").raise_for_status()
        assert c.get("/threads/r/state").json()["values"]["verdict"] == "yes"
        assert c.get("/inbox").json() == []


def test_validation_limits_and_error_bodies(serve: Callable[..., Served]) -> None:
    server = serve(["support.server_graphs:counter"], args=["--max-body", "2000"])
    with httpx.Client(base_url=server.url, timeout=30) as c:
        bad = c.post("/threads/search", json={"limit": 0})
        assert bad.status_code == 422 and bad.json()["message"].startswith("body.limit:")
        wrong = c.post("/threads/v/runs", json={"input": {"limit": "many"}})
        assert wrong.status_code == 422 and "limit" in wrong.json()["message"], wrong.text
        unknown = c.post("/threads/v/runs", json={"input": {"nope": 1}})
        assert unknown.status_code == 422 and "nope" in unknown.json()["message"]
        assert (
            c.post("/threads/search", content=b"{not json", headers={"Content-Type": "application/json"}).status_code
            == 400
        )
        assert (
            c.post("/threads/search", content=b"[1, 2]", headers={"Content-Type": "application/json"}).status_code
            == 422
        )
        big = c.post("/threads", json={"metadata": {"x": "y" * 5000}})
        assert big.status_code == 413 and big.json()["error"] == "PayloadTooLarge"
        assert c.get("/threads/nope/state").json() == {"error": "ThreadNotFoundError", "message": "no thread 'nope'"}
        assert c.get("/no/such/route").json()["error"] == "NotFound"
        assert c.get("/threads/x/state", params={"step": -1}).status_code == 422
        for response in (bad, wrong, big):
            assert "Traceback" not in response.text and set(response.json()) == {"error", "message"}


def test_every_error_class_has_a_status_and_no_trace_leaves() -> None:
    classes = [getattr(errors, name) for name in errors.__all__]
    for cls in classes:
        if issubclass(cls, errors.GraphckptError):
            params = inspect.signature(cls.__init__).parameters
            wanted = {"thread_id": "t", "node": "n", "step": 1}
            kwargs = {k: v for k, v in wanted.items() if k in params and params[k].default is inspect.Parameter.empty}
            status = status_of(cls("boom", **kwargs))
            assert 400 <= status < 600, cls
            assert any(issubclass(cls, listed) for listed in STATUS) or status == 500
    assert status_of(errors.InvalidNodeUpdateError("x", thread_id="t", node="n", step=1)) == 500
    assert status_of(errors.ThreadNotFoundError("x")) == 404
    assert status_of(errors.ThreadConflictError("x")) == 409


def test_openapi_lists_every_route() -> None:
    from support.server_graphs import counter

    app = create_app(counter())
    routes = {
        (m, r.path)
        for r in app.routes
        for m in (getattr(r, "methods", None) or ())
        if m != "HEAD" and getattr(r, "include_in_schema", True)
    }  # the UI's redirect at / is not part of the API's schema
    routes.discard(("GET", "/openapi.json"))
    assert routes == set(openapi.SPEC)


def test_two_namespaces_cannot_see_or_touch_each_other(serve: Callable[..., Served], tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKENS)
    server = serve(["support.server_graphs:counter"], args=["--tokens-file", str(tokens)])
    a = httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": "Bearer token-a"})
    b = httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": "Bearer token-b"})
    with a, b, httpx.Client(base_url=server.url, timeout=30) as anonymous:
        assert anonymous.get("/threads/x").status_code == 401
        assert anonymous.get("/threads/x", headers={"Authorization": "Bearer nope"}).status_code == 401
        a.post("/threads/x/runs/wait", json={"input": {"limit": 3}}).raise_for_status()
        head = a.get("/threads/x/state").json()["checkpoint"]["checkpoint_id"]
        assert b.post("/threads/search", json={}).json() == []
        assert b.get("/inbox").json() == []
        probes = {
            ("GET", "/threads/{thread_id}"): None,
            ("PATCH", "/threads/{thread_id}"): {"metadata": {"k": 1}},
            ("DELETE", "/threads/{thread_id}"): None,
            ("GET", "/threads/{thread_id}/state"): None,
            ("POST", "/threads/{thread_id}/state/checkpoint"): {"checkpoint": {"checkpoint_id": head}},
            ("GET", "/threads/{thread_id}/state/{checkpoint_id}"): None,
            ("GET", "/threads/{thread_id}/history"): None,
            ("POST", "/threads/{thread_id}/history"): {},
            ("POST", "/threads/{thread_id}/fork"): {},
            ("GET", "/threads/{thread_id}/diff"): "other=x",
            ("GET", "/threads/{thread_id}/tree"): None,
            ("GET", "/threads/{thread_id}/export"): None,
            ("POST", "/threads/{thread_id}/runs"): {"command": {}, "if_not_exists": "reject"},
            ("GET", "/threads/{thread_id}/runs"): None,
            ("POST", "/threads/{thread_id}/runs/stream"): {"command": {}, "if_not_exists": "reject"},
            ("POST", "/threads/{thread_id}/runs/wait"): {"command": {}, "if_not_exists": "reject"},
            ("GET", "/threads/{thread_id}/runs/{run_id}"): None,
            ("DELETE", "/threads/{thread_id}/runs/{run_id}"): None,
            ("POST", "/threads/{thread_id}/runs/{run_id}/cancel"): None,
            ("GET", "/threads/{thread_id}/runs/{run_id}/join"): None,
            ("GET", "/threads/{thread_id}/runs/{run_id}/stream"): None,
            ("GET", "/threads/{thread_id}/stream"): None,
            ("POST", "/threads/{thread_id}/answer"): {"answer": "no"},
            ("POST", "/threads/{thread_id}/commands"): {"id": 1, "method": "input.respond", "params": {"response": 1}},
            ("POST", "/threads/{thread_id}/stream/events"): {"channels": ["values"]},
            ("POST", "/threads/{thread_id}/runs/crons"): {"assistant_id": "x", "schedule": "* * * * *"},
            ("POST", "/threads/{thread_id}/state"): {"values": {"limit": 1}},
            ("POST", "/threads/{thread_id}/copy"): None,
            ("POST", "/threads/{thread_id}/stream"): {"channels": ["values"]},
        }
        per_thread = {k for k in openapi.SPEC if "{thread_id}" in k[1]}
        assert per_thread == set(probes)
        run_id = a.get("/threads/x/runs").json()[0]["run_id"]
        for (method, template), body in probes.items():
            path = template.format(thread_id="x", checkpoint_id=head, run_id=run_id)
            query = body if isinstance(body, str) else None
            json_body = body if isinstance(body, dict) else None
            response = b.request(method, path + (f"?{query}" if query else ""), json=json_body)
            assert response.status_code == 404, (method, path, response.status_code, response.text)
        for method, path in [("GET", ""), ("GET", "/wait"), ("GET", "/stream"), ("POST", "/cancel"), ("DELETE", "")]:
            response = b.request(method, f"/runs/{run_id}{path}")  # the Agent Protocol's runs by id
            assert response.status_code == 404, (method, path, response.status_code, response.text)
        assert b.post("/runs/search", json={}).json() == []
        stream = b.get("/threads/x/stream", headers={"Last-Event-ID": "x:1:0"})
        assert stream.status_code == 404
        assert a.get("/threads/x/state").json()["checkpoint"]["checkpoint_id"] == head  # untouched
        assert [t["thread_id"] for t in a.post("/threads/search", json={}).json()] == ["x"]
        b.post("/threads", json={"thread_id": "x"}).raise_for_status()  # b's own "x" is another thread
        assert b.get("/threads/x").json()["status"] == "idle"
        assert a.get("/threads/x").json()["graphckpt_status"] == "done"


def test_an_export_names_threads_as_its_token_sees_them_and_imports_into_another_namespace(
    serve: Callable[..., Served], tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKENS)
    server = serve(["support.server_graphs:counter"], args=["--tokens-file", str(tokens)])
    a = httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": "Bearer token-a"})
    b = httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": "Bearer token-b"})
    with a, b:
        a.post("/threads/x/runs/wait", json={"input": {"limit": 4}}).raise_for_status()
        a.post("/threads/x/fork", json={"step": 2, "values": {"limit": 3}, "new_thread_id": "y"}).raise_for_status()
        a.post("/threads/y/runs/wait", json={"command": {}}).raise_for_status()
        exported = a.get("/threads/y/export")
        assert exported.status_code == 200
        lines = [json.loads(line) for line in exported.text.splitlines()]
        bodies = [base64.b64decode(line["body"]) for line in lines if line["kind"] == "checkpoint"]
        assert "alpha" not in exported.text and not any(b"alpha" in body for body in bodies)  # no stored id at all
        lineages = [msgpack.unpackb(body, strict_map_key=False)["lin"] for body in bodies]
        assert {tid for lineage in lineages for tid, _ in lineage} == {"x", "y"}  # as the token sees them
        assert lines[0]["thread_id"] == "y"
        assert {line["thread_id"] for line in lines[1:-1]} == {"x", "y"}
        [fork_point] = [
            line
            for line in lines
            if line["kind"] == "checkpoint" and line["thread_id"] == "y" and line["parent_thread_id"] == "x"
        ]
        assert fork_point["metadata"]["forked_from"]["thread_id"] == "x"
        imported = b.post("/threads/import", content=exported.content, headers=NDJSON)
        assert imported.status_code == 201, imported.text
        assert imported.json()["thread_id"] == "y"
        assert b.get("/threads/y/state").json()["values"] == a.get("/threads/y/state").json()["values"]
        assert [s["step"] for s in b.get("/threads/y/history", params={"limit": 10}).json()] == [4, 3, 2, 1, 0]
        assert b.get("/threads/y/tree").json()["thread_id"] == "x"  # beta's x (the ancestor the file brought)
        again = b.post("/threads/y/runs/wait", json={"input": {"limit": 5}})  # beta's own thread: it runs it
        assert again.status_code == 200 and again.json()["n"] == 5
        assert a.get("/threads/y/state").json()["values"]["n"] == 3  # alpha's y untouched
        reexported = b.get("/threads/y/export").text
        assert "beta" not in reexported and json.loads(reexported.splitlines()[0])["thread_id"] == "y"
        assert (
            a.post("/threads/import", content=exported.content, headers=NDJSON).status_code == 201
        )  # its own file: a no-op
        hostile = exported.text.replace('"thread_id":"x"', '"thread_id":"alpha/x"')
        refused = b.post("/threads/import", content=hostile.encode(), headers=NDJSON)
        assert refused.status_code == 422 and "alpha/x" in refused.json()["message"]
        assert a.get("/threads/x/state").json()["values"]["n"] == 4

        cli_db = tmp_path / "cli.db"  # a file the CLI wrote (no namespace) imports into one
        env = {**server.env, "SERVE_TEST_DELAY": "0"}
        run = [sys.executable, "-m", "graphckpt", "--db", str(cli_db)]
        done = subprocess.run(
            [*run, "run", "support.server_graphs:counter", "--input", '{"limit": 2}', "--thread", "c"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        out = subprocess.run([*run, "export", "c"], env=env, cwd=tmp_path, capture_output=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert b.post("/threads/import", content=out.stdout, headers=NDJSON).status_code == 201
        assert b.get("/threads/c/state").json()["values"]["n"] == 2
        assert a.get("/threads/c").status_code == 404


def test_binding_beyond_loopback_needs_a_token(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphckpt",
            "--db",
            str(tmp_path / "x.db"),
            "serve",
            "graphckpt.cli.demo:graph",
            "--host",
            "0.0.0.0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "refusing to bind '0.0.0.0' without tokens" in result.stderr


def test_the_official_langgraph_sdk_client(serve: Callable[..., Served]) -> None:
    from langgraph_sdk import get_client

    server = serve(["support.server_graphs:counter"], env={"SERVE_TEST_DELAY": "0.02"})

    async def main() -> None:
        client = get_client(url=server.url)
        thread = await client.threads.create(metadata={"via": "sdk"})
        tid = thread["thread_id"]
        parts = []
        run_id = None
        async for part in client.runs.stream(
            tid, "support.server_graphs:counter", input={"limit": 10}, stream_mode="values"
        ):
            if part.event == "metadata":
                run_id = part.data["run_id"]
                continue
            parts.append(part)
            if len(parts) == 3:
                break  # a disconnect
        assert run_id is not None and all(p.event == "values" for p in parts)
        last = parts[-1].id
        assert last is not None and last.startswith(f"{tid}:")
        rest = [p async for p in client.runs.join_stream(tid, run_id, last_event_id=last, stream_mode="values")]
        assert rest[-1].event == "end"
        values = [p.data["n"] for p in parts + rest if p.event == "values"]
        assert values == list(range(0, 11))  # every state once, in order, across the disconnect
        state = await client.threads.get_state(tid)
        assert state["values"]["n"] == 10 and state["next"] == []
        history = await client.threads.get_history(tid, limit=3)
        assert [h["values"]["n"] for h in history] == [10, 9, 8]
        got = await client.threads.get(tid)
        assert got["metadata"] == {"via": "sdk"} and got["status"] == "idle"
        await client.aclose()

    asyncio.run(main())


def test_readme_serve_and_curl_commands_run_as_written(tmp_path: Path) -> None:
    """The README's two commands: serve the demo graph, then watch a run with ``curl -N`` (on a free port)."""
    import os
    import re
    import shlex

    from support import REPO
    from support.serving import free_port

    readme = (REPO / "README.md").read_text()
    section = readme.split("## HTTP API and SSE streams", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None
    serve_line, curl_line = [line.split("  #")[0].strip() for line in block.group(1).strip().splitlines()]
    port = free_port()
    argv = shlex.split(serve_line)
    assert argv[:2] == ["graphckpt", "serve"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHCKPT_", "OPENAI_"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "graphckpt", *argv[1:], "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: _ok(port), 30, what="the demo server")
        curl = curl_line.replace("localhost:8123", f"127.0.0.1:{port}")
        out = subprocess.run(curl, shell=True, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "event: run.done" in out.stdout and out.stdout.rstrip().endswith("data: {}")
        assert "id: t1:4:1" in out.stdout  # the fourth step's task, by its durable id
        assert (tmp_path / "graphckpt.db").exists()
    finally:
        proc.terminate()
        proc.wait(20)


def _ok(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/ok", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_cors_is_off_unless_configured() -> None:
    from starlette.testclient import TestClient
    from support.server_graphs import counter

    from graphckpt.savers.memory import MemorySaver

    origin = {"Origin": "http://ui.example"}
    with TestClient(create_app(counter(), MemorySaver()), base_url="http://localhost") as client:
        assert "access-control-allow-origin" not in client.get("/ok", headers=origin).headers
    with TestClient(
        create_app(counter(), MemorySaver(), cors_origins=["http://ui.example"]), base_url="http://localhost"
    ) as client:
        assert client.get("/ok", headers=origin).headers["access-control-allow-origin"] == "http://ui.example"
        assert "access-control-allow-origin" not in client.get("/ok", headers={"Origin": "http://evil"}).headers


def test_tokens_from_a_file_and_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from graphckpt.server.auth import Tokens, api_id, store_id

    path = tmp_path / "tokens"
    path.write_text(TOKENS)
    monkeypatch.setenv("SERVE_TOKENS", "t3=gamma, t4=delta")
    tokens = Tokens.load(path, "SERVE_TOKENS")
    assert dict(tokens.namespaces) == {"token-a": "alpha", "token-b": "beta", "t3": "gamma", "t4": "delta"}
    path.write_text("lonely\n")
    with pytest.raises(ValueError, match="line 1: expected 'TOKEN NAMESPACE'"):
        Tokens.load(path)
    monkeypatch.setenv("SERVE_TOKENS", "t=a/b")
    with pytest.raises(ValueError, match="without '/'"):
        Tokens.load(None, "SERVE_TOKENS")
    assert not Tokens.load(None, "UNSET_VARIABLE_FOR_TEST")
    assert store_id("alpha", "x") == "alpha/x" and api_id("alpha", "alpha/x") == "x"
    assert api_id("alpha", "beta/x") is None and api_id("", "beta/x") == "beta/x"
