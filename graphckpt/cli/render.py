"""Human output: rich tables, the fork tree, state JSON, diffs, and the live step display of ``run``/``resume``.

Imported only when a command prints for people (``--json`` output never imports rich). Colour follows rich's rules:
none when the output is not a terminal or ``NO_COLOR`` is set; the tables read the same without it.
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from graphckpt.checkpoint import Snapshot, ThreadInfo
from graphckpt.cli.records import (
    duration_ms,
    graph_of,
    metadata_of,
    ran_nodes,
    ref_text,
    source_of,
    state_dict,
    to_jsonable,
    tokens,
)
from graphckpt.diff import Diff

__all__ = [
    "StepDisplay",
    "console",
    "fmt_duration",
    "fmt_tokens",
    "history_table",
    "history_tree",
    "print_diff",
    "print_snapshot",
    "threads_table",
]

_STATUS_STYLE = {"done": "green", "running": "yellow", "interrupted": "cyan", "failed": "bold red"}


def console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr). Not a terminal: no colour, and wide enough that ids are never cut."""
    stream = sys.stderr if stderr else sys.stdout
    is_tty = stream.isatty()
    # not a terminal: no width limit (tables are only as wide as their content), else rich cuts no-wrap columns
    # (ids, refs, graph names) with an ellipsis once a table is wider than the width
    width = None if is_tty else max(int(os.environ.get("COLUMNS") or 0), 100_000)
    return Console(file=stream, width=width, highlight=False, soft_wrap=not is_tty)


def fmt_duration(ms: float) -> str:
    if ms <= 0:
        return "-"
    if ms < 1000:
        return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms"
    return f"{ms / 1000:.1f} s"


def fmt_tokens(n: int) -> str:
    return f"{n:,}" if n else "-"


def _tok(n: int) -> str:
    return f"{n:,} tok" if n else ""


def _status(status: str) -> Text:
    return Text(status, style=_STATUS_STYLE.get(status, ""))


def _local_time(when: dt.datetime) -> str:
    """A stored time in the local zone; ``?`` when it has no local equivalent (a tampered row's year 9999)."""
    try:
        return when.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return "?"


def _next(snap: Snapshot) -> str:
    return ", ".join(snap.next) if snap.next else "END"


# -- threads -----------------------------------------------------------------------------------------------------------


