"""SqliteSaver's write transactions: each function runs inside one ``BEGIN IMMEDIATE`` on the connection it is given."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from graphckpt.errors import LeaseLostError, ThreadConflictError, ThreadNotFoundError
from graphckpt.savers._checks import brief, claim_lost, lease_lost
from graphckpt.savers._events_sql import SQLITE_INSERT_EVENT
from graphckpt.savers._sqlite_sql import CP_COLUMNS, THREAD_SELECT, thread_from_row
from graphckpt.savers.base import Owner, Status, StoredCheckpoint
from graphckpt.savers.events import checkpoint_events

Lease = tuple[Owner, float] | None
"""A lease to take: its owner and its expiry."""

# -- lease statements (DESIGN.md invariant 9: one live owner) -----------------------------------------------------
CLAIM = (
    "UPDATE threads SET run_id = ?, status = 'running', updated_at = ?, lease_epoch = lease_epoch + 1,"
    " lease_worker = ?, lease_host = ?, lease_pid = ?, heartbeat_at = ?, lease_until = ?"
    " WHERE thread_id = ? AND head_checkpoint_id = ? AND run_id = ? AND deleted = 0"
    " AND (status <> 'running' OR lease_until IS NULL OR lease_until < ? OR lease_epoch = ?)"
    " RETURNING lease_epoch"
)
"""Take a thread for a new run: compare-and-set on head and previous run (nobody claimed it since it was read) and
on the lease (nobody live holds it: a second ``resume`` is refused, unless the claim takes the lease of the epoch it
read: a dead owner of this host, or a confirmed take-over). The new ``run_id`` fences the old owner."""
EXPIRE = (
    "UPDATE threads SET lease_until = ? WHERE thread_id = ? AND lease_epoch = ? AND status = 'running'"
    " AND lease_worker IS NOT NULL AND deleted = 0"
)
"""End the lease of a dead owner now (compare-and-set on its epoch): reads, claims and the sweeper see it crashed."""
EXPIRE_RUN = "UPDATE runs SET lease_until = ? WHERE thread_id = ? AND status = 'running'"
"""With :data:`EXPIRE`: the dead owner's running run (a worker's) is re-queued by the next sweep."""
HEARTBEAT = (
    "UPDATE threads SET heartbeat_at = ?, lease_until = ?"
    " WHERE thread_id = ? AND run_id = ? AND lease_worker IS NOT NULL AND deleted = 0"
)
"""Renew a run's lease; matching no row means it was taken over (the fence moved) or released by its run."""
RELEASE = (
    "UPDATE threads SET lease_worker = NULL, lease_host = NULL, lease_pid = NULL, heartbeat_at = NULL,"
    " lease_until = NULL WHERE thread_id = ? AND run_id = ? AND deleted = 0"
)
"""Give a lease up on a graceful stop: only the run that holds it can."""
KEEP_LEASE_IF_RUNNING = ", ".join(
    f"{column} = CASE WHEN ? = 'running' THEN {column} END"
    for column in ("lease_worker", "lease_host", "lease_pid", "heartbeat_at", "lease_until")
)
"""Part of the head move and of a stop's status change (the same statement): a commit or a stop that leaves the
thread done, interrupted or failed releases the lease. Binds the new status five times (:func:`_keep_if`)."""


def _keep_if(status: str) -> tuple[str, ...]:
    return (status,) * 5


# -- the run queue's part of a commit (see graphckpt/savers/queue.py) ----------------------------------------------
END_RUN = "UPDATE runs SET status = ?, ended_at = ?, error = ? WHERE thread_id = ? AND status = 'running' AND fence = ?"
"""In the transaction of a commit or a stop that leaves the thread done, interrupted or failed: the run of that
claim ends with it (its completion commits with its last checkpoint; a zombie's fence matches no run)."""
RENEW_RUN = "UPDATE runs SET lease_until = ? WHERE thread_id = ? AND status = 'running' AND fence = ?"
"""With a heartbeat: the running run's lease follows its thread's."""


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


def cas_failed(conn: sqlite3.Connection, thread_id: str, run_id: str, expected_head: str, now: float) -> Exception:
    """The error for a write of run ``run_id`` that matched no row: a missing thread, a lease taken over (the
    error names the new owner), or a head that moved (named with the one expected, which differs)."""
    row = conn.execute(f"{THREAD_SELECT} AND thread_id = ?", (thread_id,)).fetchone()
    if row is None:
        return ThreadNotFoundError(f"thread {brief(thread_id)!r} does not exist")
    record = thread_from_row(row, now)
    if record.run_id != run_id:
        return lease_lost(thread_id, record.lease, run_id, now)
    return ThreadConflictError(
        f"thread {brief(thread_id)!r} moved: its head is {brief(record.head_checkpoint_id)!r}, "
        f"expected {brief(expected_head)!r}"
    )


