"""``bench/scale_fill.py`` (the scale benchmark's fast fill): threads copied from engine-written templates read
exactly as the engine's own threads do (values at the head and in the past, history, metadata, events), in
creation order ``i``, and the engine goes on with them (a resume, a fork). On SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import REPO
from support.postgres import PG_DSN

from graphckpt.savers.postgres import PostgresSaver
from graphckpt.savers.sqlite import SqliteSaver

pytest.importorskip("psycopg")


def _bench() -> tuple[Any, Any]:
    import sys

    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from bench import scale, scale_fill

    return scale, scale_fill


async def _check(open_saver: Any, fill: Any) -> None:
    scale, scale_fill = _bench()
    app = scale.graph().compile(saver=open_saver())
    await scale.build(app, scale_fill.TEMPLATES)
    engine = {t: await app.aget_state(t) for t in ("th000003", "th000007")}
    await app.aclose()
    fill(40)
    app = scale.graph().compile(saver=open_saver())
    try:
        for t in ("th000013", "th000037"):
            head, template = await app.aget_state(t), engine["th00000" + t[-1]]
            assert head.values == template.values and head.step == 9 and head.status == "done"
            assert head.metadata["tags"] == {"graph": scale.GRAPH, "metadata": {"team": f"t{t[-1]}"}}
            assert (await app.aget_state(t, step=3)).values["log"] == template.values["log"][:3]
            history = await app.ahistory(t)
            assert [s.step for s in history] == list(range(9, -1, -1)) and {s.thread_id for s in history} == {t}
            assert len({s.checkpoint_id for s in history}) == 10
            assert history[0].checkpoint_id not in {s.checkpoint_id for s in await app.ahistory(template.thread_id)}
            kinds = [e.kind for e in await app.saver.read_events([(t, 0, 10)], after=(-1, -1), limit=100)]
            assert kinds[0] == "run.started" and kinds.count("checkpoint") == 10
        page = await app.athreads(limit=40)
        copies = [i.thread_id for i in page if i.thread_id >= "th000010"]
        assert copies == sorted(copies, reverse=True) and len(page) == 40  # newest created first: i order
        assert (await app.ainvoke({"limit": 10}, thread_id="th000021")).values["n"] == 10
        fork = await app.afork("th000022", step=3, new_thread_id="fork-22")
        assert fork.values["n"] == 3 and (await app.aresume("fork-22")).values["n"] == 9
    finally:
        await app.aclose()


async def test_a_sqlite_store_filled_by_copies_reads_as_the_engine_wrote_it(tmp_path: Path) -> None:
    _, scale_fill = _bench()
    db = str(tmp_path / "fill.db")
    await _check(lambda: SqliteSaver(db), lambda n: scale_fill.fill_sqlite(db, n, progress=lambda _: None))


async def test_a_postgres_store_filled_by_copies_reads_as_the_engine_wrote_it(pg_schema: str) -> None:
    _, scale_fill = _bench()
    await _check(
        lambda: PostgresSaver(PG_DSN, schema=pg_schema),
        lambda n: scale_fill.fill_postgres(PG_DSN, pg_schema, n, progress=lambda _: None),
    )
