"""Scale: does every per-thread read and every first page cost the same at 1,000 threads as at 100,000?

    python bench/scale.py --quick                       # SQLite and PostgreSQL, 1k and 10k threads
    python bench/scale.py                               # SQLite 1k / 20k, PostgreSQL 1k / 100k (long)
    python bench/scale.py --savers sqlite --sizes 1000,5000 --reps 7 --no-write

Each store holds N threads of the graph ``bench.scale_graph:graph`` run to 10 checkpoints each, tagged with a
graph and ``{"team": "t<i % 10>"}`` metadata. ``--fill copy`` (the default): the engine (``App.ainvoke``) writes
ten template threads and the other N - 10 are copies of their rows with new ids and times
(``bench/scale_fill.py``: PostgreSQL ``COPY``, SQLite ``executemany``; 100k threads in about 3 minutes where the
engine takes hours on this machine); ``--fill engine``: every thread by ``App.ainvoke``, 16 runs at a time. Both
stores of a saver are open at once, each behind its own ``graphckpt serve``, and each operation is timed
``--reps`` times on each, the stores taking turns call by call (median; each repetition on another thread):
``get_state`` of the head and of step 3, the first page of ``history``, the first page of ``threads`` (no filter,
``status="done"``, a metadata filter matching a tenth), one more step of a done thread, a fork at step 3,
``POST /threads/search`` (``limit`` 10, and with a metadata filter), the UI's thread list and thread page; then the
recovery sweep (``requeue_expired``) and a queue claim on two stores with 100 and 10,000 queued runs, in turns. It
prints medians, the ratio big / small and each side's range, and writes its section of bench/RESULTS.md between
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

from bench import report  # noqa: E402
from bench.scale_fill import TEMPLATES, fill_postgres, fill_sqlite, vacuum_analyze  # noqa: E402
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


def operations(app: Any, n: int, reps: int, client: httpx.AsyncClient) -> dict[str, Timing]:
    """Each operation on the store of ``n`` threads behind ``app`` (and its server, through ``client``)."""
    saver = app.saver
    rng = random.Random(n)
    sample = [f"th{i:06d}" for i in rng.sample(range(n), 4 * (reps + 1))]
    pick = iter(sample)

    def one(_: int) -> str:
        return next(pick)

    async def search(body: dict[str, Any]) -> None:
        (await client.post("/threads/search", json=body)).raise_for_status()

    async def get(path: str) -> None:
        (await client.get(path)).raise_for_status()

    return {
        "get_state head": lambda r: app.aget_state(one(r)),
        "get_state step 3": lambda r: app.aget_state(one(r), step=3),
        "history first page (10)": lambda r: app.ahistory(one(r), limit=10),
        "threads first page (50)": lambda r: first_page(app),
        "threads first page, status done": lambda r: first_page(app, "done"),
        "threads first page, metadata filter": lambda r: metadata_page(saver, "t3"),
        "resume: one more step of a done thread": lambda r: app.ainvoke({"limit": 10}, thread_id=one(r)),
        "fork at step 3": lambda r: app.afork(sample[r + 1], step=3, new_thread_id=f"fork-{r}-{os.getpid()}"),
        "POST /threads/search {limit: 10}": lambda r: search({"limit": 10}),
        "POST /threads/search, metadata filter": lambda r: search({"limit": 10, "metadata": {"team": "t3"}}),
        "UI thread list": lambda r: get("/ui/"),
        "UI thread page": lambda r: get(f"/ui/threads/{sample[r + 1]}"),
    }


async def interleaved(stores: list[dict[str, Timing]], reps: int) -> list[dict[str, list[float]]]:
    """Milliseconds of ``reps`` calls of each operation on each store (after one warm-up call each), the stores
    taking turns call by call (the first store first at even repetitions, last at odd ones), so a change of the
    machine's load falls on both sides of a ratio."""
    out: list[dict[str, list[float]]] = [{} for _ in stores]
    for name in stores[0]:
        for ops in stores:
            await ops[name](-1)
        for rep in range(reps):
            order = range(len(stores)) if rep % 2 == 0 else reversed(range(len(stores)))
            for i in order:
                t0 = time.perf_counter()
                await stores[i][name](rep)
                out[i].setdefault(name, []).append((time.perf_counter() - t0) * 1000)
    return out


def queue_operations(saver: Saver) -> dict[str, Timing]:
    owner = Owner("bench-scale", "localhost", os.getpid())

    async def claim(_: int) -> None:  # and end it, as a worker does: each claim takes the next run of the queue
        got = await saver.claim_run(owner, graphs=[GRAPH], fence="f", lease_until=time.time() + 60)
        assert got is not None
        await saver.finish_run(got.run_id, fence="f", status="done")

    return {"recovery sweep": lambda r: saver.requeue_expired(time.time()), "queue claim": claim}


