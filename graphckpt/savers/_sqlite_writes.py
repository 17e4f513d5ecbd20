"""SqliteSaver's write transactions: each function runs inside one ``BEGIN IMMEDIATE`` on the connection it is given."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar, cast

from graphckpt.errors import ThreadConflictError, ThreadNotFoundError
from graphckpt.savers._sqlite_sql import CP_COLUMNS
from graphckpt.savers.base import Status, StoredCheckpoint, brief

_T = TypeVar("_T")


def transaction(conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], _T]) -> _T:
    """Run ``body`` in one ``BEGIN IMMEDIATE`` transaction; roll back on any exception."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = body(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


def cas_failed(conn: sqlite3.Connection, thread_id: str, what: str) -> Exception:
    """The error for a compare-and-set on a thread that matched no row: missing thread, or somebody moved it."""
    row = conn.execute(
        "SELECT head_checkpoint_id, run_id FROM threads WHERE thread_id = ? AND deleted = 0", (thread_id,)
    ).fetchone()
    if row is None:
        return ThreadNotFoundError(f"thread {brief(thread_id)!r} does not exist")
    return ThreadConflictError(
        f"thread {brief(thread_id)!r} was moved or claimed by another run ({what}); its head is {row[0]!r}"
    )


def trim_deleted(conn: sqlite3.Connection, thread_id: str, now: float) -> str | None:
    """Mark ``thread_id`` deleted and drop its rows above the highest step a fork still needs (all of them, and
    its thread row, when none is needed). Returns its parent thread when that one is deleted too and should be
    trimmed again, else ``None``."""
    (needed,) = conn.execute(
        "SELECT MAX(p.step) FROM checkpoints AS f JOIN checkpoints AS p"
        " ON p.thread_id = f.parent_thread_id AND p.checkpoint_id = f.parent_checkpoint_id"
        " WHERE f.parent_thread_id = ? AND f.parent_thread_id <> f.thread_id",
        (thread_id,),
    ).fetchone()
    above = -1 if needed is None else int(needed)
    conn.execute(
        "DELETE FROM writes WHERE thread_id = ? AND checkpoint_id IN"
        " (SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND step > ?)",
        (thread_id, thread_id, above),
    )
    conn.execute("DELETE FROM blobs WHERE thread_id = ? AND step > ?", (thread_id, above))
    conn.execute("DELETE FROM checkpoints WHERE thread_id = ? AND step > ?", (thread_id, above))
    if needed is not None:
        conn.execute("UPDATE threads SET deleted = 1, updated_at = ? WHERE thread_id = ?", (now, thread_id))
        return None
    (parent,) = conn.execute(
        "DELETE FROM threads WHERE thread_id = ? RETURNING parent_thread_id", (thread_id,)
    ).fetchone()
    deleted_parent = conn.execute("SELECT 1 FROM threads WHERE thread_id = ? AND deleted = 1", (parent,)).fetchone()
    return cast(str, parent) if deleted_parent is not None else None


