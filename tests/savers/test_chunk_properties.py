"""Delta chunks against a store that never packs: random turns (multi-turn on done threads), failures resumed
through a fresh app, forks (no update, a plain update, a reducer update) at random steps, forks of forks, deletes of
fork sources and app restarts run once with ``CHUNK`` = 2 (and sometimes a tiny ``CHUNK_DELTA_MAX``) on a real
saver and once unpacked on a ``MemorySaver``; every checkpoint of every live thread must read the same (in
``history``, by step and as the head). Two nodes write the reducer channel in the same step."""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from support.postgres import require_postgres
from support.savers import open_saver

from graphckpt import END, START, NodeError, Saver, StateGraph, append, codec
from graphckpt.savers.memory import MemorySaver


class St(BaseModel):
    items: Annotated[list[str], append] = []
    n: int = 0
    stop: int = 0
    tag: str = ""


FAIL: set[tuple[str, int]] = set()


def make_app(saver: Saver, snapshot_every: int) -> Any:
    def a(s: St) -> dict[str, Any]:
        return {"items": [f"a{s.n}{s.tag}"]}

    def b(s: St) -> dict[str, Any]:
        return {"items": [f"b{s.n}"]}

    def c(s: St, ctx: Any) -> dict[str, Any]:
        key = (ctx.thread_id, s.n)
        if key in FAIL:
            FAIL.discard(key)
            raise RuntimeError("planned")
        return {"items": [f"c{s.n}"], "n": s.n + 1}

    g = StateGraph(St)
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_node("c", c)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("a", "c")
    g.add_edge("b", END)
    g.add_conditional_edges("c", lambda s: "a" if s.n < s.stop else END)
    return g.compile(saver=saver, recursion_limit=1000, snapshot_every=snapshot_every)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("turn"), st.integers(0, 3), st.integers(0, 4), st.booleans()),
        st.tuples(st.just("fork"), st.integers(0, 3), st.floats(0, 1), st.sampled_from(["none", "plain", "reducer"])),
        st.tuples(st.just("delete"), st.integers(0, 3)),
        st.tuples(st.just("reopen")),
    ),
    min_size=1,
    max_size=12,
)


async def until_done(app: Any, tid: str) -> None:
    for _ in range(5):
        try:
            await app.aresume(tid)
            return
        except NodeError:
            continue


async def play(
    saver: Saver, plan: list[Any], chunk: int, snapshot_every: int, fails: bool, delta_max: int = 8192
) -> dict[str, Any]:
    codec.CHUNK, codec.CHUNK_DELTA_MAX = chunk, delta_max
    app = make_app(saver, snapshot_every)
    threads: list[str] = []
    live: list[str] = []
    for op in plan:
        if op[0] == "turn":
            _, i, more, fail = op
            if i < len(live):
                tid = live[i]
                head = await app.aget_state(tid)
                n = head.values.n
            else:
                tid, n = f"t{len(threads)}", 0
                threads.append(tid)
                live.append(tid)
            if fail and fails and more:
                FAIL.add((tid, n + more - 1))
            try:
                await app.ainvoke({"stop": n + more, "items": [f"in{n}"]}, thread_id=tid)
            except NodeError:
                await until_done(app, tid)
        elif op[0] == "fork" and live:
            _, i, frac, kind = op
            src = live[i % len(live)]
            head = await app.aget_state(src)
            step = int(frac * head.step)
            update: dict[str, Any] = {"stop": head.values.n + 3}
            if kind == "plain":
                update["tag"] = f"x{step}"
            elif kind == "reducer":
                update["items"] = [f"f{step}"]
            tid = f"t{len(threads)}"
            threads.append(tid)
            live.append(tid)
            await app.afork(src, step=step, update=update, new_thread_id=tid)
            await until_done(app, tid)
        elif op[0] == "delete" and live:
            tid = live.pop(op[1] % len(live))
            gone = await app.adelete_thread(tid, cascade=True)  # its forks go too (issue 26)
            live[:] = [t for t in live if t not in gone]
        elif op[0] == "reopen":
            app = make_app(saver, snapshot_every)
    out: dict[str, Any] = {}
    for tid in live:
        hist = await app.ahistory(tid)
        out[tid] = [(s.step, s.values.model_dump()) for s in hist]
        for s in hist[:: max(1, len(hist) // 4)]:
            one = await app.aget_state(tid, step=s.step)
            assert one.values.model_dump() == s.values.model_dump(), (tid, s.step)
        head = await app.aget_state(tid)
        assert head.values.model_dump() == hist[0].values.model_dump()
    return out


def run(kind: str, plan: list[Any], snapshot_every: int, delta_max: int = 8192) -> None:
    try:
        FAIL.clear()
        ref = asyncio.run(play(MemorySaver(), plan, 10**9, snapshot_every, fails=False))
        with tempfile.TemporaryDirectory() as tmp:

            async def go() -> dict[str, Any]:
                schema = f"gc_test_{uuid.uuid4().hex[:12]}" if kind == "postgres" else None
                saver = await open_saver(kind, Path(tmp), schema)
                try:
                    async with saver:
                        return await play(saver, plan, 2, snapshot_every, fails=True, delta_max=delta_max)
                finally:
                    if schema is not None:
                        import psycopg
                        from support.postgres import PG_DSN

                        async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
                            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

            got = asyncio.run(go())
        assert got == ref
    finally:
        codec.CHUNK, codec.CHUNK_DELTA_MAX = 32, 8192
        FAIL.clear()


@settings(max_examples=80, deadline=None)
@given(
    plan=ops,
    snapshot_every=st.sampled_from([3, 5, 1000]),
    kind=st.sampled_from(["memory", "sqlite"]),
    delta_max=st.sampled_from([8192, 10]),  # 10: from n = 10 on, the two-item deltas keep their own rows
)
def test_chunked_equals_unpacked(plan: list[Any], snapshot_every: int, kind: str, delta_max: int) -> None:
    run(kind, plan, snapshot_every, delta_max)


@pytest.mark.postgres
@settings(max_examples=15, deadline=None)
@given(plan=ops, snapshot_every=st.sampled_from([3, 1000]))
def test_chunked_equals_unpacked_pg(plan: list[Any], snapshot_every: int) -> None:
    require_postgres()
    run("postgres", plan, snapshot_every)
