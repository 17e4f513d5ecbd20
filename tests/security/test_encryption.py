"""Encryption at rest: with a keyring, a marker string written to state, an interrupt payload, a journaled tool
result, a resume answer, run tags and a streamed update appears nowhere in the SQLite files or in a ``pg_dump`` of
the PostgreSQL schema, and everything reads, resumes, forks, diffs and streams exactly as without it. A missing or
wrong key is one :class:`EncryptionError` naming the key id."""

from __future__ import annotations

import os
import subprocess
from glob import glob
from pathlib import Path
from typing import Any

import pytest
from support.postgres import PG_DSN
from support.sealed_world import MARKER, build, scenario

from graphckpt.encryption import Keyring
from graphckpt.errors import EncryptionError
from graphckpt.savers.postgres import PostgresSaver
from graphckpt.savers.sqlite import SqliteSaver

K1, K2 = os.urandom(32), os.urandom(32)


def sqlite_bytes(path: Path) -> bytes:
    return b"".join(Path(p).read_bytes() for p in glob(f"{path}*"))


def pg_dump(schema: str) -> bytes:
    (binary,) = glob("/usr/lib/postgresql/*/bin/pg_dump")[-1:]
    return subprocess.run([binary, "-d", PG_DSN, "-n", schema], check=True, capture_output=True, timeout=60).stdout


async def run_sqlite(path: Path, keyring: Keyring | None) -> tuple[dict[str, Any], bytes]:
    saver = SqliteSaver(path, encryption=keyring)
    async with saver:
        seen = await scenario(build(saver))
        on_disk = sqlite_bytes(path)  # the WAL too, before closing checkpoints it
    return seen, on_disk + sqlite_bytes(path)


async def test_sqlite_files_hold_no_marker_and_everything_reads_the_same(tmp_path: Path) -> None:
    plain, plain_disk = await run_sqlite(tmp_path / "plain.db", None)
    assert MARKER.encode() in plain_disk  # the control: without a key the marker is on disk
    sealed, sealed_disk = await run_sqlite(tmp_path / "sealed.db", Keyring({"k1": K1}))
    assert MARKER.encode() not in sealed_disk
    assert sealed == plain
    assert any(MARKER in str(e) for e in sealed["events"])  # the streamed updates came back decrypted


