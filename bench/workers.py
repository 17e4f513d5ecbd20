"""The service benchmarks on PostgreSQL, with real ``graphckpt worker`` processes:

    python bench/workers.py                       # prints the table, writes the "Workers" section of bench/RESULTS.md
    python bench/workers.py --threads 20 --steps 5 --out /tmp/results.md   # smaller

- **steps/s with 1, 2 and 4 workers** (concurrency 1 each) over I/O-bound nodes: each step sleeps 20 ms in a
  journaled effect (standing in for a model call). Measured by the checkpoints' own times over the steady window
  (every worker up, the queue not empty: :func:`_steady_rate`), so process start-up and the last runs' tail are not
  counted. Target: 4 workers >= 3x one worker.
- **concurrency** (``--concurrency``): steps/s of 1 worker at concurrency 1, 4, 16, and of 4 workers at 1 and
  16, on SQLite and PostgreSQL, for sync (``time.sleep``) and async (``asyncio.sleep``) nodes. Targets: concurrency
  16 >= 10x concurrency 1; 4 workers >= 3x one. Written between ``<!-- workers:begin -->`` and
  ``<!-- workers:end -->``.
- **takeover latency after SIGKILL**: a worker running a long thread is SIGKILLed; the time until another worker's
  first checkpoint on that thread. Target: the lease length + at most 1 s.

The lease's cost on W1 per super-step (target <= 5%) comes from ``bench/run.py --workloads W1`` run on this tree and
on the tree before leases; pass both figures (``--w1 sqlite:BEFORE:AFTER``) to have them recorded with the rest.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
DSN = "postgresql://postgres@127.0.0.1:5432/test"
MARK_BEGIN, MARK_END = "<!-- workers: begin -->", "<!-- workers: end -->"
CONC_BEGIN, CONC_END = "<!-- workers:begin -->", "<!-- workers:end -->"
GRAPHS = {"sync": "support.worker_graph:graph", "async": "support.worker_graph:agraph"}
Popen = subprocess.Popen[bytes]


def _env(steps: int) -> dict[str, str]:
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRAPHCKPT_")}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT), *inherited]),
        WORKER_STEPS=str(steps),
        WORKER_SLEEP="0.02",
    )
    env.pop("WORKER_SIDE", None)
    return env


def _cli(db: str, env: dict[str, str], *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "graphckpt.cli", *args, "--db", db],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )


def _worker(db: str, env: dict[str, str], lease: float, concurrency: int = 1, graph: str = GRAPHS["sync"]) -> Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "graphckpt.cli",
            "worker",
            "--graph",
            graph,
            "--db",
            db,
            "--concurrency",
            str(concurrency),
            "--poll",
            "0.05",
            "--lease-seconds",
            str(lease),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def _schema(dsn: str) -> str:
    return f"gc_bench_workers_{uuid.uuid4().hex[:10]}"


def _drop(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _query(dsn: str, schema: str, text: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        return conn.execute(text).fetchall()  # type: ignore[arg-type]


class _Store:
    """One fresh database of a throughput measure: a PostgreSQL schema or a SQLite file, and a way to query it."""

    def __init__(self, saver: str, dsn: str) -> None:
        self.saver, self.dsn = saver, dsn
        if saver == "postgres":
            self.schema = _schema(dsn)
            self.db = f"{dsn}?schema={self.schema}"
        else:
            self.dir = tempfile.mkdtemp(prefix="gc_bench_workers_")
            self.db = str(Path(self.dir) / "workers.db")

    def query(self, text: str) -> list[tuple[object, ...]]:
        if self.saver == "postgres":
            return _query(self.dsn, self.schema, text)
        with contextlib.closing(sqlite3.connect(self.db, timeout=30)) as conn:
            return conn.execute(text).fetchall()

    def drop(self) -> None:
        if self.saver == "postgres":
            _drop(self.dsn, self.schema)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


_SUBMIT = """
import asyncio, importlib, sys
from graphckpt.targets import Database
module, _, attr = sys.argv[2].partition(":")
async def main():
    saver = Database(sys.argv[1]).saver(create=True)
    async with saver:
        app = getattr(importlib.import_module(module), attr).compile(saver=saver)
        for i in range(int(sys.argv[3])):
            await app.asubmit({}, thread_id=f"b{i}", graph=sys.argv[2])
