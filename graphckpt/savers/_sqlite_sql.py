"""SQL text of SqliteSaver's reads: column lists, rows to records, canonical JSON and metadata filters."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from graphckpt.errors import SerializationError
from graphckpt.savers._checks import brief, lease_from_columns, nul_free, thread_status
from graphckpt.savers._row_checks import checked_checkpoint, checked_lease_columns, checked_thread
from graphckpt.savers.base import BlobRange, StoredCheckpoint, ThreadRecord
from graphckpt.savers.lazyjson import LazyJsonMapping

Row = tuple[Any, ...]

# In the order of StoredCheckpoint's fields (rows are converted positionally), as are THREAD_SELECT's for ThreadRecord.
CP_COLUMNS = (
    "thread_id, checkpoint_id, parent_thread_id, parent_checkpoint_id, step, created_at, status, metadata, body"
)
CP_SELECT = f"SELECT {CP_COLUMNS} FROM checkpoints"
THREAD_COLUMNS = (
    "thread_id, head_checkpoint_id, head_step, status, run_id, created_at, updated_at, parent_thread_id,"
    " parent_checkpoint_id, error, metadata, lease_worker, lease_host, lease_pid, lease_epoch, heartbeat_at,"
    " lease_until"
)
THREAD_SELECT = f"SELECT {THREAD_COLUMNS} FROM threads WHERE deleted = 0"
STATUS_CLAUSE = {
    "crashed": " AND status = 'running' AND lease_until IS NOT NULL",
    "running": " AND status = 'running'",
}
"""``list_threads(status=...)`` for the statuses derived from the lease: the stored ``running`` threads that may be
reported so, filtered by :func:`thread_status` when read (a dead owner on this host has a lease that has not expired
yet); others compare ``status``."""
BLOB_SELECT = "SELECT thread_id, channel, step, kind, data FROM blobs"
MAX_RANGES_PER_QUERY = 8000  # 4 bound parameters each, under SQLite's default limit of 32766


def blobs_in_ranges(ranges: Sequence[BlobRange]) -> tuple[str, list[Any]]:
    """One query for the blobs inside any of ``ranges`` (at most :data:`MAX_RANGES_PER_QUERY`), each blob once,
    ordered by channel, step and thread."""
    values = ", ".join(["(?, ?, ?, ?)"] * len(ranges))
    sql = (
        f"{BLOB_SELECT} WHERE rowid IN ("
        f" WITH r (thread_id, channel, lo, hi) AS (VALUES {values})"
        " SELECT b.rowid FROM r JOIN blobs AS b"
        " ON b.thread_id = r.thread_id AND b.channel = r.channel AND b.step BETWEEN r.lo AND r.hi)"
        " ORDER BY channel, step, thread_id"
    )  # IN (...) returns a blob inside several ranges once
    return sql, [p for r in ranges for p in (r.thread_id, r.channel, r.min_step, r.max_step)]


def dump_json(value: Any, what: str) -> str:
    """Canonical JSON text: sorted keys, compact, and integral floats written as integers, so JSON-equal values (see
    :func:`~graphckpt.savers.base.json_equal`) stored and filtered give equal text. (So a stored ``2.0`` reads back
    as ``2``: equal in Python and in JSON.)"""
    try:
        try:  # most metadata has no integral float and only dicts and lists: one pass
            text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
            if _INTEGRAL_FLOAT.search(text) is None:
                return text
        except TypeError:  # a Mapping that is not a dict, say
            pass
        return json.dumps(_integral(value), sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} is not JSON-compatible: {exc}") from exc


_INTEGRAL_FLOAT = re.compile(r"\.0(?=[,\]}]|$)")
"""How ``json.dumps`` writes a float that is an integer below 2**53 (``2.0``); a match inside a string only costs the
slow path."""


def _integral(value: Any) -> Any:
    if type(value) is float and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, Mapping):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_integral(v) for v in value]
    return value


_NUL_FREE_METADATA = r"""(CASE WHEN instr(c.metadata, '\u0000') OR instr(c.metadata, '\uffff')
        OR instr(c.metadata, '\"')
    THEN replace(replace(replace(replace(replace(
        c.metadata, '\\', char(1)), '\uffff', '\uffff1'), '\u0000', '\uffff0'), '\"', '\uffff2'), char(1), '\\')
    ELSE c.metadata END)"""
"""``c.metadata`` with :func:`_sql_free`'s mapping applied when it escapes NUL, U+FFFF or a quote (``json_each``
stops a string or key at NUL, and SQLite's JSON paths, ``-> m.fullkey``, cannot name a key holding a quote). The
text is ASCII (written by :func:`dump_json`), so a raw ``char(1)`` never occurs in it and stands in for each escaped
backslash meanwhile: ``\\u0000`` (a backslash, then the letters ``u0000``) is not a NUL, ``\\"`` ends a string."""


def _sql_free(value: Any) -> Any:
    """``value`` through :func:`~graphckpt.savers.base.nul_free`, then each ``"`` written U+FFFF ``2``: one to one
    (U+FFFF is always followed by a digit after ``nul_free``), the mapping :data:`_NUL_FREE_METADATA` applies to
    stored metadata."""
    return _quote_free(nul_free(value))


