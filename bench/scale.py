"""Scale: does every per-thread read and every first page cost the same at 1,000 threads as at 100,000?

    python bench/scale.py --quick                       # SQLite and PostgreSQL, 1k and 10k threads
    python bench/scale.py                               # SQLite 1k / 20k, PostgreSQL 1k / 100k (long)
    python bench/scale.py --savers sqlite --sizes 1000,5000 --reps 7 --no-write

Each store is filled by the engine itself: N threads of the graph ``bench.scale_graph:graph`` run to 10 checkpoints
each by ``App.ainvoke`` (16 runs at a time), tagged with a graph and ``{"team": "t<i % 10>"}`` metadata. Then each
operation is timed ``--reps`` times (median; each repetition on another thread): ``get_state`` of the head and of
step 3, the first page of ``history``, the first page of ``threads`` (no filter, ``status="done"``, a metadata filter
matching a tenth), one more step of a done thread, a fork at step 3, ``POST /threads/search`` (``limit`` 10, and
with a metadata filter) and the UI's thread list and thread page against a real ``graphckpt serve`` on the same
store, and on the smallest store the recovery sweep (``requeue_expired``) and a queue claim with 100 and then
10,000 queued runs. It prints medians and the ratio big / small, and writes its section of bench/RESULTS.md between
``<!-- scale:begin -->`` and ``<!-- scale:end -->`` (the rest of the file is left as it is).

Run against a checkout without paged threads (``page_threads``), the first pages are what its callers did: every
thread read, the first 50 kept (so the same script measures before and after).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.scale_fill import TEMPLATES, fill_postgres, fill_sqlite  # noqa: E402
from bench.scale_graph import graph  # noqa: E402
from bench.server import Server, _drop  # noqa: E402
from graphckpt import ids  # noqa: E402
from graphckpt.savers.base import Owner, Saver, metadata_matches  # noqa: E402
from graphckpt.savers.queue import RunRecord  # noqa: E402

PG = "postgresql://postgres@127.0.0.1:5432/test"
GRAPH = "bench.scale_graph:graph"
BEGIN, END_MARK = "<!-- scale:begin -->", "<!-- scale:end -->"
Timing = Callable[[int], Awaitable[Any]]


def tags(i: int) -> dict[str, Any]:
    return {"graph": GRAPH, "metadata": {"team": f"t{i % 10}"}}


def open_saver(kind: str, where: str) -> Saver:
    if kind == "sqlite":
        from graphckpt.savers.sqlite import SqliteSaver

        return SqliteSaver(where)
    from graphckpt.savers.postgres import PostgresSaver

    return PostgresSaver(PG, schema=where, pool_max=8)


async def build(app: Any, n: int, start: int = 0) -> float:
    """Threads ``start`` .. ``n - 1``, 10 checkpoints each, 16 runs at a time; seconds taken."""
    t0 = time.perf_counter()
    todo = iter(range(start, n))

    async def worker() -> None:
        for i in todo:
            await app.ainvoke({"n": 0, "limit": 9}, thread_id=f"th{i:06d}", tags=tags(i))

    await asyncio.gather(*(worker() for _ in range(16)))
    return time.perf_counter() - t0


async def timed(op: Timing, reps: int) -> float:
    """Median milliseconds of ``reps`` calls (after one warm-up call)."""
    await op(-1)
    times = []
    for rep in range(reps):
        t0 = time.perf_counter()
        await op(rep)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


async def first_page(app: Any, status: str | None = None) -> list[Any]:
    try:
        return list(await app.athreads(status, limit=50))
    except TypeError:  # a checkout without pages: every thread, then the first 50
        return list(await app.athreads(status))[:50]


async def metadata_page(saver: Saver, team: str) -> list[Any]:
    wanted = {"tags": {"graph": GRAPH, "metadata": {"team": team}}}
    if hasattr(saver, "page_threads"):
        return list((await saver.page_threads(limit=50, metadata=wanted)).threads)
    return [r for r in await saver.list_threads() if metadata_matches(r.metadata, wanted)][:50]


async def operations(app: Any, n: int, reps: int, url: str) -> dict[str, float]:
    saver = app.saver
    rng = random.Random(n)
    sample = [f"th{i:06d}" for i in rng.sample(range(n), 4 * (reps + 1))]
    pick = iter(sample)

    def one(_: int) -> str:
        return next(pick)

    out: dict[str, float] = {}
    out["get_state head"] = await timed(lambda r: app.aget_state(one(r)), reps)
    out["get_state step 3"] = await timed(lambda r: app.aget_state(one(r), step=3), reps)
    out["history first page (10)"] = await timed(lambda r: app.ahistory(one(r), limit=10), reps)
    out["threads first page (50)"] = await timed(lambda r: first_page(app), reps)
    out["threads first page, status done"] = await timed(lambda r: first_page(app, "done"), reps)
    out["threads first page, metadata filter"] = await timed(lambda r: metadata_page(saver, "t3"), reps)
    out["resume: one more step of a done thread"] = await timed(
        lambda r: app.ainvoke({"limit": 10}, thread_id=one(r)), reps
    )
    out["fork at step 3"] = await timed(
        lambda r: app.afork(sample[r + 1], step=3, new_thread_id=f"fork-{r}-{os.getpid()}"), reps
    )
    async with httpx.AsyncClient(base_url=url, timeout=600) as c:

        async def search(body: dict[str, Any]) -> None:
            (await c.post("/threads/search", json=body)).raise_for_status()

        async def get(path: str) -> None:
            (await c.get(path)).raise_for_status()

        out["POST /threads/search {limit: 10}"] = await timed(lambda r: search({"limit": 10}), reps)
        out["POST /threads/search, metadata filter"] = await timed(
            lambda r: search({"limit": 10, "metadata": {"team": "t3"}}), reps
        )
        out["UI thread list"] = await timed(lambda r: get("/ui/"), reps)
        out["UI thread page"] = await timed(lambda r: get(f"/ui/threads/{sample[r + 1]}"), reps)
    return out


async def queue_ops(saver: Saver, reps: int) -> dict[str, float]:
    """The sweep and a claim (put back after each) with 100, then 10,000 queued runs."""
    out: dict[str, float] = {}
    owner = Owner("bench-scale", "localhost", os.getpid())
    queued = 0
    for size in (100, 10_000):
        while queued < size:
            run = RunRecord(ids.new_id(), f"q{queued:06d}", "input", "queued", graph=GRAPH, created_at=time.time())
            await saver.enqueue_run(run, reject_busy=False)
            queued += 1

        async def claim(_: int) -> None:
            got = await saver.claim_run(owner, graphs=[GRAPH], fence="f", lease_until=time.time() + 60)
            assert got is not None
            await saver.finish_run(got.run_id, fence="f", status="queued")

        out[f"recovery sweep, {size:,} queued"] = await timed(lambda r: saver.requeue_expired(time.time()), reps)
        out[f"queue claim, {size:,} queued"] = await timed(claim, reps)
    return out


async def measure(
    kind: str, n: int, reps: int, tmp: Path, queue: bool, fill: str = "copy"
) -> tuple[dict[str, float], float]:
    where = str(tmp / f"scale{n}.db") if kind == "sqlite" else f"bench_scale_{n}_{os.getpid()}"
    if kind == "postgres":
        _drop(where)
    app = graph().compile(saver=open_saver(kind, where))
    try:
        if fill == "engine":
            built = await build(app, n)
        else:  # the engine writes the templates, the rest are copies of their rows (bench/scale_fill.py)
            built = await build(app, TEMPLATES)
            await app.aclose()
            if kind == "sqlite":
                built += await asyncio.to_thread(fill_sqlite, where, n)
            else:
                built += await asyncio.to_thread(fill_postgres, PG, where, n)
            app = graph().compile(saver=open_saver(kind, where))
        print(f"{kind} {n:,} threads built in {built:.0f} s ({fill})", flush=True)
        db = where if kind == "sqlite" else f"{PG}?schema={where}"
        server = await asyncio.to_thread(Server, db, tmp, GRAPH)
        try:
            out = await operations(app, n, reps, server.url)
        finally:
            server.stop()
        if queue:
            out |= await queue_ops(app.saver, reps)
        return out, built
    finally:
        await app.aclose()
        if kind == "postgres":
            _drop(where)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--savers", default="sqlite,postgres")
    parser.add_argument("--quick", action="store_true", help="1k and 10k threads on both savers")
    parser.add_argument("--sizes", help="N1,N2 for every saver (overrides the defaults)")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument(
        "--fill",
        choices=("copy", "engine"),
        default="copy",
        help="copy: the engine writes 10 threads, the rest are copies of their rows (bench/scale_fill.py); "
        "engine: every thread by App.ainvoke (hours at 100k)",
    )
    parser.add_argument("--label", default="", help="a note for the section (say, which checkout ran)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "RESULTS.md"))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    sections = []
    load = os.getloadavg()
    for kind in args.savers.split(","):
        if args.sizes:
            sizes = [int(x) for x in args.sizes.split(",")]
        elif args.quick:
            sizes = [1000, 10_000]
        else:
            sizes = [1000, 20_000] if kind == "sqlite" else [1000, 100_000]
        results = []
        with tempfile.TemporaryDirectory() as tmp:
            for i, n in enumerate(sizes):
                results.append(asyncio.run(measure(kind, n, args.reps, Path(tmp), queue=i == 0, fill=args.fill)))
        small, big = results[0][0], results[-1][0]
        lines = [
            f"### {kind}: {sizes[0]:,} vs {sizes[-1]:,} threads x 10 checkpoints "
            f"(built in {results[0][1]:.0f} s / {results[-1][1]:.0f} s)",
            "",
            f"| operation | {sizes[0]:,} threads, ms | {sizes[-1]:,} threads, ms | ratio |",
            "|---|---|---|---|",
        ]
        for op, ms in small.items():
            if op in big and not op.startswith(("recovery", "queue")):
                lines.append(f"| {op} | {ms:.2f} | {big[op]:.2f} | {big[op] / ms:.2f}x |")
        for name in ("recovery sweep", "queue claim"):
            a, b = small.get(f"{name}, 100 queued"), small.get(f"{name}, 10,000 queued")
            if a is not None and b is not None:
                lines.append(f"| {name}: 100 -> 10,000 queued runs | {a:.2f} | {b:.2f} | {b / a:.2f}x |")
        sections.append("\n".join(lines))
        print("\n" + sections[-1] + "\n", flush=True)
    section = "\n".join(
        [
            BEGIN,
            "",
            "## Scale (bench/scale.py)",
            "",
            f"- date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}; machine: {platform.platform()}, "
            f"nproc {os.cpu_count()}, load average at start {load[0]:.1f}; command: "
            f"`python bench/scale.py {' '.join(sys.argv[1:])}`{'; ' + args.label if args.label else ''}",
            f"- medians of {args.reps} (each on another thread); ratio = big store / small store (queue rows: 10,000 "
            "queued / 100 queued, on the small store)",
            "",
            *(s + "\n" for s in sections),
            END_MARK,
        ]
    )
    if not args.no_write:
        out = Path(args.out)
        text = out.read_text() if out.exists() else ""
        if BEGIN in text and END_MARK in text:
            text = text[: text.index(BEGIN)] + section + text[text.index(END_MARK) + len(END_MARK) :]
        else:
            text = text.rstrip("\n") + "\n\n" + section + "\n"
        out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