asyncio.run(main())
"""


def _submit(db: str, env: dict[str, str], kind: str, threads: int) -> None:
    """Queue ``threads`` runs of the ``kind`` graph in one process (a CLI ``submit`` each costs a process start)."""
    subprocess.run([sys.executable, "-c", _SUBMIT, db, GRAPHS[kind], str(threads)], env=env, check=True, timeout=300)


def throughput(
    dsn: str,
    workers: int,
    threads: int,
    steps: int,
    *,
    saver: str = "postgres",
    concurrency: int = 1,
    kind: str = "sync",
) -> float:
    """Loop steps per second of ``workers`` worker processes (``concurrency`` runs each) on ``threads`` queued
    threads of the ``kind`` graph (``sync``: ``time.sleep``; ``async``: ``asyncio.sleep``), on ``saver``."""
    store = _Store(saver, dsn)
    env = _env(steps)
    procs: list[Popen] = []
    try:
        _submit(store.db, env, kind, threads)
        procs = [_worker(store.db, env, 30, concurrency, GRAPHS[kind]) for _ in range(workers)]
        done = "SELECT count(*) FROM runs WHERE status = 'done'"
        _wait(lambda: store.query(done)[0][0] == threads, 600, "every run to finish")
        return _steady_rate(store)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)
        store.drop()


def _steady_rate(store: _Store) -> float:
    """Loop steps per second while every worker was up and the queue was not empty: from the latest of the workers'
    first claims (a worker process that started late is not counted idle) to the last claim of all (after it, run
    slots fall idle one by one as the queue is empty). Steps are counted by their checkpoints' own times."""
    [window] = store.query(
        "SELECT max(first), (SELECT max(started_at) FROM runs) FROM "
        "(SELECT min(started_at) AS first FROM runs GROUP BY worker) AS w"
    )
    start, end = (float(t) for t in window)  # type: ignore[arg-type]
    source = "metadata->>'source'" if store.saver == "postgres" else "json_extract(metadata, '$.source')"
    [(n,)] = store.query(
        f"SELECT count(*) FROM checkpoints WHERE {source} = 'loop' AND created_at > {start!r} AND created_at <= {end!r}"
    )
    if end <= start or not n:
        raise SystemExit("too few runs to measure a steady rate: queue more threads (--threads)")
    return float(n) / (end - start)  # type: ignore[arg-type]


def takeover(dsn: str, lease: float) -> float:
    """Seconds from SIGKILL of the worker running a thread to the next checkpoint another worker commits on it."""
    schema = _schema(dsn)
    db, env = f"{dsn}?schema={schema}", _env(2000)
    a = b = None
    try:
        _cli(db, env, "submit", GRAPHS["sync"], "--thread", "long")
        a = _worker(db, env, lease)
        count = "SELECT count(*) FROM checkpoints WHERE thread_id = 'long'"
        _wait(lambda: _query(dsn, schema, count)[0][0] >= 20, 60, "the first worker to run the thread")
        b = _worker(db, env, lease)
        time.sleep(1.0)  # the second worker is up and idle (its start-up is not the takeover's)
        a.kill()
        killed = time.time()
        a.wait()
        after = f"SELECT min(created_at) FROM checkpoints WHERE thread_id = 'long' AND created_at > {killed!r}"
        _wait(lambda: _query(dsn, schema, after)[0][0] is not None, lease + 30, "the takeover")
        return float(_query(dsn, schema, after)[0][0]) - killed  # type: ignore[arg-type]
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        _drop(dsn, schema)


