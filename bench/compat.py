"""W2 on a LangGraph graph: LangGraph's own savers against graphckpt's compat saver (issue 27), in one run.

    python bench/compat.py                              # SQLite and PostgreSQL, 300 steps, 3 repeats
    python bench/compat.py --savers sqlite --repeats 1 --no-write

W2 appends one 1 KiB message per super-step (:func:`bench.common.message`: random printable text, so bytes measure
overhead, not compression of a repeated letter), 300 times, as plain strings (``operator.add``) and as ``AIMessage``s
(``add_messages``). Each repeat runs the same graph on LangGraph's own saver (``SqliteSaver`` on a WAL file with
``synchronous=FULL``; ``PostgresSaver``) and on ``GraphckptSaver`` over graphckpt's saver of the same kind, alternating
which goes first, on a fresh SQLite file or PostgreSQL schema; every run uses ``durability="sync"``. The table holds
medians: bytes on disk / message bytes (:func:`bench.storage.disk_bytes`), wall and CPU ms per super-step (CPU: this
process, all threads; less disturbed by the other processes of a shared machine) and the ratios compat / LangGraph.
Then a LangGraph SQLite database holding both W2 threads is moved with ``graphckpt import-langgraph``: its size before
and after. The load average is printed with the figures; ratios are taken within one run.

Writes its section of ``bench/RESULTS.md`` between ``<!-- compat:begin -->`` and ``<!-- compat:end -->``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import operator
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a script: make `graphckpt` and `bench` importable from the checkout
    sys.path.insert(0, str(ROOT))

from langchain_core.messages import AIMessage  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402

from bench import common, report  # noqa: E402
from bench.storage import DEFAULT_DSN, SQLITE_SYNCHRONOUS, Store, disk_bytes, drop_store, open_store  # noqa: E402

BEGIN, END_MARK = "<!-- compat:begin -->", "<!-- compat:end -->"
KINDS = ("str", "AIMessage")


class Strings(TypedDict):
    n: int
    stop: int
    messages: Annotated[list[str], operator.add]


class Messages(TypedDict):
    n: int
    stop: int
    messages: Annotated[list[Any], add_messages]


def build(kind: str, checkpointer: Any) -> Any:
    """W2 as a LangGraph graph: ``step`` appends one message and loops until ``n`` reaches ``stop``."""

    def step(state: dict[str, Any]) -> dict[str, Any]:
        n = state["n"]
        text = common.message(n)
        return {"n": n + 1, "messages": [text if kind == "str" else AIMessage(content=text, id=f"m{n}")]}

    g = StateGraph(Strings if kind == "str" else Messages)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["n"] < s["stop"] else END)
    return g.compile(checkpointer=checkpointer)


def langgraph_saver(store: Store, stack: contextlib.ExitStack) -> Any:
    if store.kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        assert store.path is not None
        conn = stack.enter_context(contextlib.closing(sqlite3.connect(store.path, check_same_thread=False)))
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={SQLITE_SYNCHRONOUS}")
        saver = SqliteSaver(conn)
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        saver = stack.enter_context(PostgresSaver.from_conn_string(store.dsn_with_search_path()))
    saver.setup()
    return saver


def compat_saver(store: Store, stack: contextlib.ExitStack) -> Any:
    from graphckpt.compat.langgraph import GraphckptSaver

    if store.kind == "sqlite":
        from graphckpt.savers.sqlite import SqliteSaver

        assert store.path is not None
        saver = stack.enter_context(GraphckptSaver(SqliteSaver(store.path, synchronous=SQLITE_SYNCHRONOUS)))
    else:
        from graphckpt.savers.postgres import PostgresSaver

        assert store.dsn is not None
        saver = stack.enter_context(GraphckptSaver(PostgresSaver(store.dsn, schema=store.schema)))
    saver.setup()  # tables created before the clock starts, as LangGraph's savers' setup()
    return saver


def run_w2(kind: str, make: Callable[[Store, contextlib.ExitStack], Any], store: Store, steps: int) -> dict[str, float]:
    """One W2 thread on a fresh store: wall and CPU ms per super-step, and bytes on disk."""
    with contextlib.ExitStack() as stack:
        graph = build(kind, make(store, stack))
        config = {"configurable": {"thread_id": "w2"}, "recursion_limit": 2 * steps + 10}
        start, cpu = time.perf_counter(), time.process_time()
        graph.invoke({"n": 0, "stop": steps, "messages": []}, config, durability="sync")
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"ms": 1e3 * wall / steps, "cpu": 1e3 * cpu / steps, "bytes": float(disk_bytes(store) or 0)}


def compare(saver: str, kind: str, steps: int, repeats: int, tmp: str, dsn: str) -> dict[str, dict[str, float]]:
    """Medians of each engine's figures over ``repeats`` alternating runs."""
    runs: dict[str, list[dict[str, float]]] = {"langgraph": [], "compat": []}
    makers = {"langgraph": langgraph_saver, "compat": compat_saver}
    for r in range(repeats):
        for engine in ("langgraph", "compat") if r % 2 == 0 else ("compat", "langgraph"):
            store = open_store(saver, tmp, dsn)  # type: ignore[arg-type]
            try:
                runs[engine].append(run_w2(kind, makers[engine], store, steps))
            finally:
                drop_store(store)
    return {e: {k: statistics.median(run[k] for run in rs) for k in rs[0]} for e, rs in runs.items()}