async def test_postgres_dump_holds_no_marker_and_everything_reads_the_same(pg_schema: str) -> None:
    plain_schema = pg_schema + "_p"
    try:
        async with PostgresSaver(PG_DSN, schema=plain_schema) as saver:
            plain = await scenario(build(saver))
        assert MARKER.encode() in pg_dump(plain_schema)
    finally:
        import psycopg

        async with await psycopg.AsyncConnection.connect(PG_DSN, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{plain_schema}" CASCADE')
    async with PostgresSaver(PG_DSN, schema=pg_schema, encryption=Keyring({"k1": K1})) as saver:
        sealed = await scenario(build(saver))
    assert MARKER.encode() not in pg_dump(pg_schema)
    assert sealed == plain


async def test_a_missing_or_wrong_key_is_one_error_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "k.db"
    async with SqliteSaver(path, encryption=Keyring({"k1": K1})) as saver:
        await scenario(build(saver))
    async with SqliteSaver(path) as saver:  # no key at all
        with pytest.raises(EncryptionError, match="encrypted with key 'k1', and no key is configured") as info:
            await build(saver).aget_state("t1")
        assert info.value.key_id == "k1"
    async with SqliteSaver(path, encryption=Keyring({"k2": K2})) as saver:  # another key only
        with pytest.raises(EncryptionError, match="key 'k1', which the keyring does not hold"):
            await build(saver).aget_state("t1")
    async with SqliteSaver(path, encryption=Keyring({"k1": K2})) as saver:  # the right id, the wrong key
        with pytest.raises(EncryptionError, match="does not decrypt with key 'k1'"):
            await build(saver).aget_state("t1")
    async with SqliteSaver(path, encryption=Keyring([("k2", K2), ("k1", K1)])) as saver:  # rotated: k1 still opens
        assert (await build(saver).aget_state("t1")).values.answer == f"yes {MARKER}"


async def test_a_ciphertext_moved_to_another_row_does_not_open(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "m.db"
    ring = Keyring({"k1": K1})
    async with SqliteSaver(path, encryption=ring) as saver:
        await scenario(build(saver))
    with sqlite3.connect(path) as conn:  # the fork's head body replaced by the source's
        body = conn.execute(
            "SELECT body FROM checkpoints WHERE thread_id = 't1' ORDER BY step DESC LIMIT 1"
        ).fetchone()[0]
        conn.execute(
            "UPDATE checkpoints SET body = ? WHERE thread_id = 't1-f' AND step = "
            "(SELECT max(step) FROM checkpoints WHERE thread_id = 't1-f')",
            (body,),
        )
    async with SqliteSaver(path, encryption=ring) as saver:
        with pytest.raises(EncryptionError, match="moved from another row"):
            await build(saver).aget_state("t1-f")
        assert (await build(saver).aget_state("t1")).values.answer == f"yes {MARKER}"


async def test_require_encryption_refuses_plaintext_rows(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    async with SqliteSaver(path) as saver:
        await build(saver).ainvoke({}, thread_id="plain")
    async with SqliteSaver(path, encryption=Keyring({"k1": K1}), require_encryption=True) as saver:
        with pytest.raises(EncryptionError, match="plaintext, and encryption is required"):
            await build(saver).aget_state("plain")
    with pytest.raises(EncryptionError, match="needs a keyring"):
        SqliteSaver(path, require_encryption=True)


async def test_keys_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import base64

    monkeypatch.setenv(
        "GRAPHCKPT_ENCRYPTION_KEYS", f"k2:{base64.b64encode(K2).decode()},k1:{base64.b64encode(K1).decode()}"
    )
    path = tmp_path / "e.db"
    async with SqliteSaver(path) as saver:
        assert saver.sealer.keyring is not None and saver.sealer.keyring.current_id == "k2"
        await scenario(build(saver))
    assert MARKER.encode() not in sqlite_bytes(path)
    monkeypatch.setenv("GRAPHCKPT_ENCRYPTION_KEYS", "k1:not base64!")
    with pytest.raises(EncryptionError, match="key 'k1' is not valid base64"):
        SqliteSaver(path)
    monkeypatch.setenv("GRAPHCKPT_ENCRYPTION_KEYS", f"k1:{base64.b64encode(b'short').decode()}")
    with pytest.raises(EncryptionError, match="key 'k1' must be 16, 24 or 32 bytes, not 5"):
        SqliteSaver(path)


async def test_filtering_on_encrypted_metadata_is_refused(tmp_path: Path) -> None:
    async with SqliteSaver(tmp_path / "f.db", encryption=Keyring({"k1": K1}, plain_tags=["team"])) as saver:
        app = build(saver)
        await app.ainvoke({}, thread_id="a", tags={"team": "x", "customer": MARKER})
        assert [s.step for s in await app.ahistory("a", filter={"source": "loop", "step": 1})] == [1]
        with pytest.raises(EncryptionError, match="cannot filter on tag 'customer': it is encrypted"):
            await app.ahistory("a", filter={"tags": {"customer": MARKER}})
        assert (await app.aget_state("a")).metadata["tags"] == {"team": "x", "customer": MARKER}
    assert MARKER.encode() not in sqlite_bytes(tmp_path / "f.db")


def cli(db: Path, *args: str, keys: str | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("GRAPHCKPT_ENCRYPTION_KEYS", None)
    if keys is not None:
        env["GRAPHCKPT_ENCRYPTION_KEYS"] = keys
    command = [sys.executable, "-m", "graphckpt", *args, "--db", str(db)]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, input=stdin)


def keys_of(*pairs: tuple[str, bytes]) -> str:
    import base64

    return ",".join(f"{kid}:{base64.b64encode(key).decode()}" for kid, key in pairs)


async def test_an_export_stays_encrypted_unless_decrypt(tmp_path: Path) -> None:
    """``graphckpt export`` of an encrypted thread writes its sealed bytes: the marker is nowhere in the file, and it
    imports into another database holding the key (refused, naming the key, by one without it); ``--decrypt``
    writes plaintext, which imports anywhere. Both imports read back as the source."""
    path = tmp_path / "x.db"
    async with SqliteSaver(path, encryption=Keyring({"k1": K1})) as saver:
        await scenario(build(saver))
        source = await build(saver).aget_state("t1-f")
        source_history = [h.values for h in await build(saver).ahistory("t1-f")]
    k1 = keys_of(("k1", K1))
    sealed = cli(path, "export", "t1-f", keys=k1)
    assert sealed.returncode == 0, sealed.stderr
    assert MARKER not in sealed.stdout and '"kind":"checkpoint"' in sealed.stdout
    refused = cli(tmp_path / "nokey.db", "import", "-", stdin=sealed.stdout)
    assert refused.returncode != 0 and "encrypted with key 'k1', and no key is configured" in refused.stderr
    assert "Traceback" not in refused.stderr
    rotated = keys_of(("k2", K2), ("k1", K1))  # the target seals under its own current key, k2
    imported = cli(tmp_path / "keyed.db", "import", "-", keys=rotated, stdin=sealed.stdout)
    assert imported.returncode == 0, imported.stderr
    plain = cli(path, "export", "t1-f", "--decrypt", keys=k1)
    assert plain.returncode == 0, plain.stderr
    assert MARKER in plain.stdout
    assert cli(tmp_path / "plain.db", "import", "-", stdin=plain.stdout).returncode == 0
    assert MARKER.encode() in sqlite_bytes(tmp_path / "plain.db")
    assert MARKER.encode() not in sqlite_bytes(tmp_path / "keyed.db")
    for target, ring in (("keyed.db", Keyring([("k2", K2), ("k1", K1)])), ("plain.db", None)):
        async with SqliteSaver(tmp_path / target, encryption=ring) as saver:
            app = build(saver)
            assert (await app.aget_state("t1-f")).values == source.values
            assert [h.values for h in await app.ahistory("t1-f")] == source_history
            fork = await app.afork("t1-f", step=1, new_thread_id="again")
            assert fork.values == source_history[-2]


async def test_subgraph_child_threads_are_sealed_and_resume(tmp_path: Path) -> None:
    """A subgraph's child thread is stored through the same saver: its interrupt and values are sealed, and the
    parent resumes it through the answer as without encryption."""
    from support.subgraphs import child_graph, parent_graph

    seen = []
    for name, ring in (("plain", None), ("sealed", Keyring({"k1": K1}, require=True))):
        path = tmp_path / f"{name}.db"
        async with SqliteSaver(path, encryption=ring) as saver:
            app = parent_graph(child_graph({}, ask=True), saver, {})
            first = await app.ainvoke({"x": 1}, thread_id="p")
            done = await app.aresume("p", f"yes {MARKER}")
            history = await app.ahistory("p", subgraphs=True)
            seen.append(
                (first.status, done.values, [(tuple(n.split(":")[0] for n in h.namespace), h.values) for h in history])
            )
        if ring is not None:
            assert MARKER.encode() not in sqlite_bytes(path)
    assert seen[0] == seen[1] and seen[1][0] == "interrupted"
    assert f"c2:yes {MARKER}" in seen[1][1]["log"]