CONFIGS = ((1, 1), (1, 4), (1, 16), (4, 1), (4, 16))
"""(workers, concurrency) of the concurrency table."""

THREADS_PER_SLOT = 12
"""Threads queued per run slot (workers x concurrency) of a cell: about 12 rounds of runs, so that the steady window
is seconds long at every cell (with 6, a 1 x c16 cell measured ~2.5 s, and its first round, every run claimed at
once and stepping in lock-step, weighed a sixth of it)."""


def concurrency_table(
    dsn: str,
    savers: list[str],
    kinds: list[str],
    steps: int,
    repeats: int,
    configs: tuple[tuple[int, int], ...] = CONFIGS,
) -> str:
    """steps/s of each (workers, concurrency) in ``configs`` (a subset of :data:`CONFIGS`; the others show ``-``),
    on each saver and graph kind (median of ``repeats``); each run queues ``THREADS_PER_SLOT x workers x
    concurrency`` threads (at least 32) of ``steps`` steps. The repeats are interleaved (every cell of a saver and
    kind once, then every cell again, ...), so that a slow spell of the machine (this VM's fsync and CPU times drift
    by up to a fifth within minutes) falls on every cell of a ratio rather than on one."""
    rows = [
        "| saver | node | " + " | ".join(f"{w} x c{c}" for w, c in CONFIGS) + " | c16 / c1 (>= 10) | 4 x c1 / 1 x c1 "
        "(>= 3) | 4 x c16 / 1 x c16 |",
        "|---|---|" + "---|" * (len(CONFIGS) + 3),
    ]
    for saver in savers:
        for kind in kinds:
            runs: dict[tuple[int, int], list[float]] = {cell: [] for cell in configs}
            for _ in range(repeats):
                for w, c in configs:
                    threads = max(32, THREADS_PER_SLOT * w * c)
                    runs[w, c].append(throughput(dsn, w, threads, steps, saver=saver, concurrency=c, kind=kind))
            rate = {cell: statistics.median(r) for cell, r in runs.items()}
            for (w, c), r in runs.items():
                print(f"{saver} {kind} {w} x c{c}: {rate[w, c]:.1f} steps/s {[round(x, 1) for x in r]}", flush=True)
            rows.append(
                f"| {saver} | {'`time.sleep`' if kind == 'sync' else '`asyncio.sleep`'} | "
                + " | ".join(f"{rate[k]:.0f}" if k in rate else "-" for k in CONFIGS)
                + f" | {_ratio(rate, (1, 16), (1, 1), 10)} | {_ratio(rate, (4, 1), (1, 1), 3)} | "
                f"{_ratio(rate, (4, 16), (1, 16), None)} |"
            )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg-dsn", default=DSN)
    parser.add_argument(
        "--concurrency",
        action="store_true",
        help="measure the concurrency table (workers x concurrency, both savers, sync and async nodes) instead",
    )
    parser.add_argument("--savers", default="sqlite,postgres", help="with --concurrency: which savers")
    parser.add_argument("--kinds", default="sync,async", help="with --concurrency: which node kinds")
    parser.add_argument("--repeats", type=int, default=1, help="with --concurrency: runs per cell (median)")
    parser.add_argument(
        "--configs",
        default=",".join(f"{w}x{c}" for w, c in CONFIGS),
        help="with --concurrency: which WORKERSxCONCURRENCY cells (e.g. 1x1,1x16,4x1)",
    )
    parser.add_argument("--threads", type=int, default=40)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--lease", type=float, default=2.0, help="lease length of the takeover measure (s)")
    parser.add_argument(
        "--w1",
        action="append",
        default=[],
        metavar="SAVER:BEFORE:AFTER",
        help="W1 ms per super-step before and after leases (from bench/run.py), recorded as given",
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "RESULTS.md"))
    args = parser.parse_args()
    if args.concurrency:
        try:
            configs = tuple((int(w), int(c)) for w, _, c in (spec.partition("x") for spec in args.configs.split(",")))
        except ValueError:
            configs = ()
        if not configs or any(k not in CONFIGS for k in configs):
            parser.error(f"--configs: each cell is one of {', '.join(f'{w}x{c}' for w, c in CONFIGS)}")
        table = concurrency_table(
            args.pg_dsn, args.savers.split(","), args.kinds.split(","), args.steps, args.repeats, configs
        )
        load = os.getloadavg()[0]
        section = "\n".join(
            [
                CONC_BEGIN,
                "## Workers with concurrency (issue 25)",
                "",
                f"`python bench/workers.py --concurrency --steps {args.steps} --repeats {args.repeats} "
                f"--configs {args.configs}`: "
                "`graphckpt worker` processes (W workers x concurrency c each) on threads of a loop whose every step "
                "sleeps 20 ms in a journaled effect (`time.sleep` in a sync node, `asyncio.sleep` in an async one); "
                "steps/s over the steady window (from the last worker's first claim to the last claim: every worker "
                "up, the queue not empty), counted by the checkpoints' own times, with "
                f"{THREADS_PER_SLOT} threads queued per run slot (at least 32); median of the repeats, which run "
                "interleaved (every cell once, then again). Load average "
                f"at the end: {load:.1f} on {os.cpu_count()} cores.",
                "",
                table,
                CONC_END,
            ]
        )
        print(section)
        _write_section(Path(args.out), CONC_BEGIN, CONC_END, section)
        return 0
    rates = {k: throughput(args.pg_dsn, k, args.threads, args.steps) for k in (1, 2, 4)}
    latency = takeover(args.pg_dsn, args.lease)
    rows = [
        "| measure | figure | target | result |",
        "|---|---|---|---|",
        *(
            f"| steps/s, {k} worker{'s' if k > 1 else ''} (20 ms I/O per step) | {r:.1f} | - | - |"
            for k, r in rates.items()
        ),
        f"| 4 workers / 1 worker | {rates[4] / rates[1]:.2f} | >= 3 | {_met(rates[4] / rates[1] >= 3)} |",
        f"| takeover after SIGKILL, lease {args.lease:g} s | {latency:.2f} s | <= {args.lease + 1:g} s | "
        f"{_met(latency <= args.lease + 1)} |",
    ]
    for spec in args.w1:
        saver, before, after = spec.split(":")
        cost = float(after) / float(before) - 1
        rows.append(
            f"| W1 {saver}: lease cost per super-step ({before} -> {after} ms) | {cost:+.1%} | <= +5% | "
            f"{_met(cost <= 0.05)} |"
        )
    section = "\n".join(
        [
            MARK_BEGIN,
            "## Workers",
            "",
            f"`python bench/workers.py --threads {args.threads} --steps {args.steps}`: PostgreSQL, `graphckpt worker` "
            "processes (concurrency 1 each), steps/s from the checkpoints' own times.",
            "",
            *rows,
            MARK_END,
        ]
    )
    print(section)
    _write_section(Path(args.out), MARK_BEGIN, MARK_END, section)
    return 0


def _write_section(out: Path, begin: str, end: str, section: str) -> None:
    """Replace the text between ``begin`` and ``end`` in ``out`` with ``section`` (or append it)."""
    text = out.read_text() if out.exists() else ""
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    out.write_text(text + ("\n" if not text.endswith("\n") else ""))


def _ratio(
    rate: dict[tuple[int, int], float], top: tuple[int, int], bottom: tuple[int, int], target: float | None
) -> str:
    """``rate[top] / rate[bottom]`` (with met / missed against ``target``), ``-`` when either was not measured."""
    if top not in rate or bottom not in rate:
        return "-"
    ratio = rate[top] / rate[bottom]
    return f"{ratio:.2f}" + ("" if target is None else f" {_met(ratio >= target)}")


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


if __name__ == "__main__":
    sys.exit(main())
