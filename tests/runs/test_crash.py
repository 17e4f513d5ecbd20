"""Crash tests (DESIGN.md invariants 1 and 2) with real processes and SIGKILL, against SQLite and PostgreSQL.

A child process (``crash_child.py crash``) runs a 200-step graph: one node looping on itself, one journaled effect
per step that appends ``<value>\\t<idempotency key>`` to a side file and returns ``r<n>#<random>``. The parent
kills it with SIGKILL again and again and resumes the thread in a new process each time:

- at deterministic hook points chosen through ``CRASH_HOOK``/``CRASH_N`` (see ``crash_child.py``): inside the node
  before the effect (``node``), after the effect's function returned but before its journal commit (``effect``),
  after the node returned (``routed``), inside the commit transaction (``commit``; PostgreSQL also
  ``commit_synced``: Sync sent, result unread);
- at random moments, from the parent, after a random number of progress lines.

After every kill the parent inspects the side file and the database: which effect calls ran in that process, and
whether each is journaled. A call that ran and is not journaled after the kill is an *in-window* kill: the only case
in which the effect may run again. At the end it checks:

- the checkpoint chain (step, values, next nodes, status, metadata apart from timings, parent links) equals the one
  of an uninterrupted run of the same graph in another process, with the random part of the effect values removed
  (the uninterrupted run uses deterministic values ``r<n>``);
- every effect key has ``1 + (in-window kills of that key)`` lines, all with the same key and the same ``r<n>``:
  an effect whose result was journaled never ran again;
- the state holds exactly one result per effect: the last value written for its key (the one journaled);
- after every kill the head is loadable and never moved back; a kill inside the commit transaction left the previous
  checkpoint as the head; SQLite passes ``PRAGMA integrity_check`` after every kill.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import sqlite3
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from support.crash_child import Child, build_graph
from support.postgres import PG_DSN, require_postgres
from support.waiting import wait_for

from graphckpt.app import App
from graphckpt.savers.postgres import PostgresSaver
from graphckpt.savers.sqlite import SqliteSaver

pytestmark = pytest.mark.slow

STEPS = 1000
"""Long enough that the random kills (each lets a process run up to ~150 ms) do not finish the thread before every
planned hook fired: with 200, faster commits made that happen (a hook fired 4 times of 5)."""
THREAD = "crash"
REF_THREAD = "reference"
HOOKS = {
    "sqlite": {"node": 5, "effect": 5, "routed": 5, "commit": 5},
    "postgres": {"node": 5, "effect": 5, "routed": 5, "commit": 3, "commit_synced": 3},
}
RANDOM_KILLS = 12
MIN_KILLS = 25


# -- the database as the parent sees it -----------------------------------------------------------------------------


class Store:
    """Direct reads of the crash thread's rows, independent of the saver under test."""

    def __init__(self, backend: str, db: str, schema: str | None) -> None:
        self.backend, self.db, self.schema = backend, db, schema
        self._pg: psycopg.Connection[Any] | None = None
        if backend == "postgres":
            self._pg = psycopg.connect(PG_DSN, autocommit=True)

    def _query(self, text: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        if self._pg is not None:
            tables = {t: sql.Identifier(self.schema or "", t) for t in ("threads", "checkpoints", "writes")}
            query = sql.SQL(text.replace("?", "%s")).format(**tables)
            return self._pg.execute(query, params).fetchall()
        with sqlite3.connect(self.db) as conn:
            rows = conn.execute(text.format(threads="threads", checkpoints="checkpoints", writes="writes"), params)
            result = rows.fetchall()
        conn.close()
        return result

    def journaled(self, key: str) -> bool:
        """Is the effect with this idempotency key journaled: a pending ``effect`` write, or folded into a committed
        next checkpoint (whose commit deleted the writes)?"""
        thread_id, task_id, index = key.split(":")
        checkpoint_id = task_id.split(".")[0]
        writes = self._query(
            "SELECT 1 FROM {writes} WHERE thread_id = ? AND checkpoint_id = ? AND task_id = ? AND kind = 'effect'"
            " AND idx = ?",
            (thread_id, checkpoint_id, task_id, int(index)),
        )
        moved_on = self._query(
            "SELECT 1 FROM {checkpoints} WHERE thread_id = ? AND parent_checkpoint_id = ?", (thread_id, checkpoint_id)
        )
        return bool(writes or moved_on)

    def head_step(self, thread_id: str) -> int:
        rows = self._query("SELECT head_step FROM {threads} WHERE thread_id = ?", (thread_id,))
        return int(rows[0][0]) if rows else -1

    def integrity(self) -> str:
        if self._pg is not None:
            return "ok"
        with sqlite3.connect(self.db) as conn:
            result = ", ".join(row[0] for row in conn.execute("PRAGMA integrity_check"))
        conn.close()
        return result

    def settle(self, application_name: str) -> None:
        """PostgreSQL: wait until the killed client's server backend is gone, so whatever it had sent has been
        committed or rolled back before we look (and before the next process resumes)."""
        if self._pg is None:
            return
        query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        pg = self._pg
        wait_for(
            lambda: pg.execute(query, (application_name,)).fetchone() == (0,),
            15,
            interval=0.005,
            what=f"the server backend of {application_name} to go away",
        )

    def close(self) -> None:
        if self._pg is not None:
            self._pg.close()


def side_lines(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    text = path.read_text()
    assert not text or text.endswith("\n"), "a torn line in the side file"
    return [(value, key) for value, key in (line.split("\t") for line in text.splitlines())]


# -- one campaign ----------------------------------------------------------------------------------------------------


@dataclass
class Campaign:
    backend: str
    db: str
    schema: str | None
    tmp: Path
    rng: random.Random
    kills: Counter[str] = field(default_factory=Counter)
    window_kills: Counter[str] = field(default_factory=Counter)
    commit_landed: Counter[str] = field(default_factory=Counter)
    head_at_finish: int = -1
    in_window: Counter[str] = field(default_factory=Counter)
    processes: int = 0
    _spawned: int = 0

    def child_args(self, thread_id: str, side: Path, *, nonce: bool, application_name: str) -> list[str]:
        db = make_conninfo(self.db, application_name=application_name) if self.backend == "postgres" else self.db
        args = ["crash", "--backend", self.backend, "--db", db, "--thread", thread_id, "--side", str(side)]
        args += ["--steps", str(STEPS)]
        if self.schema:
            args += ["--schema", self.schema]
        if nonce:
            args.append("--nonce")
        if self.backend == "postgres":
            args.append("--async-node")  # ctx.aeffect in an async node; SQLite runs ctx.effect in a sync node
        return args

    def spawn(self, thread_id: str, side: Path, *, nonce: bool, env: dict[str, str] | None = None) -> tuple[Child, str]:
        self.processes += 1
        self._spawned += 1
        name = f"gc_crash_{os.getpid()}_{self._spawned}"
        return Child(*self.child_args(thread_id, side, nonce=nonce, application_name=name), env=env), name

    def run(self, app: App, store: Store) -> None:
        side = self.tmp / "effects.tsv"
        plan = [kind for kind, n in HOOKS[self.backend].items() for _ in range(n)] + ["random"] * RANDOM_KILLS
        self.rng.shuffle(plan)
        counts: Counter[str] = Counter()  # lines per key in the side file, as of the last kill
        journaled: set[str] = set()
        last_head = -1
        while True:
            assert self.processes < 200, "the crash campaign does not converge"
            head = store.head_step(THREAD)
            if head >= STEPS:  # a random kill landed after the last commit, before the process exited: nothing
                plan.clear()  # is left to interrupt (the kill count is checked against MIN_KILLS at the end)
            kind = plan.pop() if plan else "finish"
            if kind == "finish":
                self.head_at_finish = head  # margin: how far the kills got of STEPS (see the summary line)
            env: dict[str, str] = {}
            target = -1
            if kind not in ("random", "finish"):
                # The head's own effect may already be journaled (then it is not called again): aim past it.
                target = min(max(head, 0) + self.rng.randint(1 if kind == "effect" else 0, 3), STEPS - 1)
                env = {"CRASH_HOOK": kind, "CRASH_N": str(target)}
            child, name = self.spawn(THREAD, side, nonce=True, env=env)
            try:
                if kind == "random":  # a random moment: k progress lines, then 0-15 ms (k = 0: while starting)
                    lines_to_read = self.rng.randint(0, 5)
                    for _ in range(lines_to_read):
                        if child.next_line() is None:
                            break
                    time.sleep(self.rng.uniform(0, 0.015) if lines_to_read else self.rng.uniform(0.02, 0.15))
                    child.kill()
                rc = child.finish()
            finally:
                child.stop()
            store.settle(name)

            lines = side_lines(side)
            now = Counter(key for _, key in lines)
            grown = {key for key in now if now[key] > counts[key]}
            assert not grown & journaled, f"journaled effects ran again after kill #{self.kills.total()}: {grown}"
            journaled |= {key for key in now if key not in journaled and store.journaled(key)}
            counts = now
            assert store.integrity() == "ok"

            if rc == 0:
                assert child.out[-1] == "done done", child.describe()
                assert kind in ("finish", "random"), f"hook {kind} at n={target} never fired: {child.describe()}"
                assert not grown - journaled
                return
            assert rc == -signal.SIGKILL, f"{kind}: {child.describe()}"
            detail = ""
            if kind != "random":
                hook, _, detail = child.out[-1].partition(f"hook {kind} {target}")
                assert not hook and child.out[-1].startswith("hook"), child.describe()
                detail = detail.strip()
            self.kills[kind] += 1

            window = grown - journaled  # the effect ran in this process and its result is not in the journal
            for key in window:
                self.in_window[key] += 1
            self.window_kills[kind] += len(window)
            if kind == "effect":
                assert len(window) == 1, f"kill after the effect call, before its journal: {window}"
                assert {value.split("#")[0] for value, key in lines if key in window} == {f"r{target}"}
            elif kind != "random":
                assert not window, f"{kind}: effects ran but are not journaled: {window}"

            if store.head_step(THREAD) < 0:  # killed before the thread's first commit
                assert kind == "random" and last_head < 0
                continue
            snap = app.get_state(THREAD)  # the head is intact and loadable, and never moved back
            assert snap.step >= last_head and snap.values.n == snap.step
            assert len(snap.values.results) == snap.step
            if kind in ("commit", "commit_synced"):
                assert snap.step in (target, target + 1)
                where = f"{kind}:{detail}" if detail else kind
                self.commit_landed[f"{where}:{'landed' if snap.step == target + 1 else 'rolled back'}"] += 1
                if detail in ("", "pipeline-unsynced"):  # killed before COMMIT (SQLite) or Sync: must roll back
                    assert snap.step == target, "a commit killed before COMMIT became visible"
            last_head = snap.step

    def check(self, app: App, store: Store) -> dict[str, Any]:
        ref = list(reversed(app.history(REF_THREAD)))
        got = list(reversed(app.history(THREAD)))
        assert [s.step for s in got] == list(range(STEPS + 1))
        assert [s.step for s in ref] == list(range(STEPS + 1))
        assert not {s.checkpoint_id for s in got} & {s.checkpoint_id for s in ref}
        for prev, cur in itertools.pairwise(got):
            assert cur.parent is not None and cur.parent.checkpoint_id == prev.checkpoint_id
        for a, b in zip(got, ref, strict=True):
            assert _comparable(a) == _comparable(b), f"step {a.step} differs from the uninterrupted run"
        final = got[-1]
        assert final.status == "done" and not final.tasks
        assert app.get_state(THREAD).status == "done"
        assert [v.split("#")[0] for v in final.values.results] == [f"r{n}" for n in range(STEPS)]
        assert final.values.n == STEPS

        # The effects outside: one key per effect, extra lines only for in-window kills, the state used the last one.
        lines = side_lines(self.tmp / "effects.tsv")
        by_key: dict[str, list[str]] = defaultdict(list)
        keys_of: dict[str, set[str]] = defaultdict(set)
        for value, key in lines:
            by_key[key].append(value)
            keys_of[value.split("#")[0]].add(key)
        expected_keys = {f"{THREAD}:{got[n].checkpoint_id}.0:0": n for n in range(STEPS)}
        assert set(by_key) == set(expected_keys)
        for key, values in by_key.items():
            n = expected_keys[key]
            assert {v.split("#")[0] for v in values} == {f"r{n}"}
            assert len(values) == 1 + self.in_window[key], f"effect {key} ran {len(values)} times"
            assert final.values.results[n] == values[-1], f"step {n} did not use the journaled result"
            assert len(set(values)) == len(values)  # every call returned its own random value: one of them used
        assert all(len(keys) == 1 for keys in keys_of.values()), "a repeated effect changed its idempotency key"

        # The audit record: each effect finished once, last; every in-window kill left a lost call with its key
        calls = [c for s in got for c in s.metadata.get("audit", {}).get("calls", [])]
        for key in expected_keys:
            mine = [c["status"] for c in calls if c["key"] == key]
            assert mine.count("finished") == 1 and mine[-1] == "finished" and set(mine) <= {"lost", "finished"}
            assert mine.count("lost") >= self.in_window[key], f"effect {key}: an in-window kill is not in the record"
        duplicates = len(lines) - STEPS
        assert duplicates == self.in_window.total()

        ref_lines = side_lines(self.tmp / "reference.tsv")
        assert [v for v, _ in ref_lines] == [f"r{n}" for n in range(STEPS)]
        assert len({k for _, k in ref_lines}) == STEPS
        assert store.integrity() == "ok"
        return {"duplicate_lines": duplicates}


def _comparable(s: Any) -> dict[str, Any]:
    # timings, and the record of the crashes themselves (lost calls, replays), differ from the uninterrupted run
    meta = {k: v for k, v in s.metadata.items() if k not in ("durations_ms", "audit", "replayed_ms")}
    return {
        "step": s.step,
        "n": s.values.n,
        "results": [v.split("#")[0] for v in s.values.results],
        "next": [t.node for t in s.tasks],
        "status": s.status,
        "metadata": meta,
        "interrupts": s.interrupts,
        "has_parent": s.parent is not None,
    }


def _campaign(backend: str, db: str, schema: str | None, tmp: Path, saver: Any) -> None:
    seed = int(os.environ.get("GRAPHCKPT_CRASH_SEED", time.time_ns() % 2**32))
    camp = Campaign(backend, db, schema, tmp, random.Random(seed))
    store = Store(backend, db, schema)
    app = build_graph(steps=STEPS).compile(saver=saver, recursion_limit=STEPS + 10)
    started = time.monotonic()
    try:
        ref, name = camp.spawn(REF_THREAD, tmp / "reference.tsv", nonce=False)
        try:
            assert ref.finish() == 0 and ref.out[-1] == "done done", ref.describe()
        finally:
            ref.stop()
        store.settle(name)
        camp.processes = 0
        camp.run(app, store)
        summary = camp.check(app, store)
    except BaseException:
        print(f"crash campaign {backend} failed with GRAPHCKPT_CRASH_SEED={seed}")
        raise
    finally:
        app.close()
        store.close()
    elapsed = time.monotonic() - started
    print(
        f"\ncrash {backend}: seed={seed} kills={camp.kills.total()} by kind={dict(camp.kills)} "
        f"processes={camp.processes} resumes={camp.processes - 1} in-window kills by kind={dict(camp.window_kills)} "
        f"commit outcomes={dict(camp.commit_landed)} {summary} head at finish={camp.head_at_finish}/{STEPS} "
        f"time={elapsed:.1f}s"
    )
    assert camp.kills.total() >= MIN_KILLS
    for kind, n in HOOKS[backend].items():
        assert camp.kills[kind] == n, f"hook {kind} fired {camp.kills[kind]} times, planned {n}"
    assert camp.window_kills["effect"] == HOOKS[backend]["effect"]


def test_sqlite_survives_sigkill_anywhere(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    _campaign("sqlite", str(db), None, tmp_path, SqliteSaver(db))


@pytest.fixture
def pg_crash_schema() -> Iterator[str]:
    require_postgres()
    schema = f"gc_crash_{uuid.uuid4().hex[:12]}"
    try:
        yield schema
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.mark.postgres
def test_postgres_survives_sigkill_anywhere(tmp_path: Path, pg_crash_schema: str) -> None:
    _campaign("postgres", PG_DSN, pg_crash_schema, tmp_path, PostgresSaver(PG_DSN, schema=pg_crash_schema))
