"""W1 and W2 with and without encryption at rest (issue 26: target <= 1.3x the unencrypted step time).

    python bench/encryption.py                     # SQLite (synchronous FULL and OFF) and PostgreSQL, 5 repeats
    python bench/encryption.py --steps 200 --repeats 3 --savers sqlite-off

W1: one node looping on itself, tiny state. W2: a 1 KiB message appended per step. Each repeat runs both workloads
plain and encrypted (alternating which goes first) on a fresh SQLite file or PostgreSQL schema; the table holds
the medians of ms per super-step and their ratio, and W2's bytes on disk. ``sqlite-off`` (``synchronous="OFF"``)
takes the fsync out of the step, so it shows the CPU cost of sealing alone; ``sqlite`` (``FULL``, the default) and
``postgres`` show what a user pays.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

if __package__ in (None, ""):  # run as a script: make `graphckpt` importable from the checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from graphckpt import END, START, Keyring, StateGraph, append
from graphckpt.savers.base import Saver

PG_DSN = os.environ.get("GRAPHCKPT_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
MESSAGE = base64.b64encode(random.Random(26).randbytes(768)).decode()
"""1 KiB of text that compresses about as little as prose does (a repeated letter would flatter compression)."""


class Loop(TypedDict):
    n: int
    stop: int


class Messages(TypedDict):
    n: int
    stop: int
    messages: Annotated[list[str], append]


def _loop(s: Loop) -> dict[str, Any]:
    return {"n": s["n"] + 1}


def _message(s: Messages) -> dict[str, Any]:
    return {"n": s["n"] + 1, "messages": [f"{s['n']:08d}{MESSAGE[8:]}"]}


def _graph(state: type, node: Any) -> StateGraph:
    g = StateGraph(state)
    g.add_node("step", node)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: END if s["n"] >= s["stop"] else "step")
    return g


def _saver(kind: str, where: str, keyring: Keyring | None) -> Saver:
    if kind == "postgres":
        from graphckpt.savers.postgres import PostgresSaver

        return PostgresSaver(PG_DSN, schema=where, encryption=keyring)
    from graphckpt.savers.sqlite import SqliteSaver

    return SqliteSaver(where, synchronous="OFF" if kind == "sqlite-off" else "FULL", encryption=keyring)


async def _run(
    kind: str, workload: str, steps: int, keyring: Keyring | None, tmp: str
) -> tuple[float, float, int | None]:
    """Wall ms per step, this process's CPU ms per step (all its threads: less disturbed by other processes on a
    loaded machine), and bytes on disk (SQLite)."""
    where = f"b{uuid.uuid4().hex[:10]}" if kind == "postgres" else str(Path(tmp) / f"{uuid.uuid4().hex}.db")
    saver = _saver(kind, where, keyring)
    graph = _graph(Loop, _loop) if workload == "W1" else _graph(Messages, _message)
    try:
        async with saver:
            app = graph.compile(saver=saver)
            inputs: dict[str, Any] = {"n": 0, "stop": steps}
            start, cpu = time.perf_counter(), time.process_time()
            await app.ainvoke(inputs, thread_id="t", recursion_limit=steps + 5)
            ms = 1e3 * (time.perf_counter() - start) / steps
            cpu_ms = 1e3 * (time.process_time() - cpu) / steps
        return ms, cpu_ms, None if kind == "postgres" else _size(tmp, Path(where).name)
    finally:
        if kind == "postgres":
            import psycopg

            async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{where}" CASCADE')


def _size(folder: str, name: str) -> int:
    return sum(p.stat().st_size for p in Path(folder).glob(name + "*"))


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--savers", default="sqlite,sqlite-off,postgres")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    keyring = Keyring({"bench": os.urandom(32)})
    print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    print(
        "| workload | saver | plain ms/step | encrypted ms/step | encrypted / plain | plain CPU ms/step "
        "| encrypted CPU ms/step | CPU encrypted / plain | W2 bytes plain | encrypted |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.savers.split(","):
            for workload in ("W1", "W2"):
                plain: list[float] = []
                sealed: list[float] = []
                plain_cpu: list[float] = []
                sealed_cpu: list[float] = []
                sizes: dict[str, int | None] = {}
                for r in range(args.repeats):
                    order = [None, keyring] if r % 2 == 0 else [keyring, None]
                    for ring in order:
                        ms, cpu_ms, size = await _run(kind, workload, args.steps, ring, tmp)
                        (sealed if ring else plain).append(ms)
                        (sealed_cpu if ring else plain_cpu).append(cpu_ms)
                        sizes["sealed" if ring else "plain"] = size
                p, s = statistics.median(plain), statistics.median(sealed)
                pc, sc = statistics.median(plain_cpu), statistics.median(sealed_cpu)
                extra = ("-", "-")
                if workload == "W2" and sizes.get("plain") is not None:
                    extra = (f"{sizes['plain']:,}", f"{sizes['sealed']:,}")
                row = (
                    f"| {workload} | {kind} | {p:.3f} | {s:.3f} | {s / p:.2f}x | {pc:.3f} | {sc:.3f} | {sc / pc:.2f}x "
                    f"| {extra[0]} | {extra[1]} |"
                )
                print(row, flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