def _quote_free(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace('"', "\uffff2") if '"' in value else value
    if isinstance(value, Mapping):
        return {_quote_free(k): _quote_free(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_quote_free(v) for v in value]
    return value


def filter_clause(key: str, value: Any) -> tuple[str, list[Any]]:
    """SQL matching one metadata filter item on checkpoint ``c``; only fixed SQL text, the key and value are bound.

    ``json_each`` decodes keys itself, so any key (quotes, dots, backslashes, non-ASCII) works, unlike a JSON path.
    Equality is JSON equality: null, true and false by type, numbers numerically (integers beyond 64 bits by their
    digits), strings as text, arrays and objects by their canonical text (both sides are written with sorted keys).
    Keys and strings holding NUL or a quote go through :func:`_sql_free` on both sides.
    """
    key, value = _sql_free(key), _sql_free(value)
    where = f"EXISTS (SELECT 1 FROM json_each({_NUL_FREE_METADATA}) AS m WHERE m.key = ? AND {{}})"
    if value is None:
        return where.format("m.type = 'null'"), [key]
    if isinstance(value, bool):
        return where.format("m.type = ?"), [key, "true" if value else "false"]
    if isinstance(value, int | float):
        clause, params = _number_clause(value)
        return where.format(clause), [key, *params]
    if isinstance(value, str):
        return where.format("m.type = 'text' AND m.value = ?"), [key, value]
    text = dump_json(value, f"metadata filter value for key {brief(key)!r}")
    return where.format("m.type IN ('array', 'object') AND json(m.value) = json(?)"), [key, text]


_NUMBER_TEXT = f"({_NUL_FREE_METADATA} -> m.fullkey)"
"""The stored JSON text of the number ``m``: its digits, for an integer beyond 64 bits (``json_each`` calls it an
``integer`` but gives its value as a rounded double)."""


def _number_clause(value: float) -> tuple[str, list[Any]]:
    """SQL matching a stored number equal to ``value`` exactly, as Python compares an int and a float: no rounding
    through doubles (``-2**63 - 1``, which ``json_each`` reads as the double ``-2**63``, does not equal ``-2**63``).
    A stored integer is compared as an integer (by its digits beyond 64 bits), a stored float as a float, and only
    when ``value`` converts to that type exactly. NaN equals nothing."""
    parts: list[str] = []
    params: list[Any] = []
    whole = value if isinstance(value, int) else int(value) if value.is_integer() else None
    if whole is not None:
        if -(2**63) <= whole < 2**63:
            parts.append("m.type = 'integer' AND typeof(m.value) = 'integer' AND m.value = ?")
            params.append(whole)
        else:  # SQLite's integers are 64-bit: compare the digits
            parts.append(f"m.type = 'integer' AND typeof(m.value) = 'real' AND {_NUMBER_TEXT} = ?")
            params.append(str(whole))
    try:
        as_float = float(value)
    except OverflowError:  # an integer beyond any float: no stored float equals it
        as_float = None
    if as_float is not None and as_float == value:
        parts.append("m.type = 'real' AND m.value = ?")  # written as a float: with a point or an exponent
        params.append(as_float)
    if not parts:
        return "0", []
    return "(" + " OR ".join(f"({part})" for part in parts) + ")", params


def checkpoint_from_row(row: Row) -> StoredCheckpoint:
    # positional, in CP_COLUMNS order: a history page builds one per row; each column's type checked
    return checked_checkpoint(
        StoredCheckpoint(row[0], row[1], row[2], row[3], row[4], row[5], row[6], LazyJsonMapping(row[7]), row[8])
    )


def thread_from_row(row: Row, now: float) -> ThreadRecord:
    metadata, lease = LazyJsonMapping(row[10]), lease_from_columns(*checked_lease_columns(row[0], row[11:17]))
    status = thread_status(row[3], lease, now)
    # positional, in THREAD_SELECT's column order
    return checked_thread(
        ThreadRecord(
            row[0], row[1], row[2], status, row[4], row[5], row[6], row[7], row[8], row[9], metadata, lease, row[14]
        )
    )


def thread_page_query(
    limit: int,
    after: tuple[float, str] | None,
    status: str | None,
    metadata: Mapping[str, Any] | None,
    parent: str | None,
) -> tuple[str, list[Any]]:
    """One page of threads in keyset order (see :mod:`graphckpt.savers._thread_pages`): ``limit + 1`` rows at most,
    walking ``threads_by_created``, ``threads_by_status`` or ``threads_by_parent`` backwards from ``after``."""
    sql, params = f"SELECT {THREAD_COLUMNS} FROM threads AS c WHERE deleted = 0", list[Any]()
    if status in STATUS_CLAUSE:
        sql += STATUS_CLAUSE[status]
    elif status is not None:
        sql, params = f"{sql} AND status = ?", [status]
    if parent is not None:
        sql, params = f"{sql} AND parent_thread_id = ?", [*params, parent]
    if after is not None:
        sql, params = f"{sql} AND (created_at, thread_id) < (?, ?)", [*params, *after]
    for key, value in (metadata or {}).items():
        clause, more = filter_clause(key, value)
        sql, params = f"{sql} AND {clause}", [*params, *more]
    return f"{sql} ORDER BY created_at DESC, thread_id DESC LIMIT ?", [*params, limit + 1]
