"""Recovery strategies with real processes on one SQLite file: SIGKILLed runs show as ``crashed`` within one lease
length; ``graphckpt recover`` on a terminal (a pty) describes each and asks, a "no" leaves the thread untouched and
a "y" finishes it; ``graphckpt recover --yes`` finishes the rest; the API's ``crashed()``/``recover()`` do the same.
"""

from __future__ import annotations

import json
import os
import pty
import sys
import time
from pathlib import Path

import pytest
from support.lease_cli import Cli
from support.lease_graph import graph
from support.waiting import wait_for

from graphckpt.savers.sqlite import SqliteSaver

pytestmark = pytest.mark.slow


LEASE = 0.5


def _crash(cli: Cli, thread_id: str) -> float:
    """A run of ``thread_id`` SIGKILLed inside its slow node, with a short lease; when it was killed."""
    before = cli.reached()
    proc = cli.start("run", "support.lease_graph:graph", "--thread", thread_id, "-q", "--lease-seconds", str(LEASE))
    try:
        wait_for(lambda: cli.reached() == before + 1, 30, what=f"{thread_id} to reach the slow node")
    finally:
        proc.kill()
        proc.communicate()
    return time.monotonic()


def _shows_crashed_within_a_lease(cli: Cli, thread_id: str, killed: float) -> None:
    """Every read that began a lease length (and a second of slack) after the kill shows the thread ``crashed``.
    Bounded by the reads' start times, not their duration: a CLI start takes seconds on a loaded machine."""
    reads: list[tuple[float, object]] = []

    def crashed() -> bool:
        began = time.monotonic()
        reads.append((began, cli.thread(thread_id)["status"]))
        return reads[-1][1] == "crashed"

    wait_for(crashed, 60, what=f"{thread_id} to show as crashed")
    late = [(round(began - killed, 2), status) for began, status in reads if began > killed + LEASE + 1.0]
    assert all(status == "crashed" for _, status in late), late


def _pty_run(cli: Cli, args: list[str], answers: dict[bytes, bytes], timeout: float = 60) -> tuple[int, str]:
    """``graphckpt ARGS`` on a pty, answering each prompt that follows a line holding a key of ``answers``."""
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.chdir(cli.cwd)
            os.execve(sys.executable, [sys.executable, "-m", "graphckpt.cli", *args, "--db", cli.db], cli.env)
        finally:
            os._exit(127)
    output, answered, deadline = b"", 0, time.monotonic() + timeout
    try:
        while True:
            assert time.monotonic() < deadline, output.decode(errors="replace")
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
            while output.count(b"continue it? [y/N]") > answered:
                asked = output.split(b"continue it? [y/N]")[answered]
                reply = next((a for key, a in answers.items() if key in asked.splitlines()[-1]), b"n")
                os.write(fd, reply + b"\n")
                answered += 1
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status), output.decode(errors="replace")
    finally:
        os.close(fd)


def test_crashed_threads_are_listed_and_recovered_as_a_person_chooses(tmp_path: Path) -> None:
    cli = Cli(tmp_path, str(tmp_path / "recover.db"))
    _crash(cli, "keep")
    _shows_crashed_within_a_lease(cli, "go", _crash(cli, "go"))
    crashed = json.loads(cli.run("threads", "--status", "crashed", "--json").stdout)
    assert sorted(t["thread_id"] for t in crashed) == ["go", "keep"]
    head_before = cli.thread("keep")["head"]
    cli.gate.touch()

    no_tty = cli.run("recover")
    assert no_tty.returncode == 2 and "pass --yes" in no_tty.stderr

    code, out = _pty_run(cli, ["recover"], {b"thread go:": b"y", b"thread keep:": b"n"})
    assert code == 0, out
    assert "crashed at step 1 running wait" in out and "last heard from" in out, out
    assert "thread keep: left as it is" in out and "thread go: done at step 3" in out, out
    keep = cli.thread("keep")
    assert (keep["status"], keep["head"]) == ("crashed", head_before)  # "no": untouched
    assert cli.thread("go")["status"] == "done"

    yes = cli.run("recover", "--yes")
    assert yes.returncode == 0, yes.stderr
    assert cli.thread("keep")["status"] == "done"
    assert cli.effects() == {"first:once": 2, "wait:before": 2, "wait:after": 2, "last:once": 2}
    assert "no crashed threads" in cli.run("recover", "--yes").stdout


def test_the_api_lists_crashed_threads_and_continues_the_chosen_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli = Cli(tmp_path, str(tmp_path / "api.db"))
    _crash(cli, "a")
    _shows_crashed_within_a_lease(cli, "b", _crash(cli, "b"))
    cli.gate.touch()
    monkeypatch.setenv("LEASE_SIDE", str(cli.side))
    monkeypatch.setenv("LEASE_GATE", str(cli.gate))
    app = graph.compile(saver=SqliteSaver(cli.db))
    try:
        found = {c.thread_id: c for c in app.crashed()}
        assert set(found) == {"a", "b"}
        assert (
            found["a"].running == ("wait",) and found["a"].step == 1 and found["a"].graph == "support.lease_graph:graph"
        )
        [result] = app.recover(["a"])
        assert result.snapshot is not None and result.snapshot.status == "done"
        assert [c.thread_id for c in app.crashed()] == ["b"]
    finally:
        app.close()