def commit(
    conn: sqlite3.Connection, cp: StoredCheckpoint, *, expected_head: str | None, run_id: str, meta: str, now: float
) -> None:
    """Insert the checkpoint ``cp`` (with ``meta``, its metadata as canonical JSON), its blobs, and move its thread's
    head to it: create the thread when ``expected_head`` is ``None``, else compare-and-set the head and owner."""
    blobs = [(b.thread_id, b.channel, b.step, b.kind, b.data) for b in cp.blobs]
    same_thread_parent = cp.parent_checkpoint_id is not None and cp.parent_thread_id == cp.thread_id
    if expected_head is None:
        fork_of = cp.parent_thread_id if cp.parent_thread_id != cp.thread_id else None
        try:
            conn.execute(
                "INSERT INTO threads (thread_id, head_checkpoint_id, head_step, status, run_id, created_at,"
                " updated_at, parent_thread_id, parent_checkpoint_id, metadata) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (cp.thread_id, cp.checkpoint_id, cp.step, cp.status, run_id, now, now, fork_of,
                 cp.parent_checkpoint_id, meta),
            )  # fmt: skip
        except sqlite3.IntegrityError as exc:  # live, or deleted but still holding rows a fork needs
            raise ThreadConflictError(f"thread {brief(cp.thread_id)!r} already exists") from exc
    else:
        moved = conn.execute(
            "UPDATE threads SET head_checkpoint_id = ?, head_step = ?, status = ?, updated_at = ?,"
            " error = NULL, metadata = ? WHERE thread_id = ? AND head_checkpoint_id = ? AND run_id = ?"
            " AND deleted = 0",
            (cp.checkpoint_id, cp.step, cp.status, now, meta, cp.thread_id, expected_head, run_id),
        )
        if moved.rowcount != 1:
            raise cas_failed(conn, cp.thread_id, f"expected head {brief(expected_head)!r}")
    try:
        conn.execute(
            f"INSERT INTO checkpoints ({CP_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
            (cp.thread_id, cp.checkpoint_id, cp.parent_thread_id, cp.parent_checkpoint_id, cp.step,
             cp.created_at, cp.status, meta, cp.body),
        )  # fmt: skip
    except sqlite3.IntegrityError as exc:
        raise ThreadConflictError(
            f"thread {brief(cp.thread_id)!r} already has checkpoint {brief(cp.checkpoint_id)!r} "
            f"or a checkpoint at step {cp.step}"
        ) from exc
    if blobs:
        for thread_id, channel, step, kind, _ in blobs:
            if kind == "chunk":  # it packs the deltas stored after its step: their rows go
                conn.execute(
                    "DELETE FROM blobs WHERE thread_id = ? AND channel = ? AND step > ? AND step < ?",
                    (thread_id, channel, step, cp.step),
                )
        conn.executemany(
            "INSERT OR REPLACE INTO blobs (thread_id, channel, step, kind, data) VALUES (?,?,?,?,?)", blobs
        )
    if same_thread_parent:
        conn.execute(
            "DELETE FROM writes WHERE thread_id = ? AND checkpoint_id = ?",
            (cp.thread_id, cp.parent_checkpoint_id),
        )


def claim(
    conn: sqlite3.Connection, thread_id: str, *, expected_head: str, expected_run_id: str, run_id: str, now: float
) -> None:
    """Hand the thread to ``run_id`` if its head and owner are still the expected ones."""
    claimed = conn.execute(
        "UPDATE threads SET run_id = ?, status = 'running', updated_at = ?"
        " WHERE thread_id = ? AND head_checkpoint_id = ? AND run_id = ? AND deleted = 0",
        (run_id, now, thread_id, expected_head, expected_run_id),
    )
    if claimed.rowcount != 1:
        what = f"expected head {brief(expected_head)!r}, owner {brief(expected_run_id)!r}"
        raise cas_failed(conn, thread_id, what)


def put_writes(
    conn: sqlite3.Connection,
    thread_id: str,
    checkpoint_id: str,
    rows: list[tuple[Any, ...]],
    *,
    run_id: str,
    status: Status | None,
    error: str | None,
    now: float,
) -> None:
    """Store the pending write ``rows`` of the head ``checkpoint_id`` owned by ``run_id``, then set the status (so the
    writes' events come before the stop's)."""
    owned = conn.execute(
        "SELECT 1 FROM threads WHERE thread_id = ? AND head_checkpoint_id = ? AND run_id = ? AND deleted = 0",
        (thread_id, checkpoint_id, run_id),
    ).fetchall()
    if len(owned) != 1:
        raise cas_failed(conn, thread_id, f"expected head {brief(checkpoint_id)!r}, owner {brief(run_id)!r}")
    conn.executemany(
        "INSERT OR REPLACE INTO writes (thread_id, checkpoint_id, task_id, kind, idx, data) VALUES (?,?,?,?,?,?)",
        rows,
    )
    if status is not None:
        conn.execute(
            "UPDATE threads SET status = ?, error = ?, updated_at = ? WHERE thread_id = ?",
            (status, error, now, thread_id),
        )


def delete_thread(conn: sqlite3.Connection, thread_id: str, now: float) -> None:
    """Delete the thread, keeping what its forks still need (see :func:`trim_deleted`)."""
    row = conn.execute(
        "SELECT parent_thread_id FROM threads WHERE thread_id = ? AND deleted = 0", (thread_id,)
    ).fetchone()
    if row is None:
        raise ThreadNotFoundError(f"thread {brief(thread_id)!r} does not exist")
    target: str | None = thread_id
    while target is not None:  # a fully removed fork may free what its deleted parent kept for it
        target = trim_deleted(conn, target, now)
