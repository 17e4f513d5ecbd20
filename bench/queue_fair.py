"""Queue claim cost with fair claiming between namespaces: 100 vs 10,000 queued runs, one namespace and two.

    python bench/queue_fair.py                      # PostgreSQL and SQLite, 11 repetitions
    python bench/queue_fair.py --savers postgres --reps 21

For each saver and each case a fresh store is filled with queued runs of new threads (``a/qNNNNN``; with two
namespaces every other run is ``b/…``), 4 runs of namespace ``a`` are claimed and held (so the fair order differs
from the plain one), and a claim (put back after it) is timed: the fair claim as shipped, and the plain oldest-first
claim alone (the fair window set to 0). Prints the medians in ms. ``--analyze``: PostgreSQL's planner statistics
taken after the fill (as autovacuum does soon after); without them both claims may sort every queued run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.server import _drop  # noqa: E402
from graphckpt import ids  # noqa: E402
from graphckpt.savers import _memory_runs, _pg_runs, _sqlite_runs  # noqa: E402
from graphckpt.savers.base import Owner  # noqa: E402
from graphckpt.savers.queue import FAIR_WINDOW, RunQueue, RunRecord  # noqa: E402

PG = "postgresql://postgres@127.0.0.1:5432/test"
GRAPH = "bench.queue_fair:graph"
OWNER = Owner("bench-fair", "localhost", os.getpid())


def _window(value: int) -> None:
    for module in (_memory_runs, _pg_runs, _sqlite_runs):
        module.FAIR_WINDOW = value  # type: ignore[attr-defined]


async def case(kind: str, size: int, namespaces: int, reps: int, tmp: Path, analyze: bool) -> dict[str, float]:
    schema = f"bench_fair_{size}_{namespaces}_{os.getpid()}"
    if kind == "postgres":
        from graphckpt.savers.postgres import PostgresSaver

        _drop(schema)
        saver: RunQueue = PostgresSaver(PG, schema=schema, pool_max=8)
    else:
        from graphckpt.savers.sqlite import SqliteSaver

        saver = SqliteSaver(str(tmp / f"{schema}.db"))
    try:
        start = time.time() - 100_000
        runs = [
            RunRecord(ids.new_id(), f"{'ab'[i % namespaces]}/q{i:06d}", "input", "queued", GRAPH, created_at=start + i)
            for i in range(size)
        ]
        for i in range(0, size, 8):
            await asyncio.gather(*(saver.enqueue_run(r, reject_busy=False) for r in runs[i : i + 8]))
        if analyze and kind == "postgres":  # what autovacuum does within a minute or so of the fill
            import psycopg

            with psycopg.connect(PG, autocommit=True) as conn:
                conn.execute(f"ANALYZE {schema}.runs")  # type: ignore[arg-type]
        held = [
            await saver.claim_run(OWNER, graphs=[GRAPH], fence="held", lease_until=time.time() + 600) for _ in "1234"
        ]
        assert all(h is not None and h.thread_id.startswith("a/") for h in held[:1])
        out = {}
        for label, window in (("fair", FAIR_WINDOW), ("plain", 0)):
            _window(window)
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                got = await saver.claim_run(OWNER, graphs=[GRAPH], fence="f", lease_until=time.time() + 60)
                times.append((time.perf_counter() - t0) * 1000)
                assert got is not None
                await saver.finish_run(got.run_id, fence="f", status="queued")
            out[label] = statistics.median(times)
        _window(FAIR_WINDOW)
        return out
    finally:
        await saver.aclose()  # type: ignore[attr-defined]
        if kind == "postgres":
            _drop(schema)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--savers", default="postgres,sqlite")
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument("--analyze", action="store_true", help="PostgreSQL: ANALYZE the runs table after the fill")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}, nproc {os.cpu_count()}, window {FAIR_WINDOW}")
    print("| saver | namespaces | queued | fair claim, ms | plain claim, ms |\n|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.savers.split(","):
            for namespaces in (1, 2):
                for size in (100, 10_000):
                    r = asyncio.run(case(kind, size, namespaces, args.reps, Path(tmp), args.analyze))
                    print(f"| {kind} | {namespaces} | {size:,} | {r['fair']:.2f} | {r['plain']:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
