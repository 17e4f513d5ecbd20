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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from graphckpt.checkpoint import Snapshot, ThreadInfo
from graphckpt.diff import MISSING, UNSET, Diff
from graphckpt.plain import (
    audit_of,
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

__all__ = [
    "ABBREV",
    "StepDisplay",
    "abbreviations",
    "audit_lines",
    "console",
    "fmt_cost",
    "fmt_duration",
    "fmt_tokens",
    "history_table",
    "history_tree",
    "print_diff",
    "print_snapshot",
    "threads_table",
]

_STATUS_STYLE = {
    "done": "green",
    "running": "yellow",
    "interrupted": "cyan",
    "failed": "bold red",
    "crashed": "bold magenta",
    "partial": "dim",
}


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


def _local_time(when: dt.datetime, *, compact: bool = False) -> str:
    """A stored time in the local zone (``compact``: without year and seconds); ``?`` when it has no local
    equivalent (a tampered row's year 9999)."""
    try:
        return when.astimezone().strftime("%m-%d %H:%M" if compact else "%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return "?"


def _next(snap: Snapshot) -> str:
    return ", ".join(snap.next) if snap.next else "END"


# -- tables that fit -------------------------------------------------------------------------------------------------

ABBREV = 12
"""Checkpoint ids are shown by their first 12 characters (like git's abbreviated hashes; ``--json`` prints them
whole). Ids are time-ordered, so two made in one millisecond share 12: those get as many more as tell them apart."""


def abbreviations(ids: Iterable[str], length: int = ABBREV) -> dict[str, str]:
    """Each id's shortest prefix of at least ``length`` characters that no other of ``ids`` starts with."""
    unique = sorted(set(ids))
    out: dict[str, str] = {}
    for i, this in enumerate(unique):
        n = length
        for other in unique[max(i - 1, 0) : i + 2]:  # in sorted order, the neighbours share the longest prefixes
            if other != this:
                n = max(n, _shared(this, other) + 1)
        out[this] = this[:n]
    return out


def _shared(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` have in common."""
    return next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


@dataclass
class _Column:
    """One table column: its header, its cells, and what it gives up when the terminal is narrow."""

    header: str
    cells: list[str | Text]
    no_wrap: bool = False
    justify: Literal["left", "right"] = "left"
    drop: int = 0
    """0: essential (always shown, never narrower than its header and its longest word, or its whole cells when
    ``no_wrap``); otherwise optional: left out when the table does not fit (highest level first)."""
    compact: tuple[int, list[str | Text]] | None = None
    """``(level, cells)``: shorter cells used from that level on (tried in the same order as ``drop``)."""
    fold: int | None = None
    """A wrapping column whose words may be broken (with ``compact``: from its level on): its minimum width."""

    def min_width(self, level: int) -> int:
        """The narrowest this column can be at ``level`` without cutting a cell (no-wrap) or a word (wrapping)."""
        texts = [self.header, *(_plain(c) for c in self.cells_at(level))]
        if self.no_wrap:
            return max(cell_len(t) for t in texts)
        if self.fold is not None and (self.compact is None or level <= self.compact[0]):
            return max(cell_len(self.header), min(self.fold, max(cell_len(t) for t in texts)))
        return max(cell_len(word) for t in texts for word in [*t.split(), ""])

    def max_width(self, level: int) -> int:
        """The width of the longest line of a cell (or the header): what the column takes when there is room."""
        texts = [self.header, *(_plain(c) for c in self.cells_at(level))]
        return max(cell_len(line) for t in texts for line in [*t.splitlines(), ""])

    def cells_at(self, level: int) -> list[str | Text]:
        return self.compact[1] if self.compact is not None and level <= self.compact[0] else self.cells


def _plain(cell: str | Text) -> str:
    return cell.plain if isinstance(cell, Text) else Text.from_markup(cell).plain


def _fitted_table(columns: list[_Column], width: int | None, styles: Sequence[str | None] = ()) -> Table:
    """The columns as a table no wider than ``width``: optional columns are dropped and compact forms used, level
    by level (highest first), until the rest fit at their minimum widths. When the table is too wide for its
    natural widths, each column gets its minimum and the room left goes to the first columns that can use it
    (rich only wraps a wrapping column there: a no-wrap column is never cut)."""
    levels = sorted({c.drop for c in columns if c.drop} | {c.compact[0] for c in columns if c.compact}, reverse=True)
    level = max(levels, default=0) + 1  # above every level: everything shown in full
    for candidate in [level, *levels]:
        level = candidate
        shown = [c for c in columns if not c.drop or c.drop < level]
        needed = sum(c.min_width(level) + 3 for c in shown) - 3  # a space each side and a rule between columns
        if width is None or needed <= width:
            break
    shown = [c for c in columns if not c.drop or c.drop < level]
    widths: list[int | None] = [None] * len(shown)  # fits at its natural widths: rich lays it out
    if width is not None and sum(c.max_width(level) + 3 for c in shown) - 3 > width:
        spare = width - (sum(c.min_width(level) + 3 for c in shown) - 3)
        for i, c in enumerate(shown):  # each column its minimum; what is left goes to the first that can use it
            extra = max(0, min(spare, c.max_width(level) - c.min_width(level)))
            widths[i], spare = c.min_width(level) + extra, spare - extra
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    for c, w in zip(shown, widths, strict=True):
        table.add_column(c.header, no_wrap=c.no_wrap, justify=c.justify, width=w, overflow="fold")
    cells = [c.cells_at(level) for c in shown]
    for i in range(len(columns[0].cells) if columns else 0):
        table.add_row(*(column[i] for column in cells), style=styles[i] if i < len(styles) else None)
    return table


# -- threads -----------------------------------------------------------------------------------------------------------


def _owner(info: ThreadInfo) -> str:
    """``pid@host`` of the process holding the thread (``-`` for none); a crashed thread's is the dead one's."""
    lease = info.lease
    return "-" if lease is None else f"{lease.owner.pid}@{lease.owner.host}"


def fmt_cost(cost: Any) -> str:
    if not isinstance(cost, int | float) or isinstance(cost, bool):
        return "-"
    return f"${cost:.4f}" if cost < 1 else f"${cost:,.2f}"


def _spend_cell(spend: Mapping[str, Any] | None) -> str:
    """A thread's own tokens (a fork's inherited ones are its parent's), with its lost calls (``+2 lost``)."""
    total = (spend or {}).get("own") or {}
    text = fmt_tokens(int(total.get("tokens", 0)))
    lost = int(total.get("lost_calls", 0))
    return f"{text} +{lost} lost" if lost else text


def threads_table(
    infos: Sequence[ThreadInfo], width: int | None = None, spends: Mapping[str, Mapping[str, Any]] | None = None
) -> Table:
    """``graphckpt threads``: one row per thread, most recently updated first. With ``spends`` (per thread, see
    :func:`graphckpt.audit.spend`), the thread's own tokens (a fork's inherited ones are counted in its parent's row;
    ``--json`` has own, inherited and total), with calls lost to crashes and, with a
    price table, their cost. When the table is wider than ``width`` (the console's), it gives up, in this order until
    it fits: ``cost``, ``owner``, ``tokens``, ``graph``, ``forked from``, the date's year and seconds, ``error``
    (``--json`` has everything). ``thread``, ``status`` and ``step`` are never cut."""
    short = abbreviations(i.forked_from.checkpoint_id for i in infos if i.forked_from is not None)

    def forked(info: ThreadInfo) -> str:
        ref = info.forked_from
        return "-" if ref is None else f"{ref.thread_id}@{short[ref.checkpoint_id]}"

    columns = [
        _Column("thread", [escape(i.thread_id) for i in infos], no_wrap=True),
        _Column("status", [_status(i.status) for i in infos], no_wrap=True),
        _Column("step", [str(i.step) for i in infos], no_wrap=True, justify="right"),
        *(
            [_Column("owner", [escape(_owner(i)) for i in infos], no_wrap=True, drop=6)]
            if any(i.lease is not None for i in infos)
            else []
        ),
        _Column(
            "updated",
            [_local_time(i.updated_at) for i in infos],
            no_wrap=True,
            compact=(2, [_local_time(i.updated_at, compact=True) for i in infos]),
        ),
        _Column("forked from", [escape(forked(i)) for i in infos], no_wrap=True, drop=3),
        _Column("graph", [escape(graph_of(metadata_of(i)) or "-") for i in infos], no_wrap=True, drop=4),
        _Column("error", [escape(i.error or "") for i in infos], drop=1, fold=16),
    ]
    if spends is not None:
        cells: list[str | Text] = [_spend_cell(spends.get(i.thread_id)) for i in infos]
        columns.insert(3, _Column("tokens", cells, no_wrap=True, justify="right", drop=5))
        costs = [(spends.get(i.thread_id) or {}).get("own", {}).get("cost") for i in infos]
        if any(c is not None for c in costs):
            columns.insert(4, _Column("cost", [fmt_cost(c) for c in costs], no_wrap=True, justify="right", drop=7))
    return _fitted_table(columns, width)


# -- history -----------------------------------------------------------------------------------------------------------


def history_table(snaps: Sequence[Snapshot], thread_id: str, width: int | None = None) -> Table:
    """``graphckpt history``: the lineage oldest first; a ``thread`` column appears when it crosses a fork.
    Checkpoint ids are abbreviated (:func:`abbreviations`). Narrower than the essential columns (thread, step,
    checkpoint, ran, next), the optional ones are left out: ``source`` first, then ``duration``, then ``tokens``;
    narrower still, ``next`` may break a node name and ``thread`` a thread id across lines (never cut: checkpoint
    ids made in one millisecond need longer abbreviations, which can leave too little room)."""
    crosses = any(s.thread_id != thread_id and not s.namespace for s in snaps)
    short = abbreviations(s.checkpoint_id for s in snaps)
    metadata = [metadata_of(s) for s in snaps]
    ran: list[str | Text] = [escape(_ran(s, m)) for s, m in zip(snaps, metadata, strict=True)]
    nexts: list[str | Text] = [escape(", ".join(_in_subgraph(s, n) for n in s.next) or "END") for s in snaps]
    threads: list[str | Text] = [escape(_thread_of(s)) for s in snaps]
    columns = [
        *([_Column("thread", threads, compact=(1, threads), fold=12)] if crosses else []),
        _Column("step", [_step_of(s) for s in snaps], no_wrap=True, justify="right"),
        _Column("checkpoint", [escape(short[s.checkpoint_id]) for s in snaps], no_wrap=True),
        _Column("source", [escape(source_of(m)) for m in metadata], no_wrap=True, drop=4),
        _Column("ran", ran),
        _Column("next", nexts, compact=(1, nexts), fold=4),
        _Column("duration", [fmt_duration(duration_ms(m)) for m in metadata], no_wrap=True, justify="right", drop=3),
        _Column("tokens", [fmt_tokens(tokens(m)) for m in metadata], no_wrap=True, justify="right", drop=2),
    ]
    styles = ["dim" if crosses and s.thread_id != thread_id else None for s in snaps]
    return _fitted_table(columns, width, styles)


def _subgraph_path(snap: Snapshot) -> str:
    """``sub/inner/`` for a checkpoint of subgraph ``inner`` run by node ``sub``; ``""`` for a thread's own."""
    return "".join(entry.split(":", 1)[0] + "/" for entry in snap.namespace)


def _in_subgraph(snap: Snapshot, node: str) -> str:
    return _subgraph_path(snap) + node


def _step_of(snap: Snapshot) -> str:
    """A subgraph's steps are indented under the parent step that ran them (``· 0``, ``·· 0`` deeper)."""
    return "·" * len(snap.namespace) + (" " if snap.namespace else "") + str(snap.step)


def _thread_of(snap: Snapshot) -> str:
    """The thread a row belongs to; a subgraph's rows name their root thread (the child's id is long)."""
    return snap.thread_id.split("|", 1)[0] if snap.namespace else snap.thread_id


def _ran(snap: Snapshot, metadata: Mapping[str, Any] | None) -> str:
    """The nodes that ran (a subgraph's prefixed with its path), each replayed one marked ``(replayed)``, and the
    step's failed attempts."""
    replayed = (metadata or {}).get("replayed_ms")
    names = [
        _in_subgraph(snap, n) + (" (replayed)" if isinstance(replayed, Mapping) and n in replayed else "")
        for n in ran_nodes(metadata)
    ]
    failed = len(audit_of(metadata)["attempts"])
    return ", ".join(names) + (f" ({failed} failed attempt{'s' if failed != 1 else ''})" if failed else "")


def _when(at: Any) -> str:
    if not isinstance(at, int | float) or isinstance(at, bool):
        return "?"
    try:
        return _local_time(dt.datetime.fromtimestamp(at, dt.UTC))
    except (OverflowError, OSError, ValueError):
        return "?"


def _spend_text(label: str, s: Mapping[str, Any]) -> str:
    text = f"{label}: {int(s.get('calls', 0))} model call{'s' if s.get('calls') != 1 else ''}, "
    text += f"{int(s.get('tokens', 0)):,} tokens ({int(s.get('prompt_tokens', 0)):,} in, "
    text += f"{int(s.get('completion_tokens', 0)):,} out)"
    lost = int(s.get("lost_calls", 0))
    if lost:
        text += f", {lost} call{'s' if lost != 1 else ''} lost (tokens unknown)"
    failed, unknown = int(s.get("failed_requests", 0)), int(s.get("unknown_requests", 0))
    if failed:
        text += f", {failed} failed request{'s' if failed != 1 else ''} ({int(s.get('failed_tokens', 0)):,} tokens"
        text += f"; {unknown} timed out, tokens unknown)" if unknown else ")"
    if s.get("cost") is not None:
        text += f", cost {fmt_cost(s['cost'])}"
    return text


def audit_lines(record: Mapping[str, Any]) -> list[Text]:
    """``graphckpt history``, after the table: the failed attempts, the calls lost to crashes, the interrupt
    answers, and the spend (a fork's own and inherited apart). Lines wrap at the terminal's width."""
    lines: list[Text] = []

    def where(e: Mapping[str, Any]) -> str:
        step = f"step {e.get('step')}" + (" (not committed)" if e.get("pending") else "")
        thread = f"{e.get('thread_id')} " if e.get("thread_id") != record.get("thread_id") else ""
        return f"  {thread}{step} {e.get('node')}"

    attempts = record.get("attempts") or []
    if attempts:
        lines.append(Text("failed attempts", style="bold"))
        for a in attempts:
            retried = ", retried" if a.get("retried") else ""
            lines.append(
                Text(
                    f"{where(a)} attempt {a.get('attempt')} at {_when(a.get('at'))}{retried}: "
                    f"{a.get('type')}: {a.get('message')}",
                    style="red",
                )
            )
    lost = [c for c in record.get("calls") or [] if c.get("status") == "lost"]
    if lost:
        lines.append(Text("calls lost (started, never finished)", style="bold"))
        for c in lost:
            lines.append(
                Text(
                    f"{where(c)} {c.get('name')} started {_when(c.get('started_at'))} key {c.get('key')}"
                    + _lost_reason(c),
                    style="yellow",
                )
            )
    failed = [r for r in record.get("requests") or [] if r.get("outcome") != "ok"]
    if failed:
        lines.append(Text("failed requests (HTTP attempts of model calls)", style="bold"))
        for r in failed:
            usage = r.get("usage")
            tokens = (
                f"{int(usage.get('prompt_tokens', 0)) + int(usage.get('completion_tokens', 0)):,} tokens"
                if isinstance(usage, Mapping)
                else "tokens unknown"
                if r.get("outcome") == "timeout"
                else "no usage"
            )
            what = f"HTTP {r['status']}" if r.get("status") is not None else str(r.get("outcome"))
            lines.append(
                Text(f"{where(r)} request {r.get('request')} key {r.get('key')}: {what}, {tokens}", style="yellow")
            )
    answers = record.get("answers") or []
    if answers:
        lines.append(Text("interrupt answers", style="bold"))
        for a in answers:
            refused = f" refused: {a['refused']}" if a.get("refused") else ""
            answer = json.dumps(a.get("answer"), ensure_ascii=False)
            lines.append(Text(f"{where(a)} by {a.get('by')} at {_when(a.get('at'))}: {answer}{refused}"))
    spend = record.get("spend") or {}
    if spend:
        inherited = spend.get("inherited") or {}
        if inherited.get("calls") or inherited.get("lost_calls"):
            lines.append(Text(_spend_text("own", spend.get("own") or {}), style="bold"))
            lines.append(Text(_spend_text("inherited", inherited)))
        lines.append(Text(_spend_text("total", spend.get("total") or {}), style="bold"))
    return lines


def _lost_reason(call: Mapping[str, Any]) -> str:
    """``: owner gone (host h, pid p, last heartbeat at t)`` for a lost call whose takeover said why."""
    reason = call.get("reason")
    if not reason:
        return ""
    owner = call.get("owner")
    if isinstance(owner, Mapping):
        beat = _when(owner.get("heartbeat_at"))
        return f": {reason} (host {owner.get('host')}, pid {owner.get('pid')}, last heartbeat {beat})"
    return f": {reason}"


def _thread_label(tree: Mapping[str, Any], highlight: str, short: Mapping[str, str], *, attached: bool) -> Text:
    label = Text(tree["thread_id"], style="bold" + (" underline" if tree["thread_id"] == highlight else ""))
    label.append("  ")
    label.append_text(_status(tree["status"]))
    total = tree.get("tokens", sum(c["tokens"] for c in tree["checkpoints"]))
    label.append(f"  step {tree['step']}" + (f"  {total:,} tokens" if total else ""))
    hidden = tree.get("hidden", 0)
    if hidden:
        label.append(f"  ({hidden} older checkpoint{'s' if hidden != 1 else ''} not shown)", style="dim")
    if tree["forked_from"] and not attached:
        source, _, checkpoint = tree["forked_from"].rpartition("@")
        label.append(f"  (forked from {source}@{short.get(checkpoint, checkpoint)})", style="dim")
    if tree.get("error"):
        label.append(f"  {tree['error']}", style="red")
    return label


def _add_thread(
    node: Tree, tree: Mapping[str, Any], highlight: str, short: Mapping[str, str], *, attached: bool = False
) -> None:
    branch = node.add(_thread_label(tree, highlight, short, attached=attached))
    for cp in tree["checkpoints"]:
        ran = ", ".join(cp["ran"])
        text = Text(f"{cp['step']:>3}  {short[cp['checkpoint_id']]}  ")
        text.append(f"{ran:<12}", style="cyan")
        text.append(f" {fmt_duration(cp['duration_ms']):>8}  {_tok(cp['tokens']):>10}")
        text.append(f"  -> {', '.join(cp['next']) or 'END'}", style="dim")
        leaf = branch.add(text)
        for fork in cp["forks"]:
            _add_thread(leaf, fork, highlight, short, attached=True)
    for fork in tree["forks"]:  # forked from a checkpoint not shown (e.g. in a deleted thread)
        _add_thread(branch, fork, highlight, short)


def _tree_ids(tree: Mapping[str, Any]) -> Iterator[str]:
    if tree["forked_from"]:
        yield tree["forked_from"].rpartition("@")[2]
    for cp in tree["checkpoints"]:
        yield cp["checkpoint_id"]
        for fork in cp["forks"]:
            yield from _tree_ids(fork)
    for fork in tree["forks"]:
        yield from _tree_ids(fork)


def history_tree(trees: Sequence[Mapping[str, Any]], highlight: str) -> Tree:
    """``graphckpt history --tree``: each thread's own checkpoints, with forks hanging off the checkpoint they
    branched from (``trees`` as built by the command, see ``plain.thread_trees``). A thread's token total is of
    all its own checkpoints, also those ``--limit`` leaves out (the label says how many are not shown)."""
    short = abbreviations(i for tree in trees for i in _tree_ids(tree))
    root = Tree(Text("threads", style="bold"), hide_root=True)
    for tree in trees:
        _add_thread(root, tree, highlight, short)
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
    """``graphckpt diff``: one line per value that differs, by its path into dicts, lists and models: ``+`` added,
    ``-`` removed, ``~`` changed (``(default)``: a field the stored state does not hold on that side)."""
    out.print(Text(f"diff {ref_text(diff.a)} -> {ref_text(diff.b)}", style="bold"))
    if not diff:
        out.print("(no differences)")
    for change in diff.changes():
        where = change.where
        if change.before is MISSING:
            out.print(Text(f"+ {where} = {_short(change.after)}{change.note}", style="green"))
        elif change.after is MISSING:
            out.print(Text(f"- {where} = {_short(change.before)}{change.note}", style="red"))
        elif isinstance(change.before, str) and isinstance(change.after, str) and "\n" in change.before + change.after:
            _print_text_change(out, where, change.before, change.after)
        else:
            out.print(Text(f"~ {where}: {_shown(change.before)} -> {_shown(change.after)}", style="yellow"))


def _shown(value: Any) -> str:
    return "(default)" if value is UNSET else _short(value)


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
