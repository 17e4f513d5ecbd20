"""``graphckpt rekey``: every sealed field of every row re-encrypted under the keyring's current key, in batches.

Each table is walked in primary-key order, ``batch`` rows per transaction; a row whose fields are all under the
current key is left alone, any other field (under an older key, or plaintext: rekeying a plaintext database
encrypts it) is opened with the keyring and sealed again with the same associated data (see
:mod:`graphckpt.savers._sealing`). Nothing is kept between runs: a rekey killed at any point (SIGKILL included)
loses at most its open transaction, and the next run finds the rows still to do by looking at their key ids. An
update is a compare-and-set on the value it read, so a row a running app rewrote meanwhile is not overwritten
(the next run looks at it again).

Run it after every process has the new key first in ``GRAPHCKPT_ENCRYPTION_KEYS`` (so nothing new is sealed under
the old one), and drop the old key only after a run that reports nothing left.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from graphckpt.encryption import Keyring, is_sealed, sealed_key_id, text_key_id
from graphckpt.savers._sealing import PLAIN_METADATA, SEALED_KEY, Sealer, context, is_token
from graphckpt.savers.events import encode_payload

__all__ = ["Rekeyed", "rekey_postgres", "rekey_sqlite"]

Fix = Callable[[Sealer, Mapping[str, Any]], dict[str, Any] | None]
"""A row's new values for the columns that must change, or ``None`` when it is already under the current key."""


@dataclass
class Rekeyed:
    """What a rekey changed, per table."""

    rows: dict[str, int] = field(default_factory=dict)
    checked: dict[str, int] = field(default_factory=dict)


def _bytes_fix(sealer: Sealer, data: bytes, ctx: bytes, what: str) -> bytes | None:
    ring = _ring(sealer)
    if is_sealed(data) and sealed_key_id(data) == ring.current_id:
        return None
    return ring.seal(sealer.open_value(data, ctx, what), ctx)


def _meta_fix(sealer: Sealer, text: str, tid: str, cid: str) -> str | None:
    ring = _ring(sealer)
    meta = json.loads(text)
    token = meta.get(SEALED_KEY)
    hidden = [k for k in meta if k not in PLAIN_METADATA and k not in (SEALED_KEY, "tags")]
    tags = meta.get("tags")
    shown = ring.plain_tags | {"graph"}
    hidden_tags = isinstance(tags, dict) and any(k not in shown for k in tags)
    current = token is None or (isinstance(token, str) and text_key_id(token) == ring.current_id)
    if current and not hidden and not hidden_tags:
        return None
    opened = sealer.open_metadata(meta, tid, cid)
    return encode_payload(sealer.seal_metadata(ring, opened, tid, cid))


def _checkpoint(sealer: Sealer, row: Mapping[str, Any]) -> dict[str, Any] | None:
    tid, cid = row["thread_id"], row["checkpoint_id"]
    out: dict[str, Any] = {}
    body = _bytes_fix(sealer, bytes(row["body"]), context("body", tid, cid), f"checkpoint {cid} of thread {tid!r}")
    if body is not None:
        out["body"] = body
    meta = _meta_fix(sealer, _text(row["metadata"]), tid, cid)
    if meta is not None:
        out["metadata"] = meta
    return out or None


def _thread(sealer: Sealer, row: Mapping[str, Any]) -> dict[str, Any] | None:
    meta = _meta_fix(sealer, _text(row["metadata"]), row["thread_id"], row["head_checkpoint_id"])
    return None if meta is None else {"metadata": meta}