async def queue_stores(kind: str, tmp: Path, reps: int) -> list[dict[str, list[float]]]:
    """The sweep and a claim on two empty stores, one with 100 and one with 10,000 queued runs, taking turns."""
    savers = []
    try:
        for size in (100, 10_000):
            where = str(tmp / f"queue{size}.db") if kind == "sqlite" else f"bench_scale_q{size}_{os.getpid()}"
            if kind == "postgres":
                _drop(where)
            saver = open_saver(kind, where)
            savers.append((saver, where))
            for k in range(size):
                run = RunRecord(ids.new_id(), f"q{k:06d}", "input", "queued", graph=GRAPH, created_at=time.time())
                await saver.enqueue_run(run, reject_busy=False)
            if kind == "postgres":  # what autovacuum does within a minute of such growth (see docs/scale.md)
                analyze(where)
        return await interleaved([queue_operations(s) for s, _ in savers], reps)
    finally:
        for saver, where in savers:
            await saver.aclose()
            if kind == "postgres":
                _drop(where)


def analyze(schema: str) -> None:
    """``ANALYZE`` the schema's tables: a store built in a minute has no statistics yet, and PostgreSQL plans a
    table it never analyzed as a few rows (the claim then sorts every queued run instead of walking the index)."""
    vacuum_analyze(PG, schema, vacuum=False)


async def prepare(kind: str, n: int, tmp: Path, fill: str) -> tuple[Any, str, float]:
    """A store of ``n`` threads x 10 checkpoints: ``(app, where, seconds to build)``."""
    where = str(tmp / f"scale{n}.db") if kind == "sqlite" else f"bench_scale_{n}_{os.getpid()}"
    if kind == "postgres":
        _drop(where)
    app = graph().compile(saver=open_saver(kind, where))
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
    return app, where, built


async def measure(
    kind: str, sizes: list[int], reps: int, tmp: Path, fill: str
) -> tuple[list[dict[str, list[float]]], list[float], list[dict[str, list[float]]]]:
    """Per store (``sizes``), each operation's times, taken in turns; the build times; the queue's times."""
    stores: list[tuple[Any, str, float]] = []
    servers: list[Server] = []
    clients: list[httpx.AsyncClient] = []
    try:
        for n in sizes:
            stores.append(await prepare(kind, n, tmp, fill))
        for _, where, _ in stores:
            db = where if kind == "sqlite" else f"{PG}?schema={where}"
            servers.append(await asyncio.to_thread(Server, db, tmp, GRAPH))
            clients.append(httpx.AsyncClient(base_url=servers[-1].url, timeout=600))
        ops = [operations(app, n, reps, c) for (app, _, _), n, c in zip(stores, sizes, clients, strict=True)]
        times = await interleaved(ops, reps)
        return times, [b for _, _, b in stores], await queue_stores(kind, tmp, reps)
    finally:
        for c in clients:
            await c.aclose()
        for server in servers:
            server.stop()
        for app, where, _ in stores:
            await app.aclose()
            if kind == "postgres":
                _drop(where)


def _row(op: str, a: list[float], b: list[float]) -> str:
    ma, mb = statistics.median(a), statistics.median(b)
    return f"| {op} | {ma:.2f} | {mb:.2f} | {mb / ma:.2f}x | {min(a):.2f}-{max(a):.2f} | {min(b):.2f}-{max(b):.2f} |"


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
        load_kind = os.getloadavg()[0]
        with tempfile.TemporaryDirectory() as tmp:
            times, built, queue = asyncio.run(measure(kind, sizes, args.reps, Path(tmp), args.fill))
        small, big = times[0], times[-1]
        lines = [
            f"### {kind}: {sizes[0]:,} vs {sizes[-1]:,} threads x 10 checkpoints "
            f"(built in {built[0]:.0f} s / {built[-1]:.0f} s, {args.fill}; load average {load_kind:.1f} at the start, "
            f"{os.getloadavg()[0]:.1f} at the end)",
            "",
            f"| operation | {sizes[0]:,} threads, ms | {sizes[-1]:,} threads, ms | ratio | range, {sizes[0]:,} | "
            f"range, {sizes[-1]:,} |",
            "|---|---|---|---|---|---|",
        ]
        lines += [_row(op, small[op], big[op]) for op in small]
        lines += [_row(f"{op}: 100 -> 10,000 queued runs", queue[0][op], queue[1][op]) for op in queue[0]]
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
            f"- medians of {args.reps} (each on another thread), the two stores taking turns call by call (both "
            "open at once, each behind its own `graphckpt serve`); ratio = big store / small store; range = "
            "fastest-slowest call; queue rows: two stores of no threads with 100 and 10,000 queued runs, in turns",
            "",
            *(s + "\n" for s in sections),
            END_MARK,
        ]
    )
    if not args.no_write:
        report.write_section(args.out, BEGIN, END_MARK, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
