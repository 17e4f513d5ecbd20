"""Nothing strands, and ``graphckpt recover`` goes on: a plain run (``invoke``, no worker) that dies of a store error
keeps its lease (it is not released as if the thread were safe), so the thread shows ``crashed`` once the lease
expires and ``recover`` finishes it; ``recover --yes`` goes past a thread it cannot recover (no graph recorded) and
recovers the tagged ones after it, exiting 1 only at the end; a thread another process took meanwhile is reported
"skipped: taken by <owner>" and is no failure (exit 0)."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from support import store_fault_graph
from support.lease_cli import Cli
from support.postgres import PG_DSN, require_postgres
from support.waiting import wait_for

from graphckpt.errors import SaverError
from graphckpt.savers.postgres import PostgresSaver
from graphckpt.savers.sqlite import SqliteSaver

pytestmark = pytest.mark.slow
LEASE = 0.5


def _crash(cli: Cli, thread_id: str, gate: Path) -> None:
    """A ``graphckpt run`` of ``thread_id`` SIGKILLed inside its slow node (behind ``gate``), with a short lease."""
    reached = Path(f"{gate}.reached")
    before = len(reached.read_text().splitlines()) if reached.exists() else 0
    env = {"LEASE_GATE": str(gate)}
    proc = cli.start(
        "run", "support.lease_graph:graph", "--thread", thread_id, "-q", "--lease-seconds", str(LEASE), env=env
    )
    try:
        wait_for(lambda: reached.exists() and len(reached.read_text().splitlines()) > before, 30, what="the slow node")
    finally:
        proc.kill()
        proc.communicate()


def test_a_plain_run_dying_of_a_store_error_shows_crashed_and_recover_goes_past_an_untagged_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "faults.db"
    cli = Cli(tmp_path, str(db))
    gate = tmp_path / "gate"
    _crash(cli, "a", gate)
    _crash(cli, "b", gate)
    flag = tmp_path / "locked"
    env = {"STORE_FAULT_DB": str(db), "STORE_FAULT_FLAG": str(flag), "STORE_FAULT_HOLD": "1.5"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    cli.env.update(env)
    app = store_fault_graph.graph.compile(saver=SqliteSaver(str(db), busy_timeout=0.2), lease_seconds=LEASE)
    try:
        with pytest.raises(SaverError, match="locked"):
            app.invoke({}, thread_id="plain")  # its first step's commit waits 0.2 s for a lock another process holds
        held = app.thread("plain")
        assert held.status == "running" and held.lease is not None  # not released: the thread is not known safe
        for holder in store_fault_graph.HOLDERS:
            holder.communicate(timeout=30)
        wait_for(lambda: app.thread("plain").status == "crashed", 30, what="the plain thread to show crashed")
    finally:
        app.close()
    wait_for(lambda: cli.thread("a")["status"] == cli.thread("b")["status"] == "crashed", 30, what="a and b crashed")
    gate.touch()

    first = cli.run("recover", "--yes")  # "plain" records no graph: reported, and the others still recovered
    assert first.returncode == 1, (first.stdout, first.stderr)
    assert "thread plain: not recovered: cannot recover thread 'plain': it records no graph" in first.stdout
    assert "thread a: done at step 3" in first.stdout and "thread b: done at step 3" in first.stdout, first.stdout
    assert "1 crashed thread could not be recovered" in first.stderr

    second = cli.run("recover", "--yes", "--graph", "support.store_fault_graph:graph")
    assert second.returncode == 0, (second.stdout, second.stderr)
    assert "thread plain: done at step 2" in second.stdout, second.stdout
    app = store_fault_graph.graph.compile(saver=SqliteSaver(str(db)))
    try:
        assert app.get_state("plain").values.done == ["lock", "count after 1"]  # as an uninterrupted run
    finally:
        app.close()
    assert {t: cli.thread(t)["status"] for t in ("a", "b", "plain")} == dict.fromkeys(("a", "b", "plain"), "done")


def test_a_plain_run_whose_postgres_connection_drops_keeps_its_lease_and_recover_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit fails on a terminated connection, and the very next statement would succeed: the run must still
    not release its lease (that left the thread ``running`` with no owner, invisible to recovery, for ever)."""
    require_postgres()
    schema, name = f"gc_plain_{uuid.uuid4().hex[:12]}", f"gc-plain-{uuid.uuid4().hex[:12]}"
    env = {"STORE_FAULT_FLAG": str(tmp_path / "dropped"), "STORE_FAULT_PG_APP": name, "STORE_FAULT_PG_DSN": PG_DSN}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    saver = PostgresSaver(f"{PG_DSN}?application_name={name}", schema=schema)
    app = store_fault_graph.graph.compile(saver=saver, lease_seconds=LEASE)
    try:
        with pytest.raises(SaverError, match=r"terminat|connection"):
            app.invoke({}, thread_id="plain")
        held = app.thread("plain")
        assert held.status in ("running", "crashed") and held.lease is not None, held  # not released
        wait_for(lambda: app.thread("plain").status == "crashed", 30, what="the plain thread to show crashed")
        [result] = app.recover(["plain"])
        assert result.snapshot is not None and result.snapshot.status == "done", result
        assert app.get_state("plain").values.done == ["lock", "count after 1"]
    finally:
        app.close()
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_recover_reports_a_thread_another_process_took_as_skipped_and_exits_0(tmp_path: Path) -> None:
    cli = Cli(tmp_path, str(tmp_path / "skip.db"))
    gate = tmp_path / "gate"
    _crash(cli, "a", gate)
    _crash(cli, "b", gate)
    wait_for(lambda: cli.thread("a")["status"] == cli.thread("b")["status"] == "crashed", 30, what="a and b crashed")
    first_gate, other_gate = tmp_path / "gate-recover", tmp_path / "gate-other"
    recovering = cli.start("recover", "--yes", env={"LEASE_GATE": str(first_gate)})
    other = None
    try:
        reached = Path(f"{first_gate}.reached")
        wait_for(reached.exists, 60, what="recover to be running its first thread")
        out = recovering.stdout.readline() if recovering.stdout else ""
        [first] = [t for t in ("a", "b") if f"thread {t}:" in out]
        second = "b" if first == "a" else "a"
        other = cli.start("resume", second, "-q", env={"LEASE_GATE": str(other_gate)})  # takes it, and holds it
        wait_for(Path(f"{other_gate}.reached").exists, 60, what="the other process to hold the second thread")
        first_gate.touch()
        stdout, stderr = recovering.communicate(timeout=60)
        assert recovering.returncode == 0, (stdout, stderr)
        assert f"thread {first}: done at step 3" in stdout, stdout
        assert f"thread {second}: skipped: taken by worker " in stdout and "pid" in stdout, stdout
        other_gate.touch()
        _, err = other.communicate(timeout=60)
        assert other.returncode == 0, err
    finally:
        for proc in (recovering, other):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert cli.thread("a")["status"] == cli.thread("b")["status"] == "done"