def _blob(sealer: Sealer, row: Mapping[str, Any]) -> dict[str, Any] | None:
    tid, channel, step, kind = row["thread_id"], row["channel"], row["step"], row["kind"]
    data = bytes(row["data"])
    if not isinstance(kind, str):  # PostgreSQL: a code, with a flag when the saver compressed the plaintext
        from graphckpt.savers._inflate import inflate
        from graphckpt.savers._pg_wire import COMPRESSED, KIND_CODE, KIND_NAME

        name = KIND_NAME[kind]
        if kind & COMPRESSED:
            data = inflate(data)
        what = f"the {name} of channel {channel!r} at step {step} of thread {tid!r}"
        fixed = _bytes_fix(sealer, data, context("blob", tid, channel, step, name), what)
        return None if fixed is None else {"data": fixed, "kind": KIND_CODE[name]}
    what = f"the {kind} of channel {channel!r} at step {step} of thread {tid!r}"
    fixed = _bytes_fix(sealer, data, context("blob", tid, channel, step, kind), what)
    return None if fixed is None else {"data": fixed}


def _write(sealer: Sealer, row: Mapping[str, Any]) -> dict[str, Any] | None:
    ctx = context("write", row["thread_id"], row["checkpoint_id"], row["task_id"], row["kind"], row["idx"])
    what = f"the {row['kind']} write {row['idx']} of task {row['task_id']!r} in thread {row['thread_id']!r}"
    fixed = _bytes_fix(sealer, bytes(row["data"]), ctx, what)
    return None if fixed is None else {"data": fixed}


def _run(sealer: Sealer, row: Mapping[str, Any]) -> dict[str, Any] | None:
    if row["payload"] is None:
        return None
    ctx = context("run", row["run_id"], row["thread_id"], row["kind"])
    fixed = _bytes_fix(sealer, bytes(row["payload"]), ctx, f"the payload of run {row['run_id']!r}")
    return None if fixed is None else {"payload": fixed}


def _wait(sealer: Sealer, row: Mapping[str, Any]) -> dict[str, Any] | None:
    if row["answer"] is None:
        return None
    ctx = context("wait", row["thread_id"], row["checkpoint_id"])
    fixed = _bytes_fix(sealer, bytes(row["answer"]), ctx, f"the answer of the wait of thread {row['thread_id']!r}")
    return None if fixed is None else {"answer": fixed}


def _event(sealer: Sealer, row: Mapping[str, Any]) -> dict[str, Any] | None:
    if row["kind"] != "task.finished":
        return None
    ring = _ring(sealer)
    payload = json.loads(_text(row["payload"]))
    update = payload.get("update")
    if not isinstance(update, dict) or not update:
        return None
    if all(is_token(v) and text_key_id(v) == ring.current_id for v in update.values()):
        return None
    tid, step, task_id = row["thread_id"], row["step"], str(payload.get("task_id"))
    sealed = {}
    for key, value in update.items():
        ctx = context("event", tid, step, task_id, key)
        plain = sealer.open_token(value, ctx, f"event {tid}:{step}:{row['seq']}") if is_token(value) else value
        sealed[key] = ring.seal_text(encode_payload({"v": plain}), ctx)
    return {"payload": encode_payload({**payload, "update": sealed})}


@dataclass(frozen=True)
class _Table:
    name: str
    keys: tuple[str, ...]
    values: tuple[str, ...]
    fix: Fix
    json: tuple[str, ...] = ()
    """Columns of JSON text (``json`` on PostgreSQL: read as text, written back cast)."""


TABLES = (
    _Table("checkpoints", ("thread_id", "step"), ("checkpoint_id", "metadata", "body"), _checkpoint, ("metadata",)),
    _Table("threads", ("thread_id",), ("head_checkpoint_id", "metadata"), _thread, ("metadata",)),
    _Table("blobs", ("thread_id", "channel", "step"), ("kind", "data"), _blob),
    _Table("writes", ("thread_id", "checkpoint_id", "task_id", "kind", "idx"), ("data",), _write),
    _Table("events", ("id",), ("thread_id", "step", "seq", "kind", "payload"), _event, ("payload",)),
    _Table("runs", ("run_id",), ("thread_id", "kind", "payload"), _run),
    _Table("waits", ("thread_id",), ("checkpoint_id", "answer"), _wait),
)


