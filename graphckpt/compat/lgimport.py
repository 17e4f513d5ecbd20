"""Moving a LangGraph SqliteSaver or PostgresSaver database into graphckpt: :func:`import_langgraph`.

The source is read with LangGraph's own ``SqliteSaver`` (its ``checkpoints`` and ``writes`` tables) or
``PostgresSaver`` (``checkpoints``, ``checkpoint_blobs``, ``checkpoint_writes``; read-only) and LangGraph's
``JsonPlusSerializer`` restricted to an allow-list: LangGraph's built-in safe types (``SAFE_MSGPACK_TYPES``: messages,
``Send``, ``Interrupt``, ``Command``, dates, ...) plus the classes the caller names. Every extension value is checked
*before* LangGraph's hook sees it: a type outside the list stops the import with
:class:`~graphckpt.errors.SerializationError` naming it (LangGraph's own strict mode would return its raw fields
silently), and pickled values are refused. Each checkpoint, oldest first per thread and namespace, is written with its
parent and pending writes through :class:`~graphckpt.compat.langgraph.GraphckptSaver`, so the result is what a
LangGraph graph running on graphckpt would have stored.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphckpt.errors import GraphckptError, SerializationError

__all__ = ["ImportReport", "import_langgraph"]

_CONSTRUCTORS = (0, 1, 2, 4, 5)  # LangGraph's msgpack ext codes that build a class named in the payload
_METHOD, _NUMPY, _DELTA = 3, 6, 7


@dataclass(slots=True)
class ImportReport:
    threads: int = 0
    checkpoints: int = 0
    writes: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    thread_ids: list[str] = field(default_factory=list)


class _Refused(Exception):
    pass


def _guarded_serde(allowed: set[tuple[str, str]]) -> Any:
    """LangGraph's JsonPlusSerializer over ``allowed``, refusing anything else by name."""
    import ormsgpack
    from langgraph.checkpoint.serde import _msgpack
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer, _create_msgpack_ext_hook

    allow = set(_msgpack.SAFE_MSGPACK_TYPES) | allowed
    inner = _create_msgpack_ext_hook(allow)

    def check(code: int, data: bytes) -> None:
        if code == _NUMPY:
            refuse("a numpy array (msgpack extension 6)")
        if code not in (*_CONSTRUCTORS, _METHOD, _DELTA):
            refuse(f"msgpack extension {code}")
        try:
            tup = ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
        except ValueError:  # ormsgpack replaces a hook's exception by its own: the refusal is kept in ``refused``
            if refused:
                raise _Refused(refused[0]) from None
            raise
        if code == _DELTA:
            return
        if not isinstance(tup, list | tuple) or len(tup) < 2 or not all(isinstance(x, str) for x in tup[:2]):
            refuse(f"msgpack extension {code} of the wrong shape")
        if code == _METHOD:
            if (tup[0], tup[1], tup[3]) not in _msgpack.SAFE_MSGPACK_METHODS:
                refuse(f"{tup[0]}.{tup[1]}.{tup[3]}")
        elif (tup[0], tup[1]) not in allow:
            refuse(f"{tup[0]}.{tup[1]}")

    refused: list[str] = []

    def refuse(what: str) -> None:
        refused.append(what)
        raise _Refused(what)

    def hook(code: int, data: bytes) -> Any:
        check(code, data)
        return inner(code, data)

    serde = JsonPlusSerializer(allowed_msgpack_modules=tuple(allow), __unpack_ext_hook__=hook)
    loads = serde.loads_typed

    def guarded(data: tuple[str, bytes]) -> Any:
        kind = data[0]
        if kind not in ("null", "bytes", "bytearray", "msgpack", "json"):
            raise _Refused(f"a value stored as {kind!r}")
        refused.clear()
        try:
            return loads(data)
        except ValueError:
            if refused:
                raise _Refused(refused[0]) from None
            raise

    serde.loads_typed = guarded  # type: ignore[method-assign]
    return serde


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def import_langgraph(
    source: str | Path,
    target: Any,
    *,
    allow: Iterable[type] = (),
    progress: Callable[[str], None] | None = None,
) -> ImportReport:
    """Copy every thread of a LangGraph database into ``target`` (a
    :class:`~graphckpt.compat.langgraph.GraphckptSaver`, which must know the ``allow`` types too): a SqliteSaver
    file, or a PostgresSaver database given as a ``postgresql://`` URL (``?schema=NAME`` for tables outside the
    search path). The source is only read."""
    allowed = {(tp.__module__, tp.__qualname__) for tp in allow}
    report = ImportReport()
    url = str(source)
    opened = _open_postgres(url) if url.startswith(("postgresql://", "postgres://")) else _open_sqlite(Path(source))
    with opened as (saver_class, conn, keys, size):
        report.bytes_before = size
        try:
            src = saver_class(conn, serde=_guarded_serde(allowed))
            for thread_id, ns in keys:
                if thread_id not in report.thread_ids:
                    report.thread_ids.append(thread_id)
                    if progress is not None:
                        progress(thread_id)
                config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
                items = sorted(src.list(config), key=lambda t: t.config["configurable"]["checkpoint_id"])
                seen: dict[str, dict[str, Any]] = {}  # checkpoint id -> its channel versions
                for item in items:
                    _copy(target, item, report, seen)
        except _Refused as exc:
            raise SerializationError(
                f"import refused: the LangGraph database holds {exc.args[0]}, which is not on the allow-list "
                "(LangGraph's safe types plus --allow MODULE:CLASS)"
            ) from None
    report.threads = len(report.thread_ids)
    return report


