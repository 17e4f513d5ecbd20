"""Benchmarks of ``graphckpt serve``: commit-to-event latency, and events per second to 100 subscribers.

    python bench/server.py                 # SQLite and PostgreSQL, writes its section of bench/RESULTS.md
    python bench/server.py --savers sqlite --steps 100 --repeats 3 --out /tmp/server.md

The server runs as ``graphckpt serve bench.server_graph:graph`` in a subprocess on a free loopback port (SQLite
file, or a fresh PostgreSQL schema). Latency: one subscriber follows a thread over SSE while a run of ``--steps``
steps commits; for each ``checkpoint`` event, receive time minus the checkpoint's ``created_at`` (taken just before
its commit; same machine clock), so it holds the commit, the wake-up of the streams (the server runs the thread
itself: as each commit returns), their read of the log and the SSE hop. Fan-out: 100 subscribers on one thread
while a run commits; events delivered to all of them divided by the time from the run's start to the last delivery.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402

PG = "postgresql://postgres@127.0.0.1:5432/test"
BEGIN, END_MARK = "<!-- server benchmarks (bench/server.py) -->", "<!-- /server benchmarks -->"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, db: str, workdir: Path, target: str = "bench.server_graph:graph") -> None:
        self.port = _free_port()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
        argv = [
            sys.executable,
            "-m",
            "graphckpt",
            "--db",
            db,
            "serve",
            target,
            "--port",
            str(self.port),
        ]
        self.proc = subprocess.Popen(argv, env=env, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{self.url}/ok", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start: {self.proc.stderr.read() if self.proc.stderr else ''}")
            time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


async def _follow(
    client: httpx.AsyncClient, path: str, started: asyncio.Event | None = None
) -> list[tuple[str, str, float]]:
    """(event, data, receive time) of each event of the stream until it ends."""
    out: list[tuple[str, str, float]] = []
    async with client.stream("GET", path) as response:
        if started is not None:
            started.set()
        fields: dict[str, str] = {}
        async for line in response.aiter_lines():
            if line.startswith(":"):
                continue
            if line:
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")
            elif fields:
                out.append((fields.get("event", ""), fields.get("data", ""), time.time()))
                fields = {}
    return out


async def latency(url: str, steps: int) -> list[float]:
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        (await client.post("/threads", json={"thread_id": "lat"})).raise_for_status()
        started = asyncio.Event()
        follower = asyncio.create_task(_follow(client, "/threads/lat/stream", started))
        await started.wait()
        (await client.post("/threads/lat/runs", json={"input": {"limit": steps}})).raise_for_status()
        events = await follower
        history = (await client.get("/threads/lat/history", params={"limit": steps + 1})).json()
    created = {
        h["checkpoint"]["checkpoint_id"]: dt.datetime.fromisoformat(h["created_at"]).timestamp() for h in history
    }
    found = []
    for kind, data, received in events:
        if kind == "checkpoint":
            checkpoint_id = re.search(r'"checkpoint_id":"([^"]+)"', data)
            if checkpoint_id and checkpoint_id.group(1) in created:
                found.append((received - created[checkpoint_id.group(1)]) * 1000)
    return found


async def fanout(url: str, steps: int, subscribers: int) -> tuple[float, int]:
    limits = httpx.Limits(max_connections=subscribers + 10)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        (await client.post("/threads", json={"thread_id": "fan"})).raise_for_status()
        opened = [asyncio.Event() for _ in range(subscribers)]
        tasks = [asyncio.create_task(_follow(client, "/threads/fan/stream", e)) for e in opened]
        await asyncio.gather(*(e.wait() for e in opened))
        start = time.time()
        (await client.post("/threads/fan/runs", json={"input": {"limit": steps}})).raise_for_status()
        results = await asyncio.gather(*tasks)
    delivered = sum(len([e for e in r if e[0] != "end"]) for r in results)
    last = max(r[-1][2] for r in results)
    return delivered / (last - start), delivered


def _drop(schema: str) -> None:
    drop = f"DROP SCHEMA IF EXISTS {schema} CASCADE"
    subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "test", "-qc", drop], check=True, capture_output=True)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--savers", default="sqlite,postgres")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=7, help="runs of each measure (medians are reported)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "RESULTS.md"))
    args = parser.parse_args()
    rows = []
    for saver in args.savers.split(","):
        p50s: list[float] = []
        p99s: list[float] = []
        rates: list[float] = []
        counts: list[int] = []
        delivered = 0
        with tempfile.TemporaryDirectory() as tmp:
            schema = f"bench_server_{os.getpid()}"
            db = str(Path(tmp) / "serve.db") if saver == "sqlite" else f"{PG}?schema={schema}"
            for _ in range(args.repeats):  # interleaved: a slow spell of the machine falls on both measures
                for measure in ("latency", "fanout"):
                    if saver == "postgres":
                        _drop(schema)
                    elif Path(db).exists():
                        Path(db).unlink()
                    server = Server(db, Path(tmp))
                    try:
                        if measure == "latency":
                            ms = asyncio.run(latency(server.url, args.steps))
                            p50s.append(statistics.median(ms))
                            p99s.append(_pct(ms, 0.99))
                            counts.append(len(ms))
                            print(f"{saver} latency p50 {p50s[-1]:.2f} / p99 {p99s[-1]:.2f} ms", flush=True)
                        else:
                            rate, delivered = asyncio.run(fanout(server.url, args.steps, args.subscribers))
                            rates.append(rate)
                            print(f"{saver} fan-out {rate:,.0f} events/s", flush=True)
                    finally:
                        server.stop()
            if saver == "postgres":
                _drop(schema)
        rows.append(
            (
                saver,
                f"commit-to-event latency, {min(counts)} checkpoints, ms",
                f"p50 {statistics.median(p50s):.2f} / p99 {statistics.median(p99s):.2f} "
                f"(p50 {min(p50s):.2f}-{max(p50s):.2f}, p99 {min(p99s):.2f}-{max(p99s):.2f})",
            )
        )
        rows.append(
            (
                saver,
                f"events/s to {args.subscribers} subscribers ({delivered} delivered)",
                f"{statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})",
            )
        )
        print(" | ".join(rows[-2]), flush=True)
        print(" | ".join(rows[-1]), flush=True)
    section = "\n".join(
        [
            BEGIN,
            "",
            "## Server",
            "",
            f"- date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}; machine: {platform.platform()}, "
            f"nproc {os.cpu_count()}; command: `python bench/server.py --steps {args.steps} --repeats {args.repeats}`",
            "- latency: receive time of each `checkpoint` SSE event minus the checkpoint's `created_at` (taken before "
            "the commit: the commit, the wake-up of the streams and their read of the log, SSE over loopback). The "
            "server runs the thread itself, so its streams wake as each commit returns (graphckpt.savers.events.watch)"
            "; writes of other processes are found by the poll (SQLite, every 10 ms) or LISTEN/NOTIFY (PostgreSQL).",
            "- medians of the repeats (the range in brackets): each repeat's p50 and p99 over its checkpoints, and its "
            "fan-out rate.",
            "",
            "| saver | measure | result |",
            "|---|---|---|",
            *(f"| {s} | {m} | {r} |" for s, m, r in rows),
            "",
            END_MARK,
        ]
    )
    report.write_section(args.out, BEGIN, END_MARK, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
