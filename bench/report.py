"""Turns the figures of one run into the performance tables: every figure of both engines side by side, then the
target table (ratios taken inside the same run, each target met or missed), printed and written as Markdown.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

Key = tuple[str, str, str]
"""(engine, workload, saver); the FLOOR figures use engine ``floor``."""


@dataclasses.dataclass
class Results:
    """Every figure of every repeat, and the runs that failed."""

    samples: dict[Key, dict[str, list[float]]] = dataclasses.field(default_factory=lambda: defaultdict(dict))
    errors: dict[Key, str] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)

    def add(self, key: Key, figures: dict[str, float]) -> None:
        for name, value in figures.items():
            self.samples[key].setdefault(name, []).append(float(value))

    def median(self, engine: str, workload: str, saver: str, figure: str) -> float | None:
        values = self.samples.get((engine, workload, saver), {}).get(figure)
        return statistics.median(values) if values else None


@dataclasses.dataclass(frozen=True)
class Target:
    """One row of the target table: the measured value is ``measure(results)``, met when ``ok(value)``."""

    workload: str
    saver: str
    what: str
    target: str
    measure: Callable[[Results], float | None]
    ok: Callable[[float], bool]
    langgraph: Callable[[Results], float | None] = lambda r: None
    graphckpt: Callable[[Results], float | None] = lambda r: None


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _targets() -> list[Target]:
    lg, gc = "langgraph", "graphckpt"
    rows: list[Target] = []

    def fig(engine: str, workload: str, saver: str, figure: str) -> Callable[[Results], float | None]:
        return lambda r: r.median(engine, workload, saver, figure)

    def both(workload: str, saver: str, figure: str) -> dict[str, Callable[[Results], float | None]]:
        return {"langgraph": fig(lg, workload, saver, figure), "graphckpt": fig(gc, workload, saver, figure)}

    rows.append(
        Target(
            "W7",
            "none",
            "graphckpt / LangGraph, ms per super-step",
            "<= 0.2",
            lambda r: _ratio(r.median(gc, "W7", "none", "ms_per_step"), r.median(lg, "W7", "none", "ms_per_step")),
            lambda v: v <= 0.2,
            **both("W7", "none", "ms_per_step"),
        )
    )
    for saver, name in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        rows.append(
            Target(
                "W1",
                saver,
                f"graphckpt / {name} FLOOR, ms per super-step",
                "<= 1.5",
                lambda r, s=saver: _ratio(
                    r.median(gc, "W1", s, "ms_per_step"), r.median("floor", "FLOOR", s, "ms_per_commit")
                ),
                lambda v: v <= 1.5,
                **both("W1", saver, "ms_per_step"),
            )
        )
    rows.append(
        Target(
            "W1",
            "sqlite",
            "LangGraph / graphckpt, ms per super-step",
            ">= 4",
            lambda r: _ratio(r.median(lg, "W1", "sqlite", "ms_per_step"), r.median(gc, "W1", "sqlite", "ms_per_step")),
            lambda v: v >= 4,
            **both("W1", "sqlite", "ms_per_step"),
        )
    )
    rows.append(
        Target(
            "W3",
            "sqlite",
            "graphckpt SQLite / no-saver, ms per super-step",
            "<= 1.3",
            lambda r: _ratio(r.median(gc, "W3", "sqlite", "ms_per_step"), r.median(gc, "W3", "none", "ms_per_step")),
            lambda v: v <= 1.3,
            langgraph=lambda r: _ratio(
                r.median(lg, "W3", "sqlite", "ms_per_step"), r.median(lg, "W3", "none", "ms_per_step")
            ),
            graphckpt=lambda r: _ratio(
                r.median(gc, "W3", "sqlite", "ms_per_step"), r.median(gc, "W3", "none", "ms_per_step")
            ),
        )
    )
    for saver, cap in (("sqlite", 1.3), ("postgres", 2.0)):
        rows.append(
            Target(
                "W2",
                saver,
                "bytes on disk / bytes of messages",
                f"<= {cap}",
                fig(gc, "W2", saver, "disk_over_messages"),
                lambda v, c=cap: v <= c,
                **both("W2", saver, "disk_over_messages"),
            )
        )
        rows.append(
            Target(
                "W2",
                saver,
                "last-50 / first-50 step time",
                "<= 1.1",
                fig(gc, "W2", saver, "last_over_first"),
                lambda v: v <= 1.1,
                **both("W2", saver, "last_over_first"),
            )
        )
        rows.append(
            Target(
                "W2Q",
                saver,
                "bytes on disk / bytes of messages, savers made with events=False (no durable event log)",
                f"<= {cap}",
                fig(gc, "W2Q", saver, "disk_over_messages"),
                lambda v, c=cap: v <= c,
                graphckpt=fig(gc, "W2Q", saver, "disk_over_messages"),
            )
        )
    for saver in ("sqlite", "postgres"):
        rows.append(
            Target(
                "W4",
                saver,
                "list the whole history, ms",
                "<= 10 ms",
                fig(gc, "W4", saver, "list_ms"),
                lambda v: v <= 10,
                **both("W4", saver, "list_ms"),
            )
        )
        rows.append(
            Target(
                "W4",
                saver,
                "past get_state on W2, graphckpt / LangGraph",
                "<= 0.5",
                lambda r, s=saver: _ratio(r.median(gc, "W4", s, "get_state_ms"), r.median(lg, "W4", s, "get_state_ms")),
                lambda v: v <= 0.5,
                **both("W4", saver, "get_state_ms"),
            )
        )
    for saver in ("sqlite", "postgres"):
        rows.append(
            Target(
                "W5",
                saver,
                "process start to first resumed step, graphckpt / LangGraph",
                "<= 0.5",
                lambda r, s=saver: _ratio(
                    r.median(gc, "W5", s, "start_to_first_step_ms"), r.median(lg, "W5", s, "start_to_first_step_ms")
                ),
                lambda v: v <= 0.5,
                **both("W5", saver, "start_to_first_step_ms"),
            )
        )
    for saver in ("sqlite", "postgres"):
        rows.append(
            Target(
                "W5C",
                saver,
                "chat_node graph (offline model): process start to first resumed step, / plain W5 (both graphckpt)",
                "<= 1.3",
                lambda r, s=saver: _ratio(
                    r.median(gc, "W5C", s, "start_to_first_step_ms"), r.median(gc, "W5", s, "start_to_first_step_ms")
                ),
                lambda v: v <= 1.3,
                graphckpt=fig(gc, "W5C", saver, "start_to_first_step_ms"),
            )
        )
        rows.append(
            Target(
                "W5C",
                saver,
                "the same, in the child's CPU time (less sensitive to other load on the machine)",
                "<= 1.3",
                lambda r, s=saver: _ratio(
                    r.median(gc, "W5C", s, "start_to_first_step_cpu_ms"),
                    r.median(gc, "W5", s, "start_to_first_step_cpu_ms"),
                ),
                lambda v: v <= 1.3,
                graphckpt=fig(gc, "W5C", saver, "start_to_first_step_cpu_ms"),
            )
        )
    for saver, cap in (("sqlite", 0.5), ("postgres", 1.0)):
        rows.append(
            Target(
                "W6",
                saver,
                "fork, ms, one call right after gc.collect() (cold; finding the checkpoint not included)",
                f"<= {cap} ms",
                fig(gc, "W6", saver, "fork_ms"),
                lambda v, c=cap: v <= c,
                **both("W6", saver, "fork_ms"),
            )
        )
        rows.append(
            Target(
                "W6",
                saver,
                "fork, ms, median of 15 back to back (warm)",
                f"<= {cap} ms",
                fig(gc, "W6", saver, "fork_warm_ms"),
                lambda v, c=cap: v <= c,
                **both("W6", saver, "fork_warm_ms"),
            )
        )
        rows.append(
            Target(
                "W6",
                saver,
                "bytes the fork adds (payload)",
                "<= 4096 B, O(1)",
                fig(gc, "W6", saver, "fork_bytes"),
                lambda v: v <= 4096,
                **both("W6", saver, "fork_bytes"),
            )
        )
    return rows


TARGETS = _targets()


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0 or abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def figures_table(results: Results) -> list[str]:
    """Every figure: workload, saver, figure, each engine's median, graphckpt / LangGraph."""
    grouped: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for engine, workload, saver in results.samples:
        for figure in results.samples[(engine, workload, saver)]:
            grouped[(workload, saver)][figure].add(engine)
    rows = []
    order = {"none": 0, "memory": 1, "sqlite": 2, "postgres": 3}
    for workload, saver in sorted(grouped, key=lambda k: (k[0], order.get(k[1], 9))):
        for figure in grouped[(workload, saver)]:
            if workload == "FLOOR":
                rows.append(
                    [workload, saver, figure, "-", "-", _fmt(results.median("floor", workload, saver, figure)), "-"]
                )
                continue
            lgv = results.median("langgraph", workload, saver, figure)
            gcv = results.median("graphckpt", workload, saver, figure)
            rows.append([workload, saver, figure, _fmt(lgv), _fmt(gcv), "-", _fmt(_ratio(gcv, lgv))])
    return _table(
        ["workload", "saver", "figure (median)", "LangGraph", "graphckpt", "FLOOR", "graphckpt / LangGraph"], rows
    )


