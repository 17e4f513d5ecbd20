"""The durable event log's tables and triggers, for SQLite and PostgreSQL.

The events of a write commit in that write's transaction (the checkpoint commit, a claim, a stop, a pending write),
so no write path can forget one. A checkpoint commit writes its own (:mod:`graphckpt.savers.events`, computed in
Python from what it writes: SQLite inserts them with :data:`SQLITE_INSERT_EVENT`, PostgreSQL's ``graphckpt_commit``
takes them as two arrays); the rarer ones are derived by triggers from the rows that make them (a thread created by
an input, a claim, a stop, a pending write of kind effect, interrupt or error). The migrations here first derived
the checkpoint's events by a trigger too; SQLite migration 5 and PostgreSQL migration 7 drop it. Per thread, the
writer holds the thread's row (PostgreSQL) or the file's write lock (SQLite), so ``seq`` is ``max + 1`` within the
step without races. Kinds and payloads: :data:`graphckpt.savers.base.EventKind`.

``id`` (a rowid / identity column) is the store's change counter: streams poll ``max(id)``, one index look-up, and
on PostgreSQL also wake on ``NOTIFY graphckpt_events`` (payload: the schema name) sent by the threads' trigger,
which fires on every commit (the head moves).
"""

from __future__ import annotations

from typing import Final, LiteralString

__all__ = [
    "PG_EVENTS_MIGRATION",
    "PG_EVENT_KIND",
    "PG_READ_EVENTS",
    "PG_VERSION",
    "SQLITE_EVENTS_MIGRATION",
    "SQLITE_EVENT_KIND",
    "SQLITE_INSERT_EVENT",
    "SQLITE_VERSION",
    "sqlite_read_events",
]

_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
_SQLITE_NEXT = "(SELECT coalesce(max(seq) + 1, 0) FROM events WHERE thread_id = {tid} AND step = {step})"


def _sqlite_insert(step: str, kind: str, payload: str, *, at: str = _SQLITE_NOW, where: str = "") -> str:
    """One event of ``new.thread_id`` at ``step``, with the next ``seq``."""
    return (
        "INSERT INTO events (thread_id, step, seq, kind, payload, created_at) SELECT new.thread_id, "
        f"{step}, {_SQLITE_NEXT.format(tid='new.thread_id', step=step)}, {kind}, {payload}, {at} {where};"
    )


