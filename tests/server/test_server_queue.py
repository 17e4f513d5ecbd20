"""The server over the durable run queue: runs executed by a separate ``graphckpt worker`` process (``serve
--no-workers``) and streamed by the server, run records that survive a restart, and cancel (queued and running)."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

pytest.importorskip("starlette")
pytest.importorskip("sse_starlette")
pytest.importorskip("uvicorn")

from support.serving import Served, durable, read_events, wait_for


def _worker(server: Served, graph: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "graphckpt", "--db", server.db, "worker", "--graph", graph]
    with open(server.tmp_path / "worker.log", "ab") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(argv, env=server.env, stdout=log, stderr=subprocess.STDOUT, cwd=server.tmp_path)


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            raise AssertionError("the worker did not exit within 20 s of SIGTERM") from None
    return int(proc.returncode)


def _db(tmp_path: Path, store: str, request: pytest.FixtureRequest) -> str:
    if store == "postgres":
        schema = request.getfixturevalue("pg_schema_name")
        return f"postgresql://postgres@127.0.0.1:5432/test?schema={schema}"
    return str(tmp_path / "shared.db")


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_no_workers_a_separate_worker_process_runs_it_and_the_server_streams_it(
    serve: Callable[..., Served], tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    server = serve(
        ["support.server_graphs:counter"],
        args=["--no-workers"],
        env={"SERVE_TEST_DELAY": "0.02"},
        db=_db(tmp_path, store, request),
    )
    with httpx.Client(base_url=server.url, timeout=30) as c:
        c.post("/threads", json={"thread_id": "w", "metadata": {"owner": "ann"}}).raise_for_status()
        run = c.post("/threads/w/runs", json={"input": {"limit": 5}}).json()
        assert c.get(f"/threads/w/runs/{run['run_id']}").json()["status"] == "pending"  # nobody here runs it
        worker = _worker(server, "support.server_graphs:counter")
        try:
            events = read_events(c, f"/threads/w/runs/{run['run_id']}/stream")
            kinds = [k for _, k, _ in durable(events)]
            assert events[-1][1] == "end" and kinds[-1] == "run.done"
            assert kinds.count("task.finished") == 5
            got = c.get(f"/threads/w/runs/{run['run_id']}").json()
            assert got["status"] == "success"
            assert c.get("/threads/w/state").json()["values"]["n"] == 5
            thread = c.get("/threads/w").json()
            assert thread["metadata"] == {"owner": "ann"}  # the thread created here kept its metadata over there
            c.patch("/threads/w", json={"metadata": {"team": "x"}}).raise_for_status()
            again = c.post("/threads/w/runs/wait", json={"input": {"limit": 7}})
            assert again.status_code == 200 and again.json()["n"] == 7
            assert c.get("/threads/w").json()["metadata"] == {"owner": "ann", "team": "x"}  # merged, not replaced
        finally:
            assert _stop(worker) == 0


def test_run_records_and_created_threads_survive_a_restart(serve: Callable[..., Served]) -> None:
    first = serve(["support.server_graphs:counter"])
    with httpx.Client(base_url=first.url, timeout=30) as c:
        c.post("/threads/a/runs/wait", json={"input": {"limit": 3}}).raise_for_status()
        c.post("/threads/a/runs/wait", json={"input": {"limit": 5}}).raise_for_status()
        before = c.get("/threads/a/runs").json()
        assert [r["status"] for r in before] == ["success", "success"]
        c.post("/threads", json={"thread_id": "fresh", "metadata": {"kept": True}}).raise_for_status()
    assert first.stop() in (0, -15)
    second = serve(["support.server_graphs:counter"], db=first.db)
    with httpx.Client(base_url=second.url, timeout=30) as c:
        after = c.get("/threads/a/runs").json()
        assert [(r["run_id"], r["status"]) for r in after] == [(r["run_id"], r["status"]) for r in before]
        one = c.get(f"/threads/a/runs/{before[1]['run_id']}")
        assert one.status_code == 200 and one.json()["status"] == "success"
        assert c.get(f"/threads/a/runs/{before[0]['run_id']}/join").json()["n"] == 5
        fresh = c.get("/threads/fresh")
        assert fresh.status_code == 200 and fresh.json()["metadata"] == {"kept": True}
        assert c.post("/threads/fresh/runs/wait", json={"input": {"limit": 2}}).json()["n"] == 2
        assert c.get("/threads/fresh").json()["metadata"] == {"kept": True}


def test_cancel_a_queued_and_a_running_run(serve: Callable[..., Served]) -> None:
    server = serve(["support.server_graphs:counter"], env={"SERVE_TEST_DELAY": "0.05"})
    with httpx.Client(base_url=server.url, timeout=30) as c:
        slow = c.post("/threads/s/runs", json={"input": {"limit": 400}}).json()
        behind = c.post("/threads/s/runs", json={"input": {"limit": 1}, "multitask_strategy": "enqueue"}).json()
        assert c.post(f"/threads/s/runs/{behind['run_id']}/cancel").json()["status"] == "cancelled"
        wait_for(lambda: c.get("/threads/s").json().get("head") is not None, 10, what="a first step")
        cancelled = c.post(f"/threads/s/runs/{slow['run_id']}/cancel").json()
        assert cancelled["status"] == "cancelled"
        joined = read_events(c, f"/threads/s/runs/{slow['run_id']}/stream")  # a cancelled run's stream ends
        assert joined[-1][1] == "end" and durable(joined)[0][1] == "run.started"
        assert c.get(f"/threads/s/runs/{slow['run_id']}").json()["status"] == "cancelled"
        state = c.get("/threads/s/state").json()
        assert state["values"]["n"] < 400
        assert c.get("/threads/s").json()["graphckpt_status"] == "running"  # stopped, nobody on it, not recovered
        other = c.post("/threads/t/runs/wait", json={"input": {"limit": 2}})  # the worker is free again
        assert other.status_code == 200 and other.json()["n"] == 2
        assert c.get(f"/threads/s/runs/{slow['run_id']}").json()["status"] == "cancelled"


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_cancel_of_a_run_a_separate_worker_runs(
    serve: Callable[..., Served], tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    server = serve(
        ["support.server_graphs:counter"],
        args=["--no-workers"],
        env={"SERVE_TEST_DELAY": "0.05"},
        db=_db(tmp_path, store, request),
    )
    with httpx.Client(base_url=server.url, timeout=30) as c:
        run = c.post("/threads/x/runs", json={"input": {"limit": 400}}).json()
        worker = _worker(server, "support.server_graphs:counter")
        try:
            wait_for(
                lambda: c.get(f"/threads/x/runs/{run['run_id']}").json()["status"] == "running",
                20,
                what="the worker's claim",
            )
            cancelled = c.post(f"/threads/x/runs/{run['run_id']}/cancel")
            assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
            n = c.get("/threads/x/state").json()["values"]["n"]
            assert n < 400
            other = c.post("/threads/y/runs/wait", json={"input": {"limit": 2}})  # the worker goes on with others
            assert other.status_code == 200 and other.json()["n"] == 2
            assert c.get("/threads/x/state").json()["values"]["n"] == n  # x stopped for good
            assert c.get("/threads/x").json()["graphckpt_status"] == "running"  # nobody on it: not recovered
        finally:
            assert _stop(worker) == 0
        assert c.get(f"/threads/x/runs/{run['run_id']}").json()["status"] == "cancelled"


def test_a_run_shows_its_metadata_strategy_and_stream_after_the_server_was_killed(
    serve: Callable[..., Served],
) -> None:
    first = serve(["support.server_graphs:counter"])
    with httpx.Client(base_url=first.url, timeout=30) as c:
        one = c.post("/threads/a/runs", json={"input": {"limit": 3}, "metadata": {"by": "ann", "n": [1, 2]}}).json()
        two = c.post(
            "/threads/a/runs", json={"input": {"limit": 5}, "multitask_strategy": "enqueue", "metadata": {"by": "bob"}}
        ).json()
        assert (one["multitask_strategy"], two["multitask_strategy"]) == ("reject", "enqueue")
        c.get(f"/threads/a/runs/{two['run_id']}/join").raise_for_status()
        uncut = read_events(c, f"/threads/a/runs/{one['run_id']}/stream")
    first.kill()  # SIGKILL: nothing of this process's memory survives
    second = serve(["support.server_graphs:counter"], db=first.db)
    with httpx.Client(base_url=second.url, timeout=30) as c:
        for created in (one, two):
            got = c.get(f"/threads/a/runs/{created['run_id']}").json()
            assert (got["metadata"], got["multitask_strategy"], got["status"]) == (
                created["metadata"],
                created["multitask_strategy"],
                "success",
            )
        listed = {r["run_id"]: r["metadata"] for r in c.get("/threads/a/runs").json()}
        assert listed == {one["run_id"]: {"by": "ann", "n": [1, 2]}, two["run_id"]: {"by": "bob"}}
        again = read_events(c, f"/threads/a/runs/{one['run_id']}/stream")  # from the run's start, no Last-Event-ID
        assert durable(again) == durable(uncut) and durable(again)[0][1] == "run.started"
        second_run = durable(read_events(c, f"/threads/a/runs/{two['run_id']}/stream"))
        assert second_run[-1][1] == "run.done"


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_recursion_limit_ends_the_run_in_error_also_in_a_separate_worker(
    serve: Callable[..., Served], tmp_path: Path, store: str, request: pytest.FixtureRequest
) -> None:
    server = serve(["support.server_graphs:counter"], args=["--no-workers"], db=_db(tmp_path, store, request))
    with httpx.Client(base_url=server.url, timeout=30) as c:
        limited = c.post("/threads/r/runs", json={"input": {"limit": 10}, "recursion_limit": 3}).json()
        free = c.post("/threads/f/runs", json={"input": {"limit": 10}}).json()
        worker = _worker(server, "support.server_graphs:counter")
        try:
            ended = c.get(f"/threads/r/runs/{limited['run_id']}/join")
            assert ended.status_code == 200
            got = c.get(f"/threads/r/runs/{limited['run_id']}").json()
            assert got["status"] == "error" and got["error"].startswith("RecursionLimitError: ")
            assert "recursion_limit=3" in got["error"]
            assert c.get("/threads/r/state").json()["values"]["n"] < 10
            assert c.get(f"/threads/f/runs/{free['run_id']}/join").json()["n"] == 10  # no limit: the app's (25)
        finally:
            assert _stop(worker) == 0


def test_a_recursion_limit_in_the_servers_own_worker(serve: Callable[..., Served]) -> None:
    server = serve(["support.server_graphs:counter"])
    with httpx.Client(base_url=server.url, timeout=30) as c:
        run = c.post("/threads/r/runs", json={"input": {"limit": 10}, "recursion_limit": 3}).json()
        c.get(f"/threads/r/runs/{run['run_id']}/join").raise_for_status()
        got = c.get(f"/threads/r/runs/{run['run_id']}").json()
        assert got["status"] == "error" and "RecursionLimitError" in got["error"]
        bad = c.post("/threads/r2/runs", json={"input": {"limit": 10}, "recursion_limit": 0})
        assert bad.status_code == 422 and "recursion_limit" in bad.text
