"""``graphckpt rekey``: killed with SIGKILL at random points and run again until it finishes, it ends with every
sealed field of every row under the new key, and every thread reads (values, history, metadata, interrupts,
streamed updates) exactly as before; the old key can then be dropped. A plaintext database is encrypted by it."""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from support.postgres import PG_DSN
from support.sealed_world import MARKER, build, scenario

from graphckpt.encryption import Keyring, is_sealed, sealed_key_id, text_key_id
from graphckpt.savers.base import Saver
from graphckpt.savers.postgres import PostgresSaver
from graphckpt.savers.sqlite import SqliteSaver

OLD, NEW = os.urandom(32), os.urandom(32)
ROOT = Path(__file__).resolve().parents[2]


def env_keys(*pairs: tuple[str, bytes]) -> dict[str, str]:
    keys = ",".join(f"{i}:{base64.b64encode(k).decode()}" for i, k in pairs)
    return {**os.environ, "GRAPHCKPT_ENCRYPTION_KEYS": keys, "PYTHONPATH": str(ROOT)}


async def fill(saver: Saver, worlds: int) -> None:
    app = build(saver)
    for i in range(worlds):
        await scenario(app, f"w{i}")
        await app.ainvoke({}, thread_id=f"i{i}")  # left interrupted: its effect result and interrupt are pending
        await app.asubmit({"doc": MARKER}, thread_id=f"q{i}", graph="support.sealed_world:graph")  # a run row


async def reading(saver: Saver) -> dict[str, Any]:
    """Everything a user reads of every thread."""
    app = build(saver)
    out: dict[str, Any] = {"runs": sorted((r.run_id, r.status, r.payload) for r in await app.aruns())}
    for info in await app.athreads():
        tid = info.thread_id
        state = await app.aget_state(tid)
        history = await app.ahistory(tid)
        events = await saver.read_events([(tid, 0, 1 << 30)], after=(-1, -1), limit=10_000)
        out[tid] = (
            state.status,
            state.values.model_dump(),
            [i.payload for i in state.interrupts],
            [(h.step, h.values.model_dump(), dict(h.metadata)) for h in history],
            [e.payload.get("update") for e in events if e.kind == "task.finished"],
        )
    return out


def rekey_until_done(db: str, env: dict[str, str], *, kills: int, seed: int) -> int:
    """Run ``graphckpt rekey`` with SIGKILL at random moments ``kills`` times, then to the end; the number of runs
    killed while working."""
    rng = random.Random(seed)
    command = [sys.executable, "-m", "graphckpt", "rekey", "--db", db, "--batch", "3"]
    killed = 0
    for _ in range(kills):
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.3, 1.6))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed += 1
        proc.communicate(timeout=60)
    final = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr
    assert "every row is under key 'k2'" in final.stdout
    return killed


def rekey_once(db: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "graphckpt", "rekey", "--db", db, "--json"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def files(folder: Path, pattern: str) -> bytes:
    return b"".join(p.read_bytes() for p in folder.glob(pattern))


def assert_all_under(rows: dict[str, list[tuple[Any, ...]]], key_id: str) -> None:
    for body, meta in rows["checkpoints"]:
        assert is_sealed(bytes(body)) and sealed_key_id(bytes(body)) == key_id
        token = json.loads(meta).get("$sealed")
        assert token is None or text_key_id(token) == key_id
    for (data,) in rows["blobs"] + rows["writes"] + rows["runs"]:
        assert is_sealed(bytes(data)) and sealed_key_id(bytes(data)) == key_id
    updates = [json.loads(p).get("update") for (p,) in rows["events"]]
    values = [v for u in updates if isinstance(u, dict) for v in u.values()]
    assert values and all(text_key_id(v) == key_id for v in values)


def sqlite_rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    with sqlite3.connect(path) as conn:
        return {
            "checkpoints": conn.execute("SELECT body, metadata FROM checkpoints").fetchall(),
            "blobs": conn.execute("SELECT data FROM blobs").fetchall(),
            "writes": conn.execute("SELECT data FROM writes").fetchall(),
            "events": conn.execute("SELECT payload FROM events WHERE kind = 'task.finished'").fetchall(),
            "runs": conn.execute("SELECT payload FROM runs WHERE payload IS NOT NULL").fetchall(),
        }


async def test_rekey_killed_at_random_points_ends_with_every_row_under_the_new_key(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    async with SqliteSaver(path, encryption=Keyring({"k1": OLD})) as saver:
        await fill(saver, 12)
        before = await reading(saver)
    killed = rekey_until_done(str(path), env_keys(("k2", NEW), ("k1", OLD)), kills=4, seed=26)
    assert killed >= 2  # it was cut off while working, more than once
    assert_all_under(sqlite_rows(path), "k2")
    async with SqliteSaver(path, encryption=Keyring({"k2": NEW})) as saver:  # the old key is gone
        assert await reading(saver) == before
        app = build(saver)
        done = await app.aresume("i0", "after rekey")
        assert done.values.answer == "after rekey" and done.values.tool == f"tool said {MARKER}"
    assert MARKER.encode() not in files(tmp_path, "r.db*")


async def test_rekey_encrypts_a_plaintext_database(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    async with SqliteSaver(path) as saver:
        await fill(saver, 2)
        before = await reading(saver)
    run = rekey_once(str(path), env_keys(("k2", NEW)))
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["rekeyed"]["blobs"] > 0
    assert_all_under(sqlite_rows(path), "k2")
    async with SqliteSaver(path, encryption=Keyring({"k2": NEW}), require_encryption=True) as saver:
        assert await reading(saver) == before
    with sqlite3.connect(path) as conn:
        conn.execute("VACUUM")  # the plaintext pages of the old rows go with it
    assert MARKER.encode() not in files(tmp_path, "p.db*")


async def test_rekey_on_postgres_killed_and_restarted(pg_schema: str) -> None:
    async with PostgresSaver(PG_DSN, schema=pg_schema, encryption=Keyring({"k1": OLD})) as saver:
        await fill(saver, 6)
        before = await reading(saver)
    db = f"{PG_DSN}?schema={pg_schema}"
    rekey_until_done(db, env_keys(("k2", NEW), ("k1", OLD)), kills=2, seed=7)
    import psycopg

    with psycopg.connect(PG_DSN) as conn:
        conn.execute(f'SET search_path TO "{pg_schema}"')
        rows = {
            "checkpoints": conn.execute("SELECT body, metadata::text FROM checkpoints").fetchall(),
            "blobs": conn.execute("SELECT data FROM blobs").fetchall(),
            "writes": conn.execute("SELECT data FROM writes").fetchall(),
            "events": conn.execute("SELECT payload::text FROM events WHERE kind = 'task.finished'").fetchall(),
            "runs": conn.execute("SELECT payload FROM runs WHERE payload IS NOT NULL").fetchall(),
        }
    assert_all_under(rows, "k2")
    async with PostgresSaver(PG_DSN, schema=pg_schema, encryption=Keyring({"k2": NEW})) as saver:
        assert await reading(saver) == before
