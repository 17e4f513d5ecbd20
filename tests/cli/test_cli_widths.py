"""The ``graphckpt`` tables on a terminal 60, 80 and 120 columns wide.

The CLI runs as a real subprocess whose stdout is a pseudo-terminal (so rich lays tables out for a terminal) with
``COLUMNS`` set (rich takes its width from it) and the pty's own size set to match. Every essential column must be
there with its whole header, no status cut, and no line wider than the terminal; ids are abbreviated like git.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.cli import WIDTHS, header_and_rows, make_cli, ok, on_terminal


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """Threads of every status with long-ish ids: done ``customer-4711``, a fork of it that failed, one interrupted."""
    tmp_path = tmp_path_factory.mktemp("widths")
    cli = make_cli(tmp_path)
    ok(cli("run", "cli_graph:app", "--input", '{"request": "weather"}', "--thread", "customer-4711", "-q"))
    first = ok(cli("history", "customer-4711", "--json")).json()[1]["checkpoint_id"]
    ok(cli("fork", "customer-4711", first, "--new-thread", "customer-4711-retry"))
    assert cli("resume", "customer-4711-retry", "-q", env={"CLI_GRAPH_FAIL": "write"}).code == 1
    ask = {"CLI_GRAPH_ASK": "1"}
    ok(cli("run", "cli_graph:app", "--input", '{"request": "q"}', "--thread", "waiting-one", "-q", env=ask))
    return tmp_path, cli


@pytest.mark.parametrize("columns", WIDTHS)
def test_threads_table_fits(family: tuple[Path, Any], columns: int) -> None:
    tmp_path, cli = family
    out = on_terminal(tmp_path, columns, "threads")
    print(out)
    assert max(len(line) for line in out.splitlines()) <= columns
    header, rows = header_and_rows(out)
    assert header[:4] == ["thread", "status", "step", "updated"]
    statuses = {row[1] for row in rows if row[1]}
    assert statuses == {"done", "failed", "interrupted"}  # each whole: no "interr…"
    assert "…" not in out
    threads = ok(cli("threads", "--json")).json()
    for t in threads:
        assert t["thread_id"] in out
        assert f" {t['step']} " in out or f"│ {t['step']}" in out
    if columns >= 120:
        assert "forked from" in header
        forked = next(t for t in threads if t["forked_from"])["forked_from"]
        source, _, checkpoint = forked.rpartition("@")
        assert f"{source}@{checkpoint[:12]}" in out and checkpoint not in out  # abbreviated like git
    if columns <= 80:
        assert "graph" not in header and "forked from" not in header
    if columns >= 80:
        assert "error" in header and "simulated" in out


@pytest.mark.parametrize("columns", WIDTHS)
def test_history_table_fits(family: tuple[Path, Any], columns: int) -> None:
    tmp_path, cli = family
    out = on_terminal(tmp_path, columns, "history", "customer-4711-retry")
    print(out)
    assert max(len(line) for line in out.splitlines()) <= columns
    header, rows = header_and_rows(out)
    for column in ("thread", "step", "checkpoint", "ran", "next"):
        assert column in header, header
    ran = [row[header.index("ran")] for row in rows]
    assert {"input", "analyze", "fork"} <= set(ran)  # whole node names, never "a"
    assert "…" not in out
    for h in ok(cli("history", "customer-4711-retry", "--json")).json():
        assert h["checkpoint_id"][:12] in out and h["checkpoint_id"] not in out
    if columns >= 80:
        assert "tokens" in header
    if columns >= 120:
        assert {"source", "duration", "tokens"} <= set(header)


@pytest.mark.parametrize("columns", WIDTHS)
def test_history_tree_abbreviates_ids(family: tuple[Path, Any], columns: int) -> None:
    tmp_path, cli = family
    out = on_terminal(tmp_path, columns, "history", "customer-4711", "--tree")
    print(out)
    for h in ok(cli("history", "customer-4711", "--json")).json():
        assert h["checkpoint_id"][:12] in out and h["checkpoint_id"] not in out
    assert "customer-4711-retry" in out and "failed" in out


def test_ids_made_in_one_millisecond_get_the_characters_that_tell_them_apart() -> None:
    from graphckpt.cli.render import abbreviations

    same_ms = ["01a2342fd7c200007a1b2c3d", "01a2342fd7c200011e2f3a4b", "01a2342fd7e10000aaaabbbb"]
    assert abbreviations(same_ms) == {
        same_ms[0]: "01a2342fd7c20000",
        same_ms[1]: "01a2342fd7c20001",
        same_ms[2]: "01a2342fd7e1",
    }