def threads_table(infos: Sequence[ThreadInfo]) -> Table:
    """``graphckpt threads``: one row per thread, most recently updated first."""
    table = Table(title=None, show_edge=False, header_style="bold")
    table.add_column("thread", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("step", justify="right")
    table.add_column("updated", no_wrap=True)
    table.add_column("forked from", no_wrap=True)
    table.add_column("graph", no_wrap=True)
    table.add_column("error")
    for info in infos:
        table.add_row(
            escape(info.thread_id),
            _status(info.status),
            str(info.step),
            _local_time(info.updated_at),
            escape(ref_text(info.forked_from) or "-"),
            escape(graph_of(metadata_of(info)) or "-"),
            escape(info.error or ""),
        )
    return table


# -- history -----------------------------------------------------------------------------------------------------------


def history_table(snaps: Sequence[Snapshot], thread_id: str) -> Table:
    """``graphckpt history``: the lineage oldest first; a ``thread`` column appears when it crosses a fork."""
    crosses = any(s.thread_id != thread_id for s in snaps)
    table = Table(show_edge=False, header_style="bold")
    if crosses:
        table.add_column("thread", no_wrap=True)
    table.add_column("step", justify="right")
    table.add_column("checkpoint", no_wrap=True)
    table.add_column("source", no_wrap=True)
    table.add_column("ran")
    table.add_column("next")
    table.add_column("duration", justify="right", no_wrap=True)
    table.add_column("tokens", justify="right", no_wrap=True)
    for s in snaps:
        metadata = metadata_of(s)
        row = [
            str(s.step),
            escape(s.checkpoint_id),
            escape(source_of(metadata)),
            escape(", ".join(ran_nodes(metadata))),
            escape(_next(s)),
            fmt_duration(duration_ms(metadata)),
            fmt_tokens(tokens(metadata)),
        ]
        table.add_row(*([escape(s.thread_id)] if crosses else []), *row, style="dim" if crosses and
                      s.thread_id != thread_id else None)  # fmt: skip
    return table


def _thread_label(tree: Mapping[str, Any], highlight: str, *, attached: bool) -> Text:
    label = Text(tree["thread_id"], style="bold" + (" underline" if tree["thread_id"] == highlight else ""))
    label.append("  ")
    label.append_text(_status(tree["status"]))
    total = sum(c["tokens"] for c in tree["checkpoints"])
    label.append(f"  step {tree['step']}" + (f"  {total:,} tokens" if total else ""))
    if tree["forked_from"] and not attached:
        label.append(f"  (forked from {tree['forked_from']})", style="dim")
    if tree.get("error"):
        label.append(f"  {tree['error']}", style="red")
    return label


def _add_thread(node: Tree, tree: Mapping[str, Any], highlight: str, *, attached: bool = False) -> None:
    branch = node.add(_thread_label(tree, highlight, attached=attached))
    for cp in tree["checkpoints"]:
        ran = ", ".join(cp["ran"])
        text = Text(f"{cp['step']:>3}  {cp['checkpoint_id']}  ")
        text.append(f"{ran:<12}", style="cyan")
        text.append(f" {fmt_duration(cp['duration_ms']):>8}  {_tok(cp['tokens']):>10}")
        text.append(f"  -> {', '.join(cp['next']) or 'END'}", style="dim")
        leaf = branch.add(text)
        for fork in cp["forks"]:
            _add_thread(leaf, fork, highlight, attached=True)
    for fork in tree["forks"]:  # forked from a checkpoint not shown (e.g. in a deleted thread)
        _add_thread(branch, fork, highlight)


def history_tree(trees: Sequence[Mapping[str, Any]], highlight: str) -> Tree:
    """``graphckpt history --tree``: each thread's own checkpoints, with forks hanging off the checkpoint they
    branched from (``trees`` as built by the command, see ``records.thread_tree``)."""
    root = Tree(Text("threads", style="bold"), hide_root=True)
    for tree in trees:
        _add_thread(root, tree, highlight)
    return root


# -- show and diff -----------------------------------------------------------------------------------------------------


def print_snapshot(out: Console, snap: Snapshot, *, raw: bool) -> None:
    """``graphckpt show``: where the checkpoint is, what runs next, then the state as JSON."""
    head = Text(f"thread {snap.thread_id}  checkpoint {snap.checkpoint_id}  step {snap.step}  ")
    head.append_text(_status(snap.status))
    out.print(head)
    out.print(Text(f"next: {_next(snap)}   source: {source_of(metadata_of(snap))}"))
    for i in snap.interrupts:
        payload = "" if i.payload is None else f": {to_jsonable(i.payload)!r}"
        out.print(Text(f"interrupted {i.when} {i.node}{payload}", style="cyan"))
    for e in snap.errors:
        out.print(Text(str(e), style="red"))
    out.print_json(data=state_dict(snap.values), sort_keys=False)


def _short(value: Any) -> str:
    text = json.dumps(to_jsonable(value), ensure_ascii=False)
    return text if len(text) <= 200 else text[:197] + "..."


def print_diff(out: Console, diff: Diff) -> None:
    """``graphckpt diff``: ``+`` added, ``-`` removed, ``~`` changed fields; appended list items shown alone."""
    out.print(Text(f"diff {ref_text(diff.a)} -> {ref_text(diff.b)}", style="bold"))
    if not diff:
        out.print("(no differences)")
    for k, v in diff.added.items():
        out.print(Text(f"+ {k} = {_short(v)}", style="green"))
    for k, v in diff.removed.items():
        out.print(Text(f"- {k} = {_short(v)}", style="red"))
    for k, c in diff.changed.items():
        if c.appended is not None and not c.dropped:
            out.print(Text(f"~ {k}: +{len(c.appended)} appended {_short(c.appended)}", style="yellow"))
        elif c.appended is not None:
            out.print(Text(f"~ {k}: same first {c.common}, then", style="yellow"))
            out.print(Text(f"    - {_short(c.dropped)}", style="red"))
            out.print(Text(f"    + {_short(c.appended)}", style="green"))
        elif isinstance(c.before, str) and isinstance(c.after, str) and "\n" in c.before + c.after:
            _print_text_change(out, k, c.before, c.after)
        else:
            out.print(Text(f"~ {k}: {_short(c.before)} -> {_short(c.after)}", style="yellow"))


def _print_text_change(out: Console, key: str, before: str, after: str, limit: int = 20) -> None:
    """A multi-line text field: the lines that differ, like ``diff``."""
    changed = [line for line in difflib.ndiff(before.splitlines(), after.splitlines()) if line[:2] in ("- ", "+ ")]
    out.print(Text(f"~ {key}: {sum(1 for x in changed if x[0] == '+')} line(s) differ", style="yellow"))
    for line in changed[:limit]:
        out.print(Text(f"    {line}", style="red" if line[0] == "-" else "green"))
    if len(changed) > limit:
        out.print(Text(f"    ... {len(changed) - limit} more changed line(s) (see --json)", style="dim"))


# -- run / resume ------------------------------------------------------------------------------------------------------


class StepDisplay:
    """One line per committed checkpoint on stderr, under a spinner naming what runs now (on a terminal)."""

    def __init__(self, thread_id: str, *, quiet: bool = False) -> None:
        self.thread_id = thread_id
        self.quiet = quiet
        self.err = console(stderr=True)
        self.tokens = 0
        self.steps = 0
        self._status: Any = None

    @contextmanager
    def running(self, what: str) -> Iterator[StepDisplay]:
        if self.quiet or not self.err.is_terminal:
            yield self
            return
        with self.err.status(f"{escape(self.thread_id)}: {escape(what)}") as status:
            self._status = status
            try:
                yield self
            finally:
                self._status = None

    def stop(self) -> None:
        """Stop the live display now (spinner line erased, cursor shown), for an exit that skips :meth:`running`."""
        status, self._status = self._status, None
        if status is not None:
            status.stop()

    def checkpoint(self, snap: Snapshot) -> None:
        """Called for every checkpoint the run commits."""
        self.steps += 1
        metadata = metadata_of(snap)
        used = tokens(metadata)
        self.tokens += used
        if self._status is not None:
            self._status.update(f"{escape(self.thread_id)}: step {snap.step + 1} running {escape(_next(snap))}")
        if self.quiet:
            return
        line = Text(f"step {snap.step:>3}  ")
        line.append(f"{', '.join(ran_nodes(metadata)):<16}", style="cyan")
        line.append(f" {fmt_duration(duration_ms(metadata)):>8}  {_tok(used):>10}")
        line.append(f"  -> {_next(snap)}", style="dim")
        self.err.print(line)
