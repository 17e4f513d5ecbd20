"""``ctx.store`` inside the effect journal across a real crash: a child process SIGKILLed in the middle of a step
that read a counter and wrote it plus one is resumed by another process; the resumed task sees the first run's read
and does not repeat its write, so the counter ends at 1 (a store outside the journal would end at 2)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from support.audit_child import Proc
from support.store_child import NS

from graphckpt.items import ItemStore
from graphckpt.savers.sqlite import SqliteSaver

CHILD = Path(__file__).resolve().parents[1] / "support" / "store_child.py"


def _count(db: Path) -> int | None:
    async def read() -> int | None:
        async with SqliteSaver(str(db)) as saver:
            item = await ItemStore(saver).aget(NS, "visits")
            return None if item is None else int(item.value["n"])

    return asyncio.run(read())


def test_store_write_killed_mid_step_then_resumed_leaves_one_write(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    procs: list[Proc] = []
    try:
        first = Proc(db, "t1", {"STORE_KILL": "1"}, child=CHILD)
        procs.append(first)
        first.wait_for("in-node")
        assert _count(db) == 1  # the write reached the database before the kill
        first.kill()
        second = Proc(db, "t1", {}, child=CHILD)
        procs.append(second)
        assert second.wait_for("done") == "done done"
        assert second.finish() == 0
        assert _count(db) == 1  # the resumed task replayed the read (0) and the put: no second write
        third = Proc(db, "t2", {}, child=CHILD)  # a new thread does read and write: the store is shared
        procs.append(third)
        assert third.wait_for("done") == "done done"
        assert third.finish() == 0
        assert _count(db) == 2
    finally:
        for p in procs:
            p.close()