def migration(steps: int, tmp: str) -> tuple[int, int, int, int, float]:
    """A LangGraph SqliteSaver database holding both W2 threads, imported with ``import-langgraph``: threads,
    checkpoints, bytes before, bytes after, seconds."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    from graphckpt.compat.langgraph import GraphckptSaver
    from graphckpt.compat.lgimport import import_langgraph
    from graphckpt.savers.sqlite import SqliteSaver as GraphckptSqlite

    source, target = Path(tmp) / "langgraph.db", Path(tmp) / "imported.db"
    with contextlib.closing(sqlite3.connect(source, check_same_thread=False)) as conn:
        lg = SqliteSaver(conn)
        lg.setup()
        for kind in KINDS:
            config = {"configurable": {"thread_id": f"w2-{kind}"}, "recursion_limit": 2 * steps + 10}
            build(kind, lg).invoke({"n": 0, "stop": steps, "messages": []}, config, durability="sync")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    start = time.perf_counter()
    with GraphckptSaver(GraphckptSqlite(target)) as saver:
        report = import_langgraph(source, saver)
    seconds = time.perf_counter() - start
    with contextlib.closing(sqlite3.connect(target)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    after = sum(p.stat().st_size for p in Path(tmp).glob("imported.db*"))
    return report.threads, report.checkpoints, report.bytes_before, after, seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--savers", default="sqlite,postgres")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--out", default=str(ROOT / "bench" / "RESULTS.md"))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    payload = args.steps * common.MESSAGE_BYTES
    lines = [
        "| saver | messages | LangGraph bytes / message bytes | compat bytes / message bytes | LangGraph ms/step "
        "| compat ms/step | compat / LangGraph | LangGraph CPU ms/step | compat CPU ms/step | CPU compat / LangGraph |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    print(f"load average before: {load[0]:.2f} ({os.cpu_count()} CPUs)")
    print(*lines, sep="\n", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for saver in args.savers.split(","):
            for kind in KINDS:
                m = compare(saver, kind, args.steps, args.repeats, tmp, args.dsn)
                lg, gc = m["langgraph"], m["compat"]
                row = (
                    f"| {saver} | {kind} | {lg['bytes'] / payload:.1f} | {gc['bytes'] / payload:.2f} | {lg['ms']:.3f} "
                    f"| {gc['ms']:.3f} | {gc['ms'] / lg['ms']:.2f}x | {lg['cpu']:.3f} | {gc['cpu']:.3f} "
                    f"| {gc['cpu'] / lg['cpu']:.2f}x |"
                )
                lines.append(row)
                print(row, flush=True)
        threads, checkpoints, before, after, seconds = migration(args.steps, tmp)
    moved = (
        f"import-langgraph of a LangGraph SqliteSaver database ({threads} W2 threads, {checkpoints} checkpoints): "
        f"{before:,} bytes before, {after:,} after ({before / max(after, 1):.0f}x smaller), in {seconds:.1f} s"
    )
    end_load = os.getloadavg()
    print(moved)
    print(f"load average after: {end_load[0]:.2f}")
    section = "\n".join(
        [
            BEGIN,
            "",
            "## LangGraph graphs on graphckpt's compat saver (bench/compat.py, issue 27)",
            "",
            f"- date: {dt.datetime.now(dt.UTC).isoformat(timespec='seconds')}; machine: {platform.platform()}, "
            f"nproc {os.cpu_count()}, load average {load[0]:.1f} at start and {end_load[0]:.1f} at the end "
            f"(a shared machine: absolute times are noisy, ratios are taken within this run); command: "
            f"`python bench/compat.py {' '.join(sys.argv[1:] if argv is None else argv)}`",
            f"- W2, {args.steps} steps of one {common.MESSAGE_BYTES}-byte message, medians of {args.repeats} "
            'alternating runs per engine, `durability="sync"`; bytes on disk / message bytes; targets: compat at '
            "most 2.5x on SQLite and 3x on PostgreSQL, per-step time no worse than LangGraph's SqliteSaver",
            "",
            *lines,
            "",
            f"- {moved}",
            "",
            END_MARK,
        ]
    )
    if not args.no_write:
        report.write_section(args.out, BEGIN, END_MARK, section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