_Opened = tuple[Any, Any, list[tuple[str, str]], int]  # LangGraph's saver class, a connection, (thread, ns) keys, bytes


@contextlib.contextmanager
def _open_sqlite(path: Path) -> Iterator[_Opened]:
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver as LangGraphSqliteSaver
    except ImportError:
        raise GraphckptError(
            "import-langgraph needs langgraph-checkpoint-sqlite: pip install 'graphckpt[langgraph]'"
        ) from None
    if not path.is_file():
        raise GraphckptError(f"no LangGraph database at {str(path)!r}")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"checkpoints", "writes"} <= tables:
            raise GraphckptError(f"{str(path)!r} has no LangGraph checkpoints/writes tables")
        keys = conn.execute(
            "SELECT DISTINCT thread_id, checkpoint_ns FROM checkpoints ORDER BY thread_id, checkpoint_ns"
        )
        yield LangGraphSqliteSaver, conn, [(str(t), str(ns)) for t, ns in keys.fetchall()], _size(path)
    finally:
        conn.close()


_PG_TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "checkpoint_migrations")
"""LangGraph's PostgresSaver tables (what "bytes before" counts)."""


@contextlib.contextmanager
def _open_postgres(url: str) -> Iterator[_Opened]:
    """A read-only connection to LangGraph's PostgresSaver tables (in ``?schema=NAME`` when given)."""
    try:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver as LangGraphPostgresSaver
        from psycopg.rows import dict_row
    except ImportError:
        raise GraphckptError(
            "import-langgraph from PostgreSQL needs langgraph-checkpoint-postgres: pip install "
            "'graphckpt[langgraph-postgres]'"
        ) from None
    from graphckpt.targets import Database

    db = Database(url)
    options = "-c default_transaction_read_only=on"
    if db.schema:
        options += f" -c search_path={db.schema}"
    try:
        conn = psycopg.connect(db.dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row, options=options)
    except psycopg.Error as exc:
        raise GraphckptError(f"cannot read the LangGraph database {db.display}: {str(exc).strip()}") from None
    try:
        found = conn.execute(
            "SELECT c.relname AS name, pg_total_relation_size(c.oid) AS size FROM pg_class c "
            "WHERE c.oid IN (SELECT to_regclass(t) FROM unnest(%s::text[]) AS t)",
            (list(_PG_TABLES),),
        ).fetchall()
        if not {"checkpoints", "checkpoint_writes", "checkpoint_blobs"} <= {r["name"] for r in found}:
            raise GraphckptError(f"{db.display} has no LangGraph checkpoints/checkpoint_writes/checkpoint_blobs tables")
        rows = conn.execute(
            "SELECT DISTINCT thread_id, checkpoint_ns FROM checkpoints ORDER BY thread_id, checkpoint_ns"
        ).fetchall()
        keys = [(str(r["thread_id"]), str(r["checkpoint_ns"])) for r in rows]
        yield LangGraphPostgresSaver, conn, keys, sum(int(r["size"]) for r in found)
    finally:
        conn.close()


def _int_version(version: Any) -> Any:
    """LangGraph's SqliteSaver and PostgresSaver versions (``"<32-digit counter>.<random>"``) as the counter, the
    integer versions GraphckptSaver's ``get_next_version`` continues from; the order is kept."""
    if isinstance(version, str):
        head = version.split(".", 1)[0]
        if head.isdigit():
            return int(head)
        raise GraphckptError(f"a channel version {version[:40]!r} is not one LangGraph's savers write")
    return version


def _copy(target: Any, item: Any, report: ImportReport, seen: dict[str, dict[str, Any]]) -> None:
    conf = item.config["configurable"]
    parent = item.parent_config["configurable"]["checkpoint_id"] if item.parent_config else None
    where = {"thread_id": conf["thread_id"], "checkpoint_ns": conf["checkpoint_ns"]}
    put_config: dict[str, Any] = {"configurable": where}
    if parent is not None:
        put_config = {"configurable": {**where, "checkpoint_id": parent}}
    checkpoint = dict(item.checkpoint)
    checkpoint["channel_versions"] = {k: _int_version(v) for k, v in checkpoint.get("channel_versions", {}).items()}
    checkpoint["versions_seen"] = {
        node: {k: _int_version(v) for k, v in seen_by.items()}
        for node, seen_by in checkpoint.get("versions_seen", {}).items()
    }
    previous = seen.get(parent, {}) if parent is not None else {}
    versions = dict(checkpoint["channel_versions"])
    seen[conf["checkpoint_id"]] = versions
    new_versions = {k: v for k, v in versions.items() if previous.get(k) != v}  # as LangGraph's put gets them
    target.put(put_config, checkpoint, item.metadata, new_versions)
    report.checkpoints += 1
    by_task: dict[str, list[tuple[str, Any]]] = {}
    for task_id, channel, value in item.pending_writes or ():
        by_task.setdefault(task_id, []).append((channel, value))
    at = {"configurable": {**put_config["configurable"], "checkpoint_id": conf["checkpoint_id"]}}
    for task_id, writes in by_task.items():
        target.put_writes(at, writes, task_id)
        report.writes += len(writes)
