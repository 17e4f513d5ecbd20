"""The service benchmarks on PostgreSQL, with real ``graphckpt worker`` processes:

    python bench/workers.py                       # prints the table, writes the "Workers" section of bench/RESULTS.md
    python bench/workers.py --threads 20 --steps 5 --out /tmp/results.md   # smaller

- **steps/s with 1, 2 and 4 workers** (concurrency 1 each) over I/O-bound nodes: each step sleeps 20 ms in a
  journaled effect (standing in for a model call). Measured from the checkpoints' own times (first to last loop
  step), so process start-up is not counted. Target: 4 workers >= 3x one worker.
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
        for i in range(threads):
            _cli(store.db, env, "submit", GRAPHS[kind], "--thread", f"b{i}")
        procs = [_worker(store.db, env, 30, concurrency, GRAPHS[kind]) for _ in range(workers)]
        done = "SELECT count(*) FROM runs WHERE status = 'done'"
        _wait(lambda: store.query(done)[0][0] == threads, 600, "every run to finish")
        source = "metadata->>'source'" if saver == "postgres" else "json_extract(metadata, '$.source')"
        [(n, first, last)] = store.query(
            f"SELECT count(*), min(created_at), max(created_at) FROM checkpoints WHERE {source} = 'loop'"
        )
        return float(n) / (float(last) - float(first))  # type: ignore[arg-type]
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)
        store.drop()


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg-dsn", default=DSN)
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
    out = Path(args.out)
    text = out.read_text() if out.exists() else ""
    pattern = re.compile(re.escape(MARK_BEGIN) + ".*?" + re.escape(MARK_END), re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    out.write_text(text + ("\n" if not text.endswith("\n") else ""))
    return 0


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


if __name__ == "__main__":
    sys.exit(main())
