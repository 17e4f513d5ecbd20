"""Hostile stored bytes: rows tampered with directly in SQLite and PostgreSQL, then read through the public
API. Every read fails with :class:`CorruptCheckpointError` naming the thread and the checkpoint, within bounded
memory (checked in a child process under ``RLIMIT_AS``), and changes nothing in the database."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path
from typing import Annotated, Any

import psycopg
import pytest
from psycopg import sql
from pydantic import BaseModel
from support import REPO, child_env
from support.postgres import PG_DSN

from graphckpt import END, START, CorruptCheckpointError, StateGraph, append
from graphckpt.errors import InvalidArgumentError
from graphckpt.savers.postgres import PostgresSaver
from graphckpt.savers.sqlite import SqliteSaver
from graphckpt.serde import Serializer

ROOT = REPO


class Doc(BaseModel):
    doc: str = ""
    n: int = 0


def doc_app(saver: Any) -> Any:
    def write(s: Doc) -> dict[str, Any]:
        return {"doc": "compressible " * 100, "n": s.n + 1}

    g = StateGraph(Doc)
    g.add_node("write", write)
    g.add_edge(START, "write")
    g.add_edge("write", END)
    return g.compile(saver=saver)


@pytest.fixture
def schema(pg_schema_name: str) -> str:
    """A fresh PostgreSQL schema name, dropped after the test (conftest's ``pg_schema_name``)."""
    return pg_schema_name


def pg(schema: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        cur = conn.execute(query.encode(), params)
        return cur.fetchall() if cur.description is not None else []


def pg_dump(schema: str) -> list[Any]:
    """Every row of every graphckpt table, in a fixed order: to prove a read changed nothing."""
    return [
        sorted(pg(schema, f"SELECT * FROM {table}"), key=repr)
        for table in ("threads", "checkpoints", "blobs", "writes", "graphckpt_migrations")
    ]


async def written_thread(schema: str) -> tuple[str, str]:
    """A thread ``t`` whose head wrote a compressed ``doc`` blob; returns (head checkpoint id, first checkpoint id)."""
    app = doc_app(PostgresSaver(PG_DSN, schema=schema))
    try:
        snap = await app.ainvoke({}, thread_id="t")
        first = (await app.ahistory("t"))[-1].checkpoint_id
    finally:
        await app.aclose()
    [(kind,)] = pg(schema, "SELECT kind FROM blobs WHERE channel = 'doc' AND step = %s", (snap.step,))
    assert kind & 2, "the doc blob is stored compressed"
    return snap.checkpoint_id, first


def tamper_doc_blob(schema: str, data: bytes) -> None:
    pg(schema, "UPDATE blobs SET data = %s WHERE channel = 'doc' AND kind & 2 = 2", (data,))


def zstd_claiming(size: int, blocks: int = 3) -> bytes:
    """A zstd frame whose header claims ``size`` bytes, followed by ``blocks`` RLE blocks of 128 KiB (26 bytes for
    three blocks)."""
    header = b"\x28\xb5\x2f\xfd" + bytes([0xC0, 0x58]) + struct.pack("<Q", size)  # 8-byte size, window 2 MiB
    rle = [struct.pack("<I", (1 << 17) << 3 | 1 << 1 | (i == blocks - 1))[:3] + b"\x00" for i in range(blocks)]
    return header + b"".join(rle)


def zlib_bomb(mib: int) -> bytes:
    """A valid zlib stream of ``mib`` MiB of zeros, about 1 KiB per MiB: one 1 MiB piece compressed after a full
    flush always compresses the same, so it is made once and repeated."""
    z, piece = zlib.compressobj(9), bytes(1 << 20)
    first = z.compress(piece) + z.flush(zlib.Z_FULL_FLUSH)
    again = z.compress(piece) + z.flush(zlib.Z_FULL_FLUSH)
    adler = 1
    for _ in range(mib):
        adler = zlib.adler32(piece, adler)
    return first + again * (mib - 1) + b"\x03\x00" + struct.pack(">I", adler)  # an empty final block, the checksum


CORRUPT_ROWS = {
    "zstd-garbage": b"\x28\xb5\x2f\xfd" + b"\x01garbage" * 20,
    "zstd-truncated": None,  # made from the stored frame
    "zlib-garbage": b"\x78\x9c" + b"not deflate" * 20,
    "neither": b"\x00" * 200,
}


@pytest.mark.parametrize("case", sorted(CORRUPT_ROWS))
async def test_pg_corrupt_compressed_blob_is_a_corrupt_checkpoint_error_on_every_read(schema: str, case: str) -> None:
    head, first = await written_thread(schema)
    data = CORRUPT_ROWS[case]
    if data is None:
        [(stored,)] = pg(schema, "SELECT data FROM blobs WHERE channel = 'doc' AND kind & 2 = 2")
        data = bytes(stored)[:-4]
    tamper_doc_blob(schema, data)
    before = pg_dump(schema)
    app = doc_app(PostgresSaver(PG_DSN, schema=schema))
    try:
        reads = {
            "get_state": lambda: app.aget_state("t"),
            "get_state by id": lambda: app.aget_state("t", head),
            "history": lambda: _history_values(app),
            "diff": lambda: app.adiff(("t", first), ("t", None)),
        }
        for name, read in reads.items():
            with pytest.raises(CorruptCheckpointError) as info:
                await read()
            assert info.value.thread_id == "t", name
            assert info.value.checkpoint_id == head, name
            assert head in str(info.value) and "'t'" in str(info.value) and "'doc'" in str(info.value), name
    finally:
        await app.aclose()
    assert pg_dump(schema) == before


async def _history_values(app: Any) -> None:
    for snap in await app.ahistory("t"):
        _ = snap.values


BOMB_CHILD = textwrap.dedent(
    """
    import asyncio, resource, sys
    from test_hostile_storage import doc_app
    from graphckpt import CorruptCheckpointError
    from graphckpt.savers.postgres import PostgresSaver

    def vm_size():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

    async def main():
        app = doc_app(PostgresSaver(sys.argv[1], schema=sys.argv[2]))
        try:
            await app.aget_state("t", sys.argv[3])  # opens the saver, reads an untampered checkpoint
            resource.setrlimit(resource.RLIMIT_AS, (vm_size() + int(sys.argv[4]), resource.RLIM_INFINITY))
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            try:
                await app.aget_state("t")
            except CorruptCheckpointError as exc:
                grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss
                print("corrupt", grew, exc.thread_id, exc.checkpoint_id)
            except BaseException as exc:
                print("other", type(exc).__name__)
            else:
                print("read")
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            await app.aclose()

    asyncio.run(main())
    """
)

BUDGET = 256 << 20  # address space the hostile read may add to the child's


@pytest.mark.parametrize(
    "bomb",
    [
        pytest.param(lambda: zstd_claiming(3 << 30), id="zstd-26-bytes-claiming-3-GiB"),
        pytest.param(lambda: zstd_claiming(3 << 30, blocks=20_000), id="zstd-80-KB-claiming-3-GiB"),
        pytest.param(lambda: zstd_claiming(20_000 << 17, blocks=20_000), id="zstd-80-KB-honest-2.5-GiB"),
        pytest.param(lambda: zlib_bomb(2560), id="zlib-2.6-MB-inflating-to-2.5-GiB"),
    ],
)
def test_pg_decompression_bomb_is_refused_within_bounded_memory(schema: str, bomb: Any) -> None:
    head, first = asyncio.run(written_thread(schema))
    data = bomb()
    assert len(data) < 3 << 20
    tamper_doc_blob(schema, data)
    before = pg_dump(schema)
    env = child_env(ROOT, Path(__file__).parent, MALLOC_ARENA_MAX="2")  # this module and support import there
    out = subprocess.run(
        [sys.executable, "-c", BOMB_CHILD, PG_DSN, schema, first, str(BUDGET)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    verdict, grew_kib, thread_id, checkpoint_id = [*out.stdout.split(), "", "", "", ""][:4]
    assert verdict == "corrupt", out.stdout
    assert (thread_id, checkpoint_id) == ("t", head)
    print(f"peak RSS grew by {int(grew_kib)} KiB")
    assert int(grew_kib) < 64 << 10
    assert pg_dump(schema) == before


def test_the_bombs_are_what_they_say() -> None:
    assert zlib.decompress(zlib_bomb(3)) == bytes(3 << 20)
    assert 2_500_000 < len(zlib_bomb(2560)) < 2_700_000
    import zstandard

    frame = zstd_claiming(3 << 17)
    assert len(frame) == 26
    assert zstandard.get_frame_parameters(frame).content_size == 3 << 17
    assert zstandard.ZstdDecompressor().decompress(frame) == bytes(3 << 17)


# -- item 10: other hostile rows ----------------------------------------------------------------------------------


class Notes(BaseModel):
    notes: Annotated[list[str], append] = []
    n: int = 0


def notes_app(saver: Any) -> Any:
    def step(s: Notes) -> dict[str, Any]:
        return {"notes": [f"note {s.n}"], "n": s.n + 1}

    g = StateGraph(Notes)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s.n < 3 else END)
    return g.compile(saver=saver)


def sqlite_rows(path: Path, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        return conn.execute(query, params).fetchall()


def sqlite_dump(path: Path) -> list[Any]:
    return [sorted(sqlite_rows(path, f"SELECT * FROM {t}"), key=repr) for t in ("threads", "checkpoints", "blobs")]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_reducer_snapshot_of_the_wrong_type_is_corrupt_naming_the_channel(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    path = tmp_path / "c.db"
    schema = request.getfixturevalue("schema") if kind == "postgres" else ""

    def saver() -> Any:
        return SqliteSaver(path) if kind == "sqlite" else PostgresSaver(PG_DSN, schema=schema)

    app = notes_app(saver())
    try:
        head = await app.ainvoke({}, thread_id="t")
    finally:
        await app.aclose()
    assert head.values.notes == ["note 0", "note 1", "note 2"]
    five = Serializer().dumps(5)
    update = "UPDATE blobs SET data = ? WHERE channel = 'notes' AND kind = 'snapshot'"
    if kind == "sqlite":
        sqlite_rows(path, update, (five,))
        before = sqlite_dump(path)
    else:
        pg(schema, "UPDATE blobs SET data = %s WHERE channel = 'notes' AND kind = 0", (five,))
        before = pg_dump(schema)
    app = notes_app(saver())
    try:
        with pytest.raises(CorruptCheckpointError, match=r"channel 'notes'.*do not fold \(TypeError") as info:
            await app.aget_state("t")
        assert (info.value.thread_id, info.value.checkpoint_id) == ("t", head.checkpoint_id)
    finally:
        await app.aclose()
    assert (sqlite_dump(path) if kind == "sqlite" else pg_dump(schema)) == before


@pytest.mark.parametrize("size", [1025, 3000, 1_000_000])
async def test_pg_a_megabyte_thread_id_gives_a_short_error_without_sql(schema: str, size: int) -> None:
    """An id past 1,024 bytes is refused before PostgreSQL sees it (a 3,000-byte key failed in the btree index,
    quoting its internals): one short line naming the id and the limit, nothing stored."""
    app = doc_app(PostgresSaver(PG_DSN, schema=schema))
    try:
        with pytest.raises(InvalidArgumentError) as info:
            await app.ainvoke({}, thread_id="x" * size)
        assert [t.thread_id for t in await app.athreads()] == []
    finally:
        await app.aclose()
    message = str(info.value)
    assert len(message) < 200 and "\n" not in message, message[:2000]
    assert "x" * min(size, 80) in message and f"{size:,} bytes" in message and "at most 1,024 bytes" in message
    for leak in ("SELECT", "INSERT", "graphckpt_commit", "PL/pgSQL", "CONTEXT", "LINE", "index"):
        assert leak not in message, message


HUGE = "1" * 5000


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_huge_numbers_and_times_in_stored_metadata_read_back(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Metadata rows edited to hold a 5000-digit integer, 1e999 and a time near the end of doubles: every saver read
    returns them (the integer as a float), never a ``ValueError`` from the JSON parser."""
    path = tmp_path / "c.db"
    schema = request.getfixturevalue("schema") if kind == "postgres" else ""
    saver: Any = SqliteSaver(path) if kind == "sqlite" else PostgresSaver(PG_DSN, schema=schema)
    app = doc_app(saver)
    try:
        await app.ainvoke({}, thread_id="t")
    finally:
        await app.aclose()
    meta = f'{{"big":{HUGE},"inf":1e999,"source":"loop","step":1}}'
    if kind == "sqlite":
        sqlite_rows(path, "UPDATE checkpoints SET metadata = ?, created_at = 1e308", (meta,))
        sqlite_rows(path, "UPDATE threads SET metadata = ?, updated_at = 1e308", (meta,))
    else:
        pg(schema, "UPDATE checkpoints SET metadata = %s::json, created_at = 1e308", (meta,))
        pg(schema, "UPDATE threads SET metadata = %s::json, updated_at = 1e308", (meta,))
    saver = SqliteSaver(path) if kind == "sqlite" else PostgresSaver(PG_DSN, schema=schema)
    async with saver:
        record = await saver.get_thread("t")
        assert record is not None and dict(record.metadata)["big"] == float("inf")
        assert record.updated_at == 1e308
        for cp in await saver.list_checkpoints("t"):
            assert dict(cp.metadata) == {"big": float("inf"), "inf": float("inf"), "source": "loop", "step": 1}
            assert cp.created_at == 1e308
        assert len(await saver.list_checkpoints("t", filter={"source": "loop"})) == 2
        assert await saver.list_checkpoints("t", filter={"big": 1}) == []


async def test_sqlite_metadata_that_is_not_json_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    app = doc_app(SqliteSaver(path))
    try:
        await app.ainvoke({}, thread_id="t")
    finally:
        await app.aclose()
    sqlite_rows(path, "UPDATE checkpoints SET metadata = '[1, 2'")
    async with SqliteSaver(path) as saver:
        [cp, _] = await saver.list_checkpoints("t")
        with pytest.raises(CorruptCheckpointError, match="stored metadata is not JSON"):
            dict(cp.metadata)


def _cli(db: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "graphckpt.cli", "--db", db, *args],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def _tampered(kind: str, tmp_path: Path, request: pytest.FixtureRequest, sqlite_sql: str, pg_sql: str) -> Any:
    """A thread ``t`` of two checkpoints, its rows edited; returns ``(a fresh saver factory, the CLI's --db)``."""
    path = tmp_path / "c.db"
    schema = request.getfixturevalue("schema") if kind == "postgres" else ""

    def fresh() -> Any:
        return SqliteSaver(path) if kind == "sqlite" else PostgresSaver(PG_DSN, schema=schema)

    app = doc_app(fresh())
    try:
        await app.ainvoke({}, thread_id="t")
    finally:
        await app.aclose()
    if kind == "sqlite":
        sqlite_rows(path, sqlite_sql)
    else:
        pg(schema, pg_sql)
    return fresh, str(path) if kind == "sqlite" else f"{PG_DSN}?schema={schema}"


READING_COMMANDS = (["show", "t"], ["show", "t", "--json"], ["history", "t"], ["history", "t", "--json"], ["threads"])


@pytest.mark.parametrize(
    ("kind", "created"),
    [(k, c) for k in ("sqlite", "postgres") for c in ("1e300", "'Infinity'", "'-Infinity'")] + [("postgres", "'NaN'")],
)  # SQLite keeps NaN as NULL, which its NOT NULL column refuses
async def test_a_stored_time_that_is_no_date_is_corrupt_naming_thread_and_checkpoint(
    kind: str, created: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A ``created_at`` edited to 1e300, an infinity or NaN: ``get_state`` and ``history`` raise
    ``CorruptCheckpointError`` naming the thread and the checkpoint (never ``OverflowError`` or ``ValueError``), and
    every reading command ends without a traceback."""
    sqlite_value = {"'Infinity'": "9e999", "'-Infinity'": "-9e999"}.get(created, created)
    fresh, db = await _tampered(
        kind,
        tmp_path,
        request,
        f"UPDATE checkpoints SET created_at = {sqlite_value}",
        f"UPDATE checkpoints SET created_at = {created}",
    )
    app = doc_app(fresh())
    try:
        head = (await app.aget_state("t")).checkpoint_id
        with pytest.raises(CorruptCheckpointError, match=rf"checkpoint '{head}' of thread 't' .*not a date"):
            (await app.aget_state("t")).created_at  # noqa: B018
        with pytest.raises(CorruptCheckpointError, match="of thread 't'"):
            [snap.created_at for snap in await app.ahistory("t")]
    finally:
        await app.aclose()
    for args in READING_COMMANDS:
        result = _cli(db, *args)
        assert "Traceback" not in result.stderr and "Error:" not in result.stderr, (args, result.stderr)


@pytest.mark.parametrize("metadata", ["[1, 2]", '"text"', "7", "null"])
async def test_pg_metadata_that_is_not_an_object_is_corrupt(
    metadata: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """On PostgreSQL, checkpoint and thread metadata edited to a JSON array, string, number or null: reading it is
    ``CorruptCheckpointError`` (as on SQLite), never ``AttributeError`` or ``TypeError``, in the API and the CLI."""
    fresh, db = await _tampered(
        "postgres",
        tmp_path,
        request,
        "",
        f"UPDATE checkpoints SET metadata = '{metadata}'::json; UPDATE threads SET metadata = '{metadata}'::json",
    )
    app = doc_app(fresh())
    try:
        with pytest.raises(CorruptCheckpointError, match="not a JSON object"):
            dict((await app.aget_state("t")).metadata)
        with pytest.raises(CorruptCheckpointError, match="not a JSON object"):
            [dict(snap.metadata) for snap in await app.ahistory("t")]
        with pytest.raises(CorruptCheckpointError, match="not a JSON object"):
            [dict(info.metadata) for info in await app.athreads()]
    finally:
        await app.aclose()
    for args in (*READING_COMMANDS, ["diff", "t", "t"], ["export", "t"]):
        result = _cli(db, *args)
        assert "Traceback" not in result.stderr, (args, result.stderr)
        assert result.returncode in (0, 1), (args, result.returncode, result.stderr)