SQLITE_EVENTS_MIGRATION: Final[tuple[str, ...]] = (
    """CREATE TABLE events (
        id INTEGER PRIMARY KEY, thread_id TEXT NOT NULL, step INTEGER NOT NULL, seq INTEGER NOT NULL,
        kind TEXT NOT NULL, payload TEXT NOT NULL, created_at REAL NOT NULL, UNIQUE (thread_id, step, seq))""",
    # a thread made by an input: its run starts at its first step
    "CREATE TRIGGER events_thread_created AFTER INSERT ON threads "
    "WHEN json_extract(new.metadata, '$.source') = 'input' BEGIN "
    + _sqlite_insert("new.head_step", "'run.started'", "json_object('run_id', new.run_id)")
    + " END",
    # a claim (same head, new owner): a run starts at the next step
    "CREATE TRIGGER events_thread_claimed AFTER UPDATE OF run_id ON threads "
    "WHEN new.run_id IS NOT old.run_id AND new.head_checkpoint_id = old.head_checkpoint_id BEGIN "
    + _sqlite_insert("new.head_step + 1", "'run.started'", "json_object('run_id', new.run_id)")
    + " END",
    # a stop recorded with pending writes (same head): failed or interrupted
    "CREATE TRIGGER events_thread_stopped AFTER UPDATE OF status ON threads "
    "WHEN new.head_checkpoint_id = old.head_checkpoint_id AND new.status IN ('failed', 'interrupted') "
    "AND new.status IS NOT old.status BEGIN "
    + _sqlite_insert(
        "new.head_step + 1", "'run.' || new.status", "json_object('status', new.status, 'error', new.error)"
    )
    + " END",
    "CREATE TRIGGER events_thread_deleted AFTER DELETE ON threads BEGIN "
    "DELETE FROM events WHERE thread_id = old.thread_id; END",
    # a checkpoint: one task.finished per node that wrote (loop steps), the checkpoint, and the run's end
    "CREATE TRIGGER events_checkpoint AFTER INSERT ON checkpoints BEGIN "
    "INSERT INTO events (thread_id, step, seq, kind, payload, created_at) "
    "SELECT new.thread_id, new.step, "
    + _SQLITE_NEXT.format(tid="new.thread_id", step="new.step")
    + " + row_number() OVER () - 1, 'task.finished', json_object('node', w.key, 'writes', json(w.value), "
    "'duration_ms', (SELECT d.value FROM json_each(new.metadata, '$.durations_ms') d WHERE d.key = w.key), "
    "'usage', (SELECT json(u.value) FROM json_each(new.metadata, '$.usage') u WHERE u.key = w.key)), "
    "new.created_at FROM json_each(new.metadata, '$.writes') w "
    "WHERE json_extract(new.metadata, '$.source') = 'loop'; "
    + _sqlite_insert(
        "new.step",
        "'checkpoint'",
        "json_object('checkpoint_id', new.checkpoint_id, 'parent_thread_id', new.parent_thread_id, "
        "'parent_checkpoint_id', new.parent_checkpoint_id, 'step', new.step, "
        "'source', json_extract(new.metadata, '$.source'), 'status', new.status, "
        "'writes', json(coalesce(json_extract(new.metadata, '$.writes'), '{}')))",
        at="new.created_at",
    )
    + _sqlite_insert(
        "new.step",
        "'run.' || new.status",
        "json_object('status', new.status, 'error', NULL)",
        at="new.created_at",
        where="WHERE new.status IN ('done', 'interrupted') "
        "AND json_extract(new.metadata, '$.source') IN ('input', 'loop', 'update')",
    )
    + " END",
    # a pending write that a reader wants to see before the step commits
    "CREATE TRIGGER events_write AFTER INSERT ON writes WHEN new.kind IN ('effect', 'interrupt', 'error') BEGIN "
    "INSERT INTO events (thread_id, step, seq, kind, payload, created_at) "
    "SELECT new.thread_id, c.step + 1, "
    + _SQLITE_NEXT.format(tid="new.thread_id", step="c.step + 1")
    + ", CASE new.kind WHEN 'effect' THEN 'effect.recorded' WHEN 'interrupt' THEN 'interrupt.raised' "
    "ELSE 'task.failed' END, json_object('task_id', new.task_id, 'index', new.idx, "
    "'checkpoint_id', new.checkpoint_id), "
    + _SQLITE_NOW
    + " FROM checkpoints c WHERE c.thread_id = new.thread_id AND c.checkpoint_id = new.checkpoint_id; END",
)
"""One migration: the ``events`` table and its triggers on ``threads``, ``checkpoints`` and ``writes``. (Migration 5
drops the one on ``checkpoints``: the commit writes those events itself, see :mod:`graphckpt.savers.events`.)"""

SQLITE_INSERT_EVENT: Final = (
    "INSERT INTO events (thread_id, step, seq, kind, payload, created_at) VALUES (?1, ?2, "
    + _SQLITE_NEXT.format(tid="?1", step="?2")
    + ", ?3, ?4, ?5)"
)
"""One event a commit writes (:func:`graphckpt.savers.events.checkpoint_events`): ``(thread_id, step, kind,
payload, created_at)``, with the next ``seq`` of its step."""

SQLITE_VERSION: Final = "SELECT coalesce(max(id), 0) FROM events"
SQLITE_EVENT_KIND: Final = "SELECT kind FROM events WHERE thread_id = ? AND step = ? AND seq = ?"


