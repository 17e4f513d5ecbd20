"""The data-lifecycle commands of the CLI on a real SQLite file and a real PostgreSQL schema: ``stats`` (bytes per
table and per thread), ``delete --cascade`` (a forked thread is refused naming its forks), ``prune --keep-last``."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
from support.cli import make_cli, ok, user_error
from support.postgres import PG_DSN


@pytest.fixture
def cli(tmp_path: Path) -> Any:
    return make_cli(tmp_path)


def _db_args(kind: str, schema: str | None) -> list[str]:
    return [] if kind == "sqlite" else ["--db", f"{PG_DSN}?schema={schema}"]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_stats_names_tables_and_the_biggest_threads(cli: Any, kind: str, request: pytest.FixtureRequest) -> None:
    db = _db_args(kind, request.getfixturevalue("pg_schema_name") if kind == "postgres" else None)
    ok(cli(*db, "run", "cli_graph:app", "--input", '{"request": "small"}', "--thread", "small", "-q"))
    ok(
        cli(
            *db,
            "run",
            "cli_graph:app",
            "--input",
            '{"request": "' + secrets.token_hex(12000) + '"}',
            "--thread",
            "big",
            "-q",
        )
    )
    stats = ok(cli(*db, "stats", "--json")).json()
    assert stats["thread_count"] == 2 and stats["total_bytes"] > 0
    assert {"checkpoints", "blobs", "writes", "events", "threads"} <= set(stats["tables"])
    assert all(size > 0 for size in stats["tables"].values())
    assert [t["thread_id"] for t in stats["threads"]] == ["big", "small"]
    assert stats["threads"][0]["bytes"] > 12000 > stats["threads"][1]["bytes"]
    assert stats["threads"][0]["checkpoints"] >= 3
    assert [t["thread_id"] for t in ok(cli(*db, "stats", "--json", "--top", "1")).json()["threads"]] == ["big"]
    text = ok(cli(*db, "stats")).out
    assert "biggest threads" in text and "checkpoints" in text and text.index("big") < text.index("small")


def test_delete_of_a_forked_thread_needs_cascade(cli: Any) -> None:
    ok(cli("run", "cli_graph:app", "--input", '{"request": "weather"}', "--thread", "t1", "-q"))
    first = ok(cli("history", "t1", "--json")).json()[-1]["checkpoint_id"]
    ok(cli("fork", "t1", first, "--new-thread", "alt"))
    user_error(cli("delete", "t1", "--yes"), 1, "thread 't1' has 1 fork(s)", "'alt'", "--cascade")
    assert ok(cli("delete", "t1", "--yes", "--cascade", "--json")).json() == {"deleted": "t1", "threads": ["alt", "t1"]}
    assert ok(cli("threads", "--json")).json() == []


def test_prune_dry_run_then_yes(cli: Any) -> None:
    for tid in ("a", "b", "c"):
        ok(cli("run", "cli_graph:app", "--input", '{"request": "weather"}', "--thread", tid, "-q"))
    user_error(cli("prune"), 2, "prune needs a policy")
    user_error(cli("prune", "--status", "done,sleeping"), 2, "--status: unknown status ['sleeping']")
    user_error(cli("prune", "--older-than", "soon"), 2, "--older-than must be seconds or a duration")
    dry = ok(cli("prune", "--thread", "a", "--thread", "c", "--dry-run", "--json")).json()
    assert dry["dry_run"] and sorted(dry["threads"]) == ["a", "c"] and dry["checkpoints"] > 2 and dry["bytes"] > 0
    assert len(ok(cli("threads", "--json")).json()) == 3  # nothing went
    user_error(cli("prune", "--thread", "a"), 2, "not pruning 1 thread(s) without confirmation: pass --yes")
    done = ok(cli("prune", "--thread", "a", "--thread", "c", "--yes", "--json")).json()
    assert sorted(done["threads"]) == ["a", "c"] and not done["dry_run"] and done["bytes"] > 0
    assert [t["thread_id"] for t in ok(cli("threads", "--json")).json()] == ["b"]
    assert "would remove 0 thread(s)" in ok(cli("prune", "--older-than", "30d", "--dry-run")).out


def test_prune_keep_last_reports_then_trims(cli: Any) -> None:
    """``prune --keep-last N``: a dry run names the threads, checkpoints and bytes that would go; ``--yes`` trims;
    the thread still reads and its history starts at the oldest kept checkpoint."""
    for turn in ("weather", "news"):  # two turns: one thread with many checkpoints
        ok(cli("run", "cli_graph:app", "--input", '{"request": "' + turn + '"}', "--thread", "t1", "-q"))
    history = ok(cli("history", "t1", "--json")).json()
    user_error(cli("prune", "--keep-last", "0"), 2, "--keep-last")
    dry = ok(cli("prune", "--keep-last", "2", "--dry-run", "--json")).json()
    assert dry["dry_run"] and dry["keep_last"] == 2 and dry["threads"] == ["t1"]
    assert dry["checkpoints"] == len(history) - 2 and dry["bytes"] > 0
    assert "keeping the last 2 of each" in ok(cli("prune", "--keep-last", "2", "--dry-run")).out
    done = ok(cli("prune", "--keep-last", "2", "--yes", "--json")).json()
    assert done["threads"] == ["t1"] and done["checkpoints"] == dry["checkpoints"] and done["bytes"] > 0
    kept = ok(cli("history", "t1", "--json")).json()
    assert [h["checkpoint_id"] for h in kept] == [h["checkpoint_id"] for h in history[-2:]]  # oldest first
