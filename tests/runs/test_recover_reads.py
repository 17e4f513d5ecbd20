"""``graphckpt recover`` reads each crashed thread once (issue 25): the list of crashed threads is one query, each
thread is described from the row that list returned and one read of its head checkpoint and of each lineage
segment's other checkpoints; then ``resume`` takes it over (its own read of the row and the head). Counted on a
real SQLite file by spying on the saver's read methods (each call goes through to the real method)."""

from __future__ import annotations

import collections
import functools
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from graphckpt import ids
from graphckpt.cli import main
from graphckpt.savers._owners import host, identity
from graphckpt.savers.base import Owner
from graphckpt.savers.sqlite import SqliteSaver

GRAPH = "bench.scale_graph:graph"  # the repository root is on sys.path (the tests' PYTHONPATH)
READS = ("get_thread", "get_checkpoint", "get_thread_and_checkpoint", "list_checkpoints", "get_blobs", "list_threads")


def _dead_owner() -> Owner:
    """A process of this host that ran and was SIGKILLed: a lease naming it is dead at once."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    who = Owner("dead-worker", host(), child.pid, identity(child.pid))
    child.kill()
    child.wait()
    return who


async def _crashed_threads(db: Path) -> dict[str, int]:
    """Three crashed threads (two of three checkpoints, a fork of one of them); their lineage segments."""
    from bench.scale_graph import graph

    saver = SqliteSaver(db)
    app = graph().compile(saver=saver, interrupt_before=["tick"])  # stops before each tick: a frontier to run
    try:
        for t in ("c0", "c1"):
            await app.ainvoke({"n": 0, "limit": 3}, thread_id=t, tags={"graph": GRAPH})
            for _ in range(2):
                await app.aresume(t)
        await app.afork("c0", step=1, new_thread_id="c0-fork")
        dead = _dead_owner()
        for t in ("c0", "c1", "c0-fork"):
            r = await saver.get_thread(t)
            assert r is not None
            lease_until = ids.now() + 30
            await saver.claim(
                t, expected_head=r.head_checkpoint_id, expected_run_id=r.run_id, run_id=ids.new_id(), owner=dead,
                lease_until=lease_until,
            )  # fmt: skip
        assert {r.thread_id for r in await saver.list_threads(status="crashed")} == {"c0", "c1", "c0-fork"}
    finally:
        await app.aclose()
    return {"c0": 1, "c1": 1, "c0-fork": 2}


def test_recover_reads_each_crashed_thread_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    db = tmp_path / "r.db"
    segments = asyncio.run(_crashed_threads(db))
    calls: collections.Counter[tuple[str, str]] = collections.Counter()

    def spy(name: str, real: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(real)
        async def counted(self: SqliteSaver, *args: Any, **kwargs: Any) -> Any:
            calls[(name, str(args[0]) if args and name != "get_blobs" else "")] += 1
            return await real(self, *args, **kwargs)

        return counted

    for name in READS:
        monkeypatch.setattr(SqliteSaver, name, spy(name, getattr(SqliteSaver, name)))
    assert main(["--db", str(db), "recover", "--yes"]) == 0
    out = capsys.readouterr().out
    assert out.count(": done at step") == 3 and "not recovered" not in out, out
    assert calls[("list_threads", "")] == 1  # one query lists every crashed thread, with its row
    for t in segments:
        # the row: once, by resume's take-over (the description uses the listed row)
        assert calls[("get_thread", t)] + calls[("get_thread_and_checkpoint", t)] == 1, (t, calls)
        assert calls[("get_checkpoint", t)] == 2, (t, calls)  # the head: described once, loaded once by resume
    # the lineage (metadata only) once per segment: c0 and c1 their own, the fork its own and c0's up to the fork
    assert calls[("list_checkpoints", "c1")] == 1 and calls[("list_checkpoints", "c0-fork")] <= 1
    assert calls[("list_checkpoints", "c0")] == 2  # c0's own segment and the fork's ancestor segment