def sqlite_read_events(segments: int) -> str:
    """The query of ``read_events`` for that many lineage segments: parameters ``(step, seq)`` of the cursor twice
    (step, step, seq), then ``(thread_id, first, upper)`` per segment, then the limit."""
    where = " OR ".join(["(thread_id = ? AND step >= ? AND step < ?)"] * segments)
    return (
        "SELECT thread_id, step, seq, kind, payload, created_at FROM events "
        f"WHERE (step > ? OR (step = ? AND seq > ?)) AND ({where}) ORDER BY step, seq LIMIT ?"
    )


_PG_NEXT: LiteralString = (
    "(SELECT coalesce(max(e.seq) + 1, 0) FROM {events} e WHERE e.thread_id = {tid} AND e.step = {step})"
)


def _pg_insert(step: LiteralString, kind: LiteralString, payload: LiteralString) -> LiteralString:
    return (
        "INSERT INTO {events} (thread_id, step, seq, kind, payload, created_at) VALUES (NEW.thread_id, "
        + step
        + ", "
        + _PG_NEXT.replace("{tid}", "NEW.thread_id").replace("{step}", step)
        + ", "
        + kind
        + ", "
        + payload
        + ", extract(epoch from clock_timestamp()));"
    )


_PG_SAFE_METADATA: LiteralString = """m := CASE WHEN strpos(NEW.metadata::text, '\\u0000') = 0 THEN NEW.metadata
                    ELSE replace(NEW.metadata::text, '\\u0000', '\\ufffd')::json END;"""
"""``m``: the metadata, readable by ``->>`` (which refuses a ``\\u0000`` escape, legal in ``json`` text): for the
event payload only, such an escape reads as U+FFFD."""