PLACEHOLDER = (
    "deleted = 1, updated_at = ?, metadata = '{}', error = NULL, lease_worker = NULL, lease_host = NULL,"
    " lease_pid = NULL, heartbeat_at = NULL, lease_until = NULL"
)
"""What a deleted thread kept for its forks' lineage becomes: no tags, no error, no lease."""

FORKS = (
    "WITH RECURSIVE d(tid) AS (SELECT thread_id FROM threads WHERE parent_thread_id = ?1 AND thread_id <> ?1"
    " UNION SELECT t.thread_id FROM threads AS t JOIN d ON t.parent_thread_id = d.tid)"
    " SELECT t.thread_id FROM d JOIN threads AS t ON t.thread_id = d.tid WHERE t.deleted = 0 ORDER BY t.thread_id"
)
"""The live threads whose lineage runs through thread ``?1``: its forks, their forks, and so on (through deleted
placeholders too)."""


NEEDED_STEP = (
    "SELECT MAX(p.step) FROM checkpoints AS f JOIN checkpoints AS p"
    " ON p.thread_id = f.parent_thread_id AND p.checkpoint_id = f.parent_checkpoint_id"
    " WHERE f.parent_thread_id = ? AND f.parent_thread_id <> f.thread_id"
)
"""The highest step of thread ``?`` that a fork's lineage needs (``NULL``: none)."""


def trim_deleted(conn: sqlite3.Connection, thread_id: str, now: float) -> str | None:
    """Mark ``thread_id`` deleted and drop its rows above the highest step a fork still needs (all of them, and
    its thread row, when none is needed). Returns its parent thread when that one is deleted too and should be
    trimmed again, else ``None``."""
    (needed,) = conn.execute(NEEDED_STEP, (thread_id,)).fetchone()
    above = -1 if needed is None else int(needed)
    # Every write not of a kept checkpoint goes: kept writes of a checkpoint never committed included.
    conn.execute(
        "DELETE FROM writes WHERE thread_id = ? AND checkpoint_id NOT IN"
        " (SELECT checkpoint_id FROM checkpoints WHERE thread_id = ? AND step <= ?"
        " UNION ALL SELECT checkpoint_id || '#kept' FROM checkpoints WHERE thread_id = ? AND step <= ?)",
        (thread_id, thread_id, above, thread_id, above),
    )
    conn.execute("DELETE FROM blobs WHERE thread_id = ? AND step > ?", (thread_id, above))
    conn.execute("DELETE FROM checkpoints WHERE thread_id = ? AND step > ?", (thread_id, above))
    conn.execute("DELETE FROM events WHERE thread_id = ? AND step > ?", (thread_id, above))
    conn.execute("DELETE FROM runs WHERE thread_id = ?", (thread_id,))
    conn.execute("DELETE FROM created_threads WHERE thread_id = ?", (thread_id,))
    conn.execute("DELETE FROM waits WHERE thread_id = ?", (thread_id,))
    conn.execute("DELETE FROM crons WHERE thread_id = ?", (thread_id,))
    if needed is not None:  # a placeholder: its tags, error and lease go; its lineage up to the fork point stays
        conn.execute(f"UPDATE threads SET {PLACEHOLDER} WHERE thread_id = ?", (now, thread_id))
        return None
    (parent,) = conn.execute(
        "DELETE FROM threads WHERE thread_id = ? RETURNING parent_thread_id", (thread_id,)
    ).fetchone()
    deleted_parent = conn.execute("SELECT 1 FROM threads WHERE thread_id = ? AND deleted = 1", (parent,)).fetchone()
    return cast(str, parent) if deleted_parent is not None else None