def rekey_sqlite(path: str, keyring: Keyring, *, batch: int = 200, busy_timeout: float = 30.0) -> Rekeyed:
    """Rekey the SQLite database at ``path`` (see the module docstring): one ``BEGIN IMMEDIATE`` transaction per
    batch, reading and writing under the write lock."""
    sealer = Sealer(keyring, require=False)
    done = Rekeyed()
    conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None)
    try:
        for table in TABLES:
            after: tuple[Any, ...] | None = None
            while True:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    rows = _select(conn, table, after, batch, "?", "")
                    for row in rows:
                        new = table.fix(sealer, row)
                        if new is not None:
                            sets = ", ".join(f"{c} = ?" for c in new)
                            where = " AND ".join(f"{k} = ?" for k in table.keys)
                            params = [*new.values(), *(row[k] for k in table.keys)]
                            conn.execute(f"UPDATE {table.name} SET {sets} WHERE {where}", params)
                            done.rows[table.name] = done.rows.get(table.name, 0) + 1
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                done.checked[table.name] = done.checked.get(table.name, 0) + len(rows)
                if len(rows) < batch:
                    break
                after = tuple(rows[-1][k] for k in table.keys)
    finally:
        conn.close()
    return done


def rekey_postgres(dsn: str, schema: str | None, keyring: Keyring, *, batch: int = 200) -> Rekeyed:
    """Rekey the PostgreSQL tables in ``schema`` (or the ``search_path``): one transaction per batch, each update a
    compare-and-set on the value read."""
    import psycopg
    from psycopg import sql

    sealer = Sealer(keyring, require=False)
    done = Rekeyed()
    with psycopg.connect(dsn, autocommit=False) as conn:
        if schema:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
            conn.commit()
        for table in TABLES:
            after: tuple[Any, ...] | None = None
            while True:
                with conn.transaction():
                    rows = _select(conn, table, after, batch, "%s", "::text")
                    for row in rows:
                        new = table.fix(sealer, row)
                        if new is None:
                            continue
                        json_cols = {c for c in new if c in table.json}
                        sets = ", ".join(f"{c} = %s::json" if c in json_cols else f"{c} = %s" for c in new)
                        where = " AND ".join(f"{k} = %s" for k in table.keys)
                        guard = " AND ".join(f"{c}::text = %s" if c in json_cols else f"{c} = %s" for c in new)
                        params = [*new.values(), *(row[k] for k in table.keys), *(row[c] for c in new)]
                        conn.execute(f"UPDATE {table.name} SET {sets} WHERE {where} AND {guard}", params)
                        done.rows[table.name] = done.rows.get(table.name, 0) + 1
                done.checked[table.name] = done.checked.get(table.name, 0) + len(rows)
                if len(rows) < batch:
                    break
                after = tuple(rows[-1][k] for k in table.keys)
    return done


def _select(
    conn: Any, table: _Table, after: tuple[Any, ...] | None, batch: int, mark: str, as_text: str
) -> list[dict[str, Any]]:
    columns = [*table.keys, *(f"{c}{as_text}" if c in table.json else c for c in table.values)]
    names = [*table.keys, *table.values]
    where = ""
    params: list[Any] = []
    if after is not None:
        where = f"WHERE ({', '.join(table.keys)}) > ({', '.join(mark for _ in table.keys)})"
        params = list(after)
    query = f"SELECT {', '.join(columns)} FROM {table.name} {where} ORDER BY {', '.join(table.keys)} LIMIT {int(batch)}"
    rows = conn.execute(query, params).fetchall()
    return [dict(zip(names, row, strict=True)) for row in rows]


def _ring(sealer: Sealer) -> Keyring:
    assert sealer.keyring is not None
    return sealer.keyring


def _text(value: Any) -> str:
    return bytes(value).decode() if isinstance(value, bytes | bytearray | memoryview) else str(value)