PG_EVENTS_MIGRATION: Final[tuple[LiteralString, ...]] = (
    """CREATE TABLE {events} (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        step bigint NOT NULL,
        seq integer NOT NULL,
        created_at double precision NOT NULL,
        thread_id text COLLATE "C" NOT NULL,
        kind text COLLATE "C" NOT NULL,
        payload json NOT NULL,
        UNIQUE (thread_id, step, seq))""",
    """CREATE FUNCTION {graphckpt_events_threads}() RETURNS trigger LANGUAGE plpgsql AS $fn$
        DECLARE
            m json;
        BEGIN
            IF TG_OP = 'DELETE' THEN
                DELETE FROM {events} WHERE thread_id = OLD.thread_id;
                RETURN NULL;
            ELSIF TG_OP = 'INSERT' THEN
                """
    + _PG_SAFE_METADATA
    + """
                IF m ->> 'source' = 'input' THEN
                    """
    + _pg_insert("NEW.head_step", "'run.started'", "json_build_object('run_id', NEW.run_id)")
    + """
                END IF;
            ELSIF NEW.head_checkpoint_id = OLD.head_checkpoint_id THEN
                IF NEW.run_id IS DISTINCT FROM OLD.run_id THEN
                    """
    + _pg_insert("NEW.head_step + 1", "'run.started'", "json_build_object('run_id', NEW.run_id)")
    + """
                END IF;
                IF NEW.status IN ('failed', 'interrupted') AND NEW.status IS DISTINCT FROM OLD.status THEN
                    """
    + _pg_insert(
        "NEW.head_step + 1", "'run.' || NEW.status", "json_build_object('status', NEW.status, 'error', NEW.error)"
    )
    + """
                END IF;
            END IF;
            PERFORM pg_notify('graphckpt_events', TG_TABLE_SCHEMA);
            RETURN NULL;
        END
        $fn$""",
    """CREATE TRIGGER graphckpt_events AFTER INSERT OR UPDATE OF run_id, status, head_checkpoint_id OR DELETE
        ON {threads} FOR EACH ROW EXECUTE FUNCTION {graphckpt_events_threads}()""",
    """CREATE FUNCTION {graphckpt_events_checkpoints}() RETURNS trigger LANGUAGE plpgsql AS $fn$
        DECLARE
            w record;
            m json;
        BEGIN
            """
    + _PG_SAFE_METADATA
    + """
            IF m ->> 'source' = 'loop' THEN
                FOR w IN SELECT key, value FROM json_each(coalesce(m -> 'writes', '{{}}'::json)) LOOP
                    """
    + _pg_insert(
        "NEW.step",
        "'task.finished'",
        "json_build_object('node', w.key, 'writes', w.value, 'duration_ms', m -> 'durations_ms' -> w.key, "
        "'usage', m -> 'usage' -> w.key)",
    )
    + """
                END LOOP;
            END IF;
            """
    + _pg_insert(
        "NEW.step",
        "'checkpoint'",
        "json_build_object('checkpoint_id', NEW.checkpoint_id, 'parent_thread_id', NEW.parent_thread_id, "
        "'parent_checkpoint_id', NEW.parent_checkpoint_id, 'step', NEW.step, 'source', m ->> 'source', "
        "'status', NEW.status, 'writes', coalesce(m -> 'writes', '{{}}'::json))",
    )
    + """
            IF NEW.status IN ('done', 'interrupted') AND m ->> 'source' IN ('input', 'loop', 'update') THEN
                """
    + _pg_insert("NEW.step", "'run.' || NEW.status", "json_build_object('status', NEW.status, 'error', NULL)")
    + """
            END IF;
            PERFORM pg_notify('graphckpt_events', TG_TABLE_SCHEMA);
            RETURN NULL;
        END
        $fn$""",
    """CREATE TRIGGER graphckpt_events AFTER INSERT ON {checkpoints}
        FOR EACH ROW EXECUTE FUNCTION {graphckpt_events_checkpoints}()""",
    """CREATE FUNCTION {graphckpt_events_writes}() RETURNS trigger LANGUAGE plpgsql AS $fn$
        DECLARE
            s bigint;
        BEGIN
            SELECT c.step + 1 INTO s FROM {checkpoints} c
            WHERE c.thread_id = NEW.thread_id AND c.checkpoint_id = NEW.checkpoint_id;
            IF s IS NOT NULL THEN
                """
    + _pg_insert(
        "s",
        "CASE NEW.kind WHEN 'effect' THEN 'effect.recorded' WHEN 'interrupt' THEN 'interrupt.raised' "
        "ELSE 'task.failed' END",
        "json_build_object('task_id', NEW.task_id, 'index', NEW.idx, 'checkpoint_id', NEW.checkpoint_id)",
    )
    + """
                PERFORM pg_notify('graphckpt_events', TG_TABLE_SCHEMA);
            END IF;
            RETURN NULL;
        END
        $fn$""",
    """CREATE TRIGGER graphckpt_events AFTER INSERT ON {writes}
        FOR EACH ROW WHEN (NEW.kind IN ('effect', 'interrupt', 'error'))
        EXECUTE FUNCTION {graphckpt_events_writes}()""",
)
"""One migration: the ``events`` table and the trigger functions ``graphckpt_events_threads``,
``graphckpt_events_checkpoints`` and ``graphckpt_events_writes`` (each a ``graphckpt_events`` trigger on its table)."""

PG_VERSION: Final = "SELECT coalesce(max(id), 0) FROM {events}"
PG_EVENT_KIND: Final = "SELECT kind FROM {events} WHERE thread_id = %(tid)s AND step = %(step)s AND seq = %(seq)s"
PG_READ_EVENTS: Final = """SELECT e.thread_id, e.step, e.seq, e.kind, e.payload, e.created_at
    FROM {events} e JOIN unnest(%(tids)s::text[], %(firsts)s::bigint[], %(uppers)s::bigint[]) AS s(tid, first, upper)
    ON e.thread_id = s.tid AND e.step >= s.first AND e.step < s.upper
    WHERE (e.step, e.seq) > (%(step)s, %(seq)s) ORDER BY e.step, e.seq LIMIT %(limit)s"""
