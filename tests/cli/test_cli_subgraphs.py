"""``graphckpt history`` and ``threads`` on a thread whose graph has a subgraph, on terminals 60, 80 and 120 columns
wide: the subgraph's steps appear in time order under the parent step that ran them (step ``· n``, node names
``sub/i1``), every line fits, and the child thread is not listed as a thread of its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import WIDTHS, header_and_rows, make_cli, ok, on_terminal
from support.subgraph_child import build_graph

from graphckpt.savers.sqlite import SqliteSaver


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``customer-4711`` run to the end, and a fork of it from step 1 (before the subgraph) resumed."""
    tmp_path = tmp_path_factory.mktemp("cli_sub")
    with build_graph(str(tmp_path / "calls.txt")).compile(SqliteSaver(tmp_path / "runs.db")) as app:
        app.invoke({"topic": "x"}, thread_id="customer-4711")
        app.fork("customer-4711", step=1, new_thread_id="customer-4711-retry")
        app.resume("customer-4711-retry")
    return tmp_path


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("thread", ["customer-4711", "customer-4711-retry"])
def test_history_nests_the_subgraph_steps(runs: Path, columns: int, thread: str) -> None:
    out = on_terminal(runs, columns, "history", thread)
    print(out)
    assert max(len(line) for line in out.splitlines()) <= columns
    header, lines = header_and_rows(out)
    rows: list[list[str]] = []
    for line in lines:  # a folded cell (next, thread) continues on the lines below its row, which have no checkpoint
        if line[header.index("checkpoint")] or not rows:
            rows.append(line)
        else:
            rows[-1] = [a + b for a, b in zip(rows[-1], line, strict=True)]
    steps = [row[header.index("step")] for row in rows]
    ran = [row[header.index("ran")] for row in rows]
    after = ["2", "3"] if thread == "customer-4711" else ["3", "4"]  # the fork's own checkpoint is its step 2
    assert steps[-6:] == ["· 0", "· 1", "· 2", "· 3", *after]
    assert ran[-6:] == ["sub/input", "sub/i1", "sub/i2", "sub/i3", "sub", "b"]
    if thread == "customer-4711-retry":  # crosses the fork: the thread column names the root thread of every row
        threads = [row[header.index("thread")] for row in rows]
        assert threads[-6:] == ["customer-4711-retry"] * 6
        assert "customer-4711" in threads


def test_threads_hides_the_child_threads(runs: Path) -> None:
    out = on_terminal(runs, 120, "threads")
    header, rows = header_and_rows(out)
    assert sorted(row[header.index("thread")] for row in rows) == ["customer-4711", "customer-4711-retry"]


def test_history_json_and_diff_of_a_subgraph(runs: Path) -> None:
    cli = make_cli(runs)
    rows = ok(cli("history", "customer-4711", "--json")).json()
    inner = [r for r in rows if r["namespace"]]
    assert [r["step"] for r in inner] == [0, 1, 2, 3]
    assert {r["thread_id"] for r in inner} == {f"customer-4711|{inner[0]['namespace'][0]}"}
    child = inner[0]["thread_id"]
    diff = ok(cli("diff", f"{child}@{inner[0]['checkpoint_id']}", child, "--json")).json()
    assert "i1i2i3" in str(diff)