def commit(
    conn: sqlite3.Connection,
    cp: StoredCheckpoint,
    *,
    expected_head: str | None,
    run_id: str,
    meta: str,
    now: float,
    lease: Lease = None,
    events: bool = True,
) -> None:
    """Insert the checkpoint ``cp`` (with ``meta``, its metadata as canonical JSON), its blobs and (with ``events``)
    its events, and move its thread's head to it: create the thread when ``expected_head`` is ``None``, else
    compare-and-set the head and owner."""
    blobs = [(b.thread_id, b.channel, b.step, b.kind, b.data) for b in cp.blobs]
    same_thread_parent = cp.parent_checkpoint_id is not None and cp.parent_thread_id == cp.thread_id
    if expected_head is None:
        fork_of = cp.parent_thread_id if cp.parent_thread_id != cp.thread_id else None
        who, until = lease if lease is not None and cp.status == "running" else (None, None)
        try:
            conn.execute(
                "INSERT INTO threads (thread_id, head_checkpoint_id, head_step, status, run_id, created_at,"
                " updated_at, parent_thread_id, parent_checkpoint_id, metadata, lease_epoch, lease_worker,"
                " lease_host, lease_pid, heartbeat_at, lease_until) VALUES (?,?,?,?,?,?,?,?,?,?,1,?,?,?,?,?)",
                (
                    cp.thread_id,
                    cp.checkpoint_id,
                    cp.step,
                    cp.status,
                    run_id,
                    now,
                    now,
                    fork_of,
                    cp.parent_checkpoint_id,
                    meta,
                    who and who.stored_worker,
                    who and who.host,
                    who and who.pid,
                    who and now,
                    until,
                ),
            )
        except sqlite3.IntegrityError as exc:  # live, or deleted but still holding rows a fork needs
            raise ThreadConflictError(f"thread {brief(cp.thread_id)!r} already exists") from exc
        if cp.status != "running":  # -- runs
            conn.execute(END_RUN, (cp.status, now, None, cp.thread_id, run_id))
    else:
        # A step of a running thread leaves status and lease as they are: a statement that does not SET them
        # leaves the status and lease indexes untouched (SQLite rewrites an index whose column is SET, even to the
        # same value: two more pages per commit). Any other move takes the full statement below.
        moved = None
        if cp.status == "running":
            moved = conn.execute(
                "UPDATE threads SET head_checkpoint_id = ?, head_step = ?, updated_at = ?, error = NULL, metadata = ?"
                " WHERE thread_id = ? AND head_checkpoint_id = ? AND run_id = ? AND deleted = 0"
                " AND status = 'running'",
                (cp.checkpoint_id, cp.step, now, meta, cp.thread_id, expected_head, run_id),
            )
        if moved is None or moved.rowcount != 1:
            moved = conn.execute(
                "UPDATE threads SET head_checkpoint_id = ?, head_step = ?, status = ?, updated_at = ?,"
                f" error = NULL, metadata = ?, {KEEP_LEASE_IF_RUNNING} WHERE thread_id = ? AND head_checkpoint_id = ?"
                " AND run_id = ? AND deleted = 0",
                (
                    cp.checkpoint_id,
                    cp.step,
                    cp.status,
                    now,
                    meta,
                    *_keep_if(cp.status),
                    cp.thread_id,
                    expected_head,
                    run_id,
                ),
            )
            if moved.rowcount != 1:
                raise cas_failed(conn, cp.thread_id, run_id, expected_head, now)
            if cp.status != "running":  # -- runs
                conn.execute(END_RUN, (cp.status, now, None, cp.thread_id, run_id))
    try:
        conn.execute(
            f"INSERT INTO checkpoints ({CP_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
            (
                cp.thread_id,
                cp.checkpoint_id,
                cp.parent_thread_id,
                cp.parent_checkpoint_id,
                cp.step,
                cp.created_at,
                cp.status,
                meta,
                cp.body,
            ),
        )
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
    if events:
        conn.executemany(
            SQLITE_INSERT_EVENT,
            [(cp.thread_id, cp.step, kind, payload, cp.created_at) for kind, payload in checkpoint_events(cp)],
        )
    if same_thread_parent:
        conn.execute(
            "DELETE FROM writes WHERE thread_id = ? AND checkpoint_id = ?",
            (cp.thread_id, cp.parent_checkpoint_id),
        )


def claim(
    conn: sqlite3.Connection,
    thread_id: str,
    *,
    expected_head: str,
    expected_run_id: str,
    run_id: str,
    now: float,
    lease: Lease = None,
    take_epoch: int | None = None,
) -> int:
    """Hand the thread to ``run_id`` if its head and owner are still the expected ones and no live lease holds it
    (but the one of ``take_epoch``); returns the new epoch."""
    who, until = lease if lease is not None else (None, None)
    claimed = conn.execute(
        CLAIM,
        (
            run_id,
            now,
            who and who.stored_worker,
            who and who.host,
            who and who.pid,
            who and now,
            until,
            thread_id,
            expected_head,
            expected_run_id,
            now,
            take_epoch,
        ),
    ).fetchone()
    if claimed is None:
        row = conn.execute(f"{THREAD_SELECT} AND thread_id = ?", (thread_id,)).fetchone()
        if row is None:
            raise ThreadNotFoundError(f"thread {brief(thread_id)!r} does not exist")
        raise claim_lost(thread_id, thread_from_row(row, now), now)
    return int(claimed[0])