def targets_table(results: Results) -> list[str]:
    """The issue's targets: both engines' figures, the measured value, the target, met or missed."""
    rows = []
    for t in TARGETS:
        value = t.measure(results)
        verdict = "-" if value is None else ("met" if t.ok(value) else "**missed**")
        rows.append(
            [
                t.workload,
                t.saver,
                t.what,
                _fmt(t.langgraph(results)),
                _fmt(t.graphckpt(results)),
                _fmt(value),
                t.target,
                verdict,
            ]
        )
    return _table(["workload", "saver", "measure", "LangGraph", "graphckpt", "measured", "target", "result"], rows)


def reference_table(results: Results) -> list[str]:
    """LangGraph against the FLOOR, for comparison with the issue's 'LangGraph today' column."""
    rows = []
    for saver in ("sqlite", "postgres"):
        floor = results.median("floor", "FLOOR", saver, "ms_per_commit")
        ahead = results.median("floor", "FLOOR", saver, "ms_per_commit_wal_ahead")
        for engine in ("langgraph", "graphckpt"):
            step = results.median(engine, "W1", saver, "ms_per_step")
            if step is not None or floor is not None:
                rows.append(
                    [
                        engine,
                        saver,
                        _fmt(step),
                        _fmt(floor),
                        _fmt(_ratio(step, floor)),
                        _fmt(ahead),
                        _fmt(_ratio(step, ahead)),
                    ]
                )
    head = [
        "engine",
        "saver",
        "W1 ms per super-step",
        "FLOOR ms per commit",
        "x FLOOR",
        "FLOOR, WAL written ahead",
        "x that",
    ]
    return [*_table(head, rows), "", _WAL_AHEAD_NOTE]