def expire(conn: sqlite3.Connection, thread_id: str, *, epoch: int, now: float) -> bool:
    """End the lease of ``epoch`` now (and its running run's); ``False`` when the thread moved on since."""
    if conn.execute(EXPIRE, (now, thread_id, epoch)).rowcount != 1:
        return False
    conn.execute(EXPIRE_RUN, (now, thread_id))
    return True


def heartbeat(conn: sqlite3.Connection, thread_id: str, *, run_id: str, lease_until: float, now: float) -> None:
    """Renew the lease of ``run_id``; :class:`LeaseLostError` when another claim took the thread."""
    conn.execute(RENEW_RUN, (lease_until, thread_id, run_id))
    if conn.execute(HEARTBEAT, (now, lease_until, thread_id, run_id)).rowcount != 1:
        error = cas_failed(conn, thread_id, run_id, "", now)
        if not isinstance(error, ThreadConflictError) or isinstance(error, LeaseLostError):
            raise error  # (the run's own released lease is nothing to renew)


def release(conn: sqlite3.Connection, thread_id: str, *, run_id: str) -> None:
    conn.execute(RELEASE, (thread_id, run_id))


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
    anywhere: bool = False,
) -> None:
    """Store the pending write ``rows`` of the head ``checkpoint_id`` (any checkpoint id when ``anywhere``) owned by
    ``run_id``, then set the status (so the writes' events come before the stop's); a stop other than ``running``
    releases the lease in that statement."""
    owned = conn.execute(
        "SELECT 1 FROM threads WHERE thread_id = ? AND (head_checkpoint_id = ? OR ?) AND run_id = ? AND deleted = 0",
        (thread_id, checkpoint_id, anywhere, run_id),
    ).fetchall()
    if len(owned) != 1:
        raise cas_failed(conn, thread_id, run_id, checkpoint_id, now)
    if status is not None and status != "running":  # -- runs
        conn.execute(END_RUN, (status, now, error, thread_id, run_id))
    conn.executemany(
        "INSERT OR REPLACE INTO writes (thread_id, checkpoint_id, task_id, kind, idx, data) VALUES (?,?,?,?,?,?)",
        rows,
    )
    if status is not None:
        conn.execute(
            f"UPDATE threads SET status = ?, error = ?, updated_at = ?, {KEEP_LEASE_IF_RUNNING} WHERE thread_id = ?",
            (status, error, now, *_keep_if(status), thread_id),
        )


def drop_steps(conn: sqlite3.Connection, thread_id: str, below: int, blobs_from: Mapping[str, int]) -> int:
    """:meth:`~graphckpt.savers.base.Saver.drop_steps` in the caller's write transaction."""
    head = conn.execute("SELECT head_step FROM threads WHERE thread_id = ? AND deleted = 0", (thread_id,)).fetchone()
    if head is None or head[0] < below:
        return 0
    (needed,) = conn.execute(NEEDED_STEP, (thread_id,)).fetchone()
    above = -1 if needed is None else int(needed)
    gone = "SELECT checkpoint_id FROM checkpoints WHERE thread_id = ?1 AND step > ?2 AND step < ?3"
    conn.execute(
        f"DELETE FROM writes WHERE thread_id = ?1 AND (checkpoint_id IN ({gone})"
        f" OR checkpoint_id IN (SELECT checkpoint_id || '#kept' FROM ({gone})))",
        (thread_id, above, below),
    )
    conn.execute("DELETE FROM events WHERE thread_id = ? AND step > ? AND step < ?", (thread_id, above, below))
    for channel, first in blobs_from.items():
        conn.execute(
            "DELETE FROM blobs WHERE thread_id = ? AND channel = ? AND step > ? AND step < ?",
            (thread_id, channel, above, min(first, below)),
        )
    named = json.dumps(list(blobs_from))
    conn.execute(
        "DELETE FROM blobs WHERE thread_id = ? AND step > ? AND step < ? AND channel NOT IN (SELECT value FROM"
        " json_each(?))",
        (thread_id, above, below, named),
    )
    cur = conn.execute(
        "DELETE FROM checkpoints WHERE thread_id = ? AND step > ? AND step < ?", (thread_id, above, below)
    )
    return cur.rowcount


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