_WAL_AHEAD_NOTE = (
    "The issue's FLOOR is a plain loop, whose WAL file grows with every commit. `SqliteSaver` writes its WAL file "
    "ahead (zeros, on its first write: `preallocate_wal`), so its commits overwrite blocks instead of growing the "
    "file, which makes each fsync cheaper; the last two columns compare with the same loop given the same head start "
    "(SQLite only)."
)


def machine_note(pg_dsn: str | None) -> list[str]:
    """Date, CPUs, Python, SQLite and PostgreSQL versions, engine versions."""
    try:
        nproc = subprocess.run(["nproc"], capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        nproc = str(os.cpu_count())
    pg = "not used"
    if pg_dsn:
        try:
            import psycopg

            with psycopg.connect(pg_dsn, connect_timeout=3) as conn:
                row = conn.execute("SHOW server_version").fetchone()
                pg = row[0] if row else "?"
        except Exception as exc:  # a note, not a failure
            pg = f"unavailable ({type(exc).__name__})"
    return [
        f"- date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"- machine: {platform.platform()}, nproc {nproc}",
        f"- Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, PostgreSQL {pg}",
    ]


def render(results: Results, *, header: list[str], engines: list[str], command: str) -> str:
    """The whole RESULTS.md."""
    lines = ["# graphckpt benchmark results", "", *header, f"- engines: {', '.join(engines) or 'none'}"]
    lines += [f"- command: `{command}`", ""]
    lines += [
        "Medians over repeats; every ratio is taken between figures of this one run. Durability is equal: each",
        'super-step\'s checkpoint is durable before the next starts (LangGraph `durability="sync"`), SQLite in WAL',
        "mode with `synchronous=FULL` for both engines and the FLOOR, PostgreSQL with `synchronous_commit=on`.",
        "",
    ]
    if results.notes:
        lines += ["## Notes", "", *[f"- {n}" for n in results.notes], ""]
    lines += ["## Targets", "", *targets_table(results), ""]
    lines += ["## Against the FLOOR", "", *reference_table(results), ""]
    lines += ["## All figures", "", *figures_table(results), ""]
    analysis = Path(__file__).with_name("analysis.md")
    if analysis.is_file():  # hand-written: profiles and where the remaining time goes, kept with every run
        lines += [analysis.read_text().rstrip(), ""]
    if results.errors:
        lines += ["## Failed runs", ""]
        lines += [f"- {e} {w} {s}: {msg}" for (e, w, s), msg in sorted(results.errors.items())]
        lines.append("")
    return "\n".join(lines)


def write_section(path: str, begin: str, end: str, section: str) -> None:
    """Put ``section`` (which starts with ``begin`` and ends with ``end``) into the report at ``path``: in place of
    the section between those marks when there is one, else at the end. The other scripts' sections stay."""
    out = Path(path)
    text = out.read_text() if out.exists() else ""
    if begin in text and end in text:
        text = text[: text.index(begin)] + section + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    out.write_text(text)
