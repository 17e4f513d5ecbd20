"""``graphckpt``: run, resume, inspect, fork and diff checkpointed graph threads from the shell.

    graphckpt run myagent:app --input '{"request": "weather function"}' --thread t1
    graphckpt resume t1                      # after a crash or a failure; --answer JSON after ctx.interrupt
    graphckpt threads --status failed        # what needs recovery
    graphckpt history t1 --tree              # checkpoints, and the forks branching off them
    graphckpt show t1 --checkpoint 01a2...   # a checkpoint's state as JSON
    graphckpt fork t1 01a2... --set verdict='"fix"' --new-thread t1-alt
    graphckpt diff t1 t1-alt
    graphckpt export t1 -o t1.jsonl && graphckpt --db other.db import t1.jsonl

The database is ``--db`` or ``$GRAPHCKPT_DB``: a SQLite file (default ``graphckpt.db``) or a ``postgresql://`` URL
(``?schema=NAME`` picks the schema of the tables). Only ``run`` and ``import`` create a database or its tables.
Exit status: 0 success, 1 runtime error (unknown thread, failed node, database), 2 usage error, 3 ``resume`` left the
thread interrupted (waiting for an answer), 130 stopped by Ctrl-C, 143 stopped by SIGTERM; errors are one line on
stderr (set ``GRAPHCKPT_DEBUG=1`` for the traceback).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn, get_args

from graphckpt.cli.exits import WAITING
from graphckpt.savers.base import Status
from graphckpt.savers.queue import RunStatus

__all__ = ["WAITING", "build_parser", "main"]

_EPILOG = """\
The database is --db or $GRAPHCKPT_DB: a SQLite file path (default: graphckpt.db in the current directory) or a
postgresql:// URL; add ?schema=NAME to keep the tables in that schema (postgresql://user@host/db?schema=agents).
Only `run` and `import` create the database or its tables; the other commands report a missing one. Messages show a
PostgreSQL database as user@host:port/dbname, never with its password.
`run` records MODULE:ATTR in the thread, so resume and fork find the graph by themselves (they say which graph they
load). Reading commands (threads, history, show, diff, export, import) never import or call code named by stored
data: values are read as stored (models as plain data) unless you pass --graph MODULE:ATTR.
--json prints strict JSON: NaN and infinite numbers are printed as null.
The first Ctrl-C or SIGTERM stops a run after its running task(s); a second one quits at once.
Exit status: 0 success, 1 runtime error, 2 usage error, 3 `resume` left the thread interrupted (waiting for an
answer: resume it again with --answer JSON), 130 stopped by Ctrl-C, 143 stopped by SIGTERM."""

_DB_HELP = "SQLite path or postgresql:// URL, with ?schema=NAME for a schema (env GRAPHCKPT_DB)"

CREATING_COMMANDS = frozenset({"run", "import", "submit", "worker", "cron", "import-langgraph"})
"""The commands that may create the database (SQLite file, PostgreSQL schema and tables); the others need it."""


def step_number(text: str) -> int:
    """An argparse type: a step number (an integer >= 0)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a step number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a step is 0 or more, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def nonempty(text: str) -> str:
    """An argparse type: an id that is not empty (an empty ``--thread`` used to mean a new random id, an empty
    ``--checkpoint`` the head)."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


class _Parser(argparse.ArgumentParser):
    """argparse, with errors as one ``graphckpt: error: ...`` line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"graphckpt: error: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(2)


def _completes(action: argparse.Action, kind: str) -> None:
    """Shell completion of ``action``'s values: thread or checkpoint ids from the database (see
    :mod:`graphckpt.cli.complete`, imported only while the shell asks)."""
    action.completer = functools.partial(_complete_ids, kind)  # type: ignore[attr-defined]


def _complete_ids(kind: str, prefix: str, parsed_args: argparse.Namespace, **_: object) -> list[str]:
    from graphckpt.cli.complete import ids

    return ids(kind, prefix, parsed_args)


def build_parser() -> argparse.ArgumentParser:
    """The command line: global options and one subparser per command."""
    from graphckpt import __version__

    _PRICES_HELP = (
        'a JSON price table {"MODEL": {"input": X, "output": Y}} (per million tokens) to show cost '
        "(default: the file named by $GRAPHCKPT_PRICES)"
    )
    common = _Parser(add_help=False)
    common.add_argument("--db", default=argparse.SUPPRESS, metavar="URL", help=_DB_HELP)
    as_json = _Parser(add_help=False)
    as_json.add_argument(
        "--json", action="store_true", help="print machine-readable JSON (stable keys; NaN and infinities as null)"
    )

    parser = _Parser(
        prog="graphckpt",
        description="Run, resume, inspect, fork and diff checkpointed graph threads.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--db", metavar="URL", help=_DB_HELP)
    parser.add_argument("--version", action="version", version=f"graphckpt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help: str, description: str, *, db: bool = True, json: bool = True) -> Any:
        parents = ([common] if db else []) + ([as_json] if json else [])
        return sub.add_parser(name, help=help, description=description, parents=parents)

    def running(p: Any) -> None:
        p.add_argument("--recursion-limit", type=positive_int, metavar="N", help="max super-steps of this run (>= 1)")
        p.add_argument("-q", "--quiet", action="store_true", help="no per-step progress on stderr")
        p.add_argument(
            "--lease-seconds",
            type=positive_float,
            metavar="S",
            help="how long this process holds the thread without a heartbeat (default $GRAPHCKPT_LEASE_SECONDS or 30)",
        )

    p = command(
        "run",
        "start a thread of a graph",
        "Start a thread of the graph MODULE:ATTR (a StateGraph, a compiled App, or a zero-argument factory of one) "
        "with --input, and run it until it is done, interrupted or failed. One line per super-step goes to stderr. "
        "The app's saver is replaced by the CLI's database; MODULE:ATTR is recorded in the thread.",
    )
    p.add_argument("target", metavar="MODULE:ATTR", help="e.g. myagent.graph:app (the current directory is importable)")
    p.add_argument("--input", default="{}", metavar="JSON", help="the input state update (JSON, or @FILE); default {}")
    p.add_argument("--thread", type=nonempty, metavar="ID", help="thread id (default: a new id)")
    running(p)

    p = command(
        "resume",
        "continue a thread from its last checkpoint",
        "Continue a thread from its head: after a crash (running), a failure (failed: only unfinished tasks run "
        "again) or an interrupt (--answer is what ctx.interrupt returns).",
    )
    _completes(p.add_argument("thread", type=nonempty, metavar="ID"), "thread")
    p.add_argument("--answer", metavar="JSON", help="the answer to an open ctx.interrupt (JSON, or @FILE)")
    p.add_argument(
        "--graph",
        metavar="MODULE:ATTR",
        help="the graph code (default: the one recorded by `run`, named on stderr when loaded)",
    )
    p.add_argument(
        "--take-over",
        action="store_true",
        help="take the thread from a live owner (another host's process; a dead one on this host never holds it) "
        "after a confirmation naming it and its heartbeat's age: that process loses its next write",
    )
    p.add_argument("-y", "--yes", action="store_true", help="with --take-over: do not ask for confirmation")
    running(p)

    p = command(
        "threads",
        "list threads",
        "List threads, newest created first: the first --limit (50), the next page with --after, or --all.",
    )
    p.add_argument(
        "--status",
        choices=[*get_args(Status), "waiting"],
        help="only threads with this status (waiting: those a durable wait holds, with when each wakes)",
    )
    p.add_argument("--limit", type=positive_int, metavar="N", default=50, help="at most N threads (default 50)")
    p.add_argument("--after", metavar="CURSOR", help="the page after the one whose hint printed CURSOR")
    p.add_argument("--all", action="store_true", help="every thread, page by page (flat memory)")
    p.add_argument("--prices", metavar="FILE", help=_PRICES_HELP)

    p = command(
        "history",
        "a thread's checkpoints",
        "A thread's checkpoints oldest first (through fork points into the source thread): step, checkpoint id, "
        "source, nodes that ran, next nodes, duration, tokens. Works without the graph code.",
    )
    _completes(p.add_argument("thread", type=nonempty, metavar="ID"), "thread")
    p.add_argument("--tree", action="store_true", help="show the thread's family: forks as a tree across threads")
    p.add_argument("--prices", metavar="FILE", help=_PRICES_HELP)
    p.add_argument(
        "--limit",
        type=positive_int,
        metavar="N",
        help="only the newest N checkpoints (N >= 1; with --tree, of each thread)",
    )

    values_help = "decode values with this graph code (default: values as stored; the recorded graph is never used)"
    p = command("show", "a checkpoint's state as JSON", "Print a checkpoint's state (the head by default) as JSON.")
    _completes(p.add_argument("thread", type=nonempty, metavar="ID"), "thread")
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--checkpoint", type=nonempty, metavar="C", help="checkpoint id (or a unique prefix) of the thread's lineage"
    )
    where.add_argument("--step", type=step_number, metavar="N", help="the checkpoint of step N of the thread's lineage")
    p.add_argument("--graph", metavar="MODULE:ATTR", help=values_help)
    p.add_argument("--raw", action="store_true", help="read values as stored even with --graph (the default)")

    p = command(
        "diff",
        "compare two checkpoints' state",
        "What differs between two checkpoints' state. Each side is THREAD (its head) or THREAD@CHECKPOINT (a "
        "checkpoint id or unique prefix). A side that is the id of an existing thread is that thread's head, even "
        "when the id contains @; otherwise it splits at its last @, and THREAD@ (nothing after the @) is the head. "
        "Values are compared by path into dicts, lists and models (notes[2].text). A field at its default is a value: "
        "one side at its default and the other written is a change (without --graph, from or to '(default)').",
    )
    p.add_argument("a", metavar="A", help="THREAD, THREAD@ or THREAD@CHECKPOINT")
    p.add_argument("b", metavar="B", help="THREAD, THREAD@ or THREAD@CHECKPOINT")
    p.add_argument(
        "--format",
        choices=("text", "patch"),
        default="text",
        help="patch: an RFC 6902 JSON Patch from A's values to B's (JSON-pointer paths; add, remove, replace)",
    )
    p.add_argument("--graph", metavar="MODULE:ATTR", help=values_help)
    p.add_argument("--raw", action="store_true", help="read values as stored even with --graph (the default)")

    p = command(
        "fork",
        "branch a thread at a checkpoint",
        "Make a new thread whose first checkpoint follows CHECKPOINT (or the checkpoint of --step N) of thread ID, "
        "with --set updates applied through the reducers. The source thread never changes. Run the branch with "
        "`graphckpt resume NEW`.",
    )
    _completes(p.add_argument("thread", type=nonempty, metavar="ID"), "thread")
    _completes(
        p.add_argument(
            "checkpoint", type=nonempty, metavar="CHECKPOINT", nargs="?", help="checkpoint id (or a unique prefix)"
        ),
        "checkpoint",
    )
    p.add_argument("--step", type=step_number, metavar="N", help="fork at the checkpoint of step N instead")
    p.add_argument(
        "--set", action="append", metavar="KEY=JSON", help="state update, repeatable: --set verdict='\"fix\"'"
    )
    p.add_argument("--new-thread", type=nonempty, metavar="ID", help="id of the new thread (default: a new id)")
    p.add_argument(
        "--goto", action="append", metavar="NODE", help="run NODE next instead of the checkpoint's next (repeatable)"
    )
    p.add_argument(
        "--graph",
        metavar="MODULE:ATTR",
        help="the graph code (default: the one recorded by `run`, named on stderr when loaded)",
    )

    p = command(
        "delete",
        "delete a thread",
        "Delete a thread with every row holding its data (checkpoints, writes, journal, events, runs, its "
        "subgraphs' threads). A thread that forks depend on is refused, naming them, unless --cascade deletes them "
        "too. On a terminal it asks first; elsewhere (a script) it needs --yes.",
    )
    _completes(p.add_argument("thread", type=nonempty, metavar="ID"), "thread")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--cascade", action="store_true", help="also delete the forks that depend on the thread")

    p = command(
        "submit",
        "queue a run for a worker",
        "Queue a run of the graph MODULE:ATTR on a thread (a new one by default) for `graphckpt worker`: --input "
        "starts it, --resume continues it. --multitask reject (default) refuses a busy thread (a queued or running "
        "run, or a live process on it); enqueue runs it after the current one.",
    )
    p.add_argument("target", metavar="MODULE:ATTR", help="the graph a worker runs it with (its --graph)")
    p.add_argument("--input", default="{}", metavar="JSON", help="the input state update (JSON, or @FILE); default {}")
    p.add_argument("--thread", type=nonempty, metavar="ID", help="thread id (default: a new id)")
    p.add_argument("--resume", action="store_true", help="continue the thread instead of starting it")
    p.add_argument("--answer", metavar="JSON", help="with --resume: the answer to an open ctx.interrupt")
    p.add_argument("--multitask", choices=("reject", "enqueue"), default="reject", help="what a busy thread does")
    p.add_argument("--recursion-limit", type=positive_int, metavar="N", help="max super-steps of this run (>= 1)")

    from graphckpt.cli import cron  # wave3 issue 29

    cron.add_parser(command, [common, as_json])

    p = command("runs", "list the run queue", "Queued, running and ended runs, oldest first.")
    p.add_argument("--status", choices=get_args(RunStatus), help="only runs with this status")
    p.add_argument("--thread", type=nonempty, metavar="ID", help="only the runs of this thread")

    p = command(
        "worker",
        "claim and run queued runs",
        "Claim queued runs of the given graphs and run them, with heartbeats, until SIGTERM or Ctrl-C; then each "
        "running step commits, its lease is released and its run goes back to the queue. It also re-queues runs of "
        "workers that died and crashed threads (automatic recovery). Many workers share one PostgreSQL; a few share "
        "one SQLite file.",
        json=False,
    )
    p.add_argument("--graph", required=True, action="append", metavar="MODULE:ATTR", help="a graph to run (repeat)")
    p.add_argument("--concurrency", type=positive_int, default=1, metavar="N", help="runs at a time (default 1)")
    p.add_argument("--poll", type=positive_float, default=1.0, metavar="S", help="poll interval when idle (s)")
    p.add_argument("--ttl-sweep-every", type=float, default=60.0, metavar="S", help="sweep expired TTLs every S s")
    p.add_argument(
        "--lease-seconds",
        type=positive_float,
        metavar="S",
        help="lease length (default $GRAPHCKPT_LEASE_SECONDS or 30)",
    )

    p = command(
        "recover",
        "continue crashed threads",
        "Continue the crashed threads (running, but their process died: the lease expired) from their last "
        "checkpoint. With --yes all of them (automatic recovery, once); on a terminal it describes each (graph, "
        "last step, what it was running, tokens so far, how long ago) and asks first; elsewhere it needs --yes.",
        json=False,
    )
    p.add_argument("-y", "--yes", action="store_true", help="continue every crashed thread without asking")
    p.add_argument("--graph", metavar="MODULE:ATTR", help="the graph code (default: the one recorded in each thread)")

    p = command(
        "export",
        "write a thread as JSON lines",
        "Write a thread, with the ancestor checkpoints its lineage needs, as JSON lines (stored bytes unchanged, so "
        "no graph code is needed). Load it into any database with `graphckpt import`.",
        json=False,
    )
    _completes(p.add_argument("thread", type=nonempty, metavar="ID"), "thread")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument(
        "--decrypt",
        action="store_true",
        help="an encrypted database: write its values in plaintext (else they stay encrypted under the current key)",
    )

    p = command(
        "rekey",
        "re-encrypt every row under the current key",
        "Seal every stored value, write, event update and encrypted metadata again under the first key of "
        "GRAPHCKPT_ENCRYPTION_KEYS (rows under older keys, and plaintext rows, which get encrypted), in batches of "
        "one transaction each. Killed at any point, run it again: it continues with the rows still to do.",
    )
    p.add_argument("--batch", type=positive_int, default=200, metavar="N", help="rows per transaction (default 200)")

    p = command(
        "import",
        "load a thread exported as JSON lines",
        "Store a thread written by `graphckpt export`. "
        "The whole file is checked first (every field, every stored byte decoded, the lineage) and nothing is "
        "written unless all of it passes; an existing thread is never changed (a checkpoint the database has "
        "already must be identical). Importing runs no code the file names.",
    )
    p.add_argument("file", metavar="FILE", help="the export (- for stdin)")

    p = command(
        "graph", "print a graph as mermaid", "Print the graph MODULE:ATTR as mermaid text.", db=False, json=False
    )
    p.add_argument("target", metavar="MODULE:ATTR")

    p = command(
        "demo",
        "run the agent demo (offline)",
        "Run examples/agent_task.py: a four-step agent task that fails at step 3, resumes without repeating "
        "finished steps, forks, and diffs the branches. Other arguments go to the demo (`graphckpt demo -- --help`). "
        "The global --db (a SQLite file) becomes the demo's --db; without it the demo writes graphckpt.db in the "
        "current directory, where the other commands look (it does not read $GRAPHCKPT_DB). Its threads record "
        "the graph graphckpt.cli.demo:graph, so resume and fork work on them; it ends with commands to try.",
        db=False,
        json=False,
    )
    from graphckpt.cli.lifecycle import add_parsers as add_lifecycle
    from graphckpt.cli.serve import add_parser as add_serve

    add_lifecycle(command, positive_int)
    from graphckpt.cli.lgimport import add_parser as add_lgimport  # wave3 issue 27

    add_lgimport(command)

    add_serve(sub, common)
    return parser


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"graphckpt: error: {' '.join(message.split())}\n")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``graphckpt`` command line; returns the exit status."""
    _tolerant_output()
    argv = list(sys.argv[1:] if argv is None else argv)
    for position, arg in enumerate(argv, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:  # argv bytes that are not UTF-8 arrive as lone surrogates (surrogateescape)
            shown = arg.encode("utf-8", "surrogateescape")
            shown_text = repr(shown if len(shown) <= 60 else shown[:57] + b"...")
            return _fail(f"argument {position} is not UTF-8 text ({shown_text}); ids and options are text", 2)
    parser = build_parser()
    if os.environ.get("_ARGCOMPLETE"):  # the shell asks for completions (see graphckpt.cli.complete)
        from graphckpt.cli.complete import autocomplete

        autocomplete(parser)
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "demo":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.demo_args = [a for a in extra if a != "--"]
    try:
        return _dispatch(args)
    except (KeyboardInterrupt, asyncio.CancelledError):  # stopped before a run was under way (or a sync command)
        thread = getattr(args, "thread", None)
        ctrl_c = getattr(args, "ctrl_c", None)
        signum = ctrl_c.signum if isinstance(ctrl_c, CtrlC) and ctrl_c.signum is not None else signal.SIGINT
        hint = f" (resume with: graphckpt resume {shlex.quote(thread)})" if thread else ""
        sys.stderr.write(f"graphckpt: stopped{_BY[signum]}{hint}\n")
        return stop_exit_status(signum)
    except BrokenPipeError:  # e.g. `graphckpt history t1 | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _tolerant_output() -> None:
    """Text that cannot be encoded (a lone surrogate from a tampered row) is printed as a ``\\udXXX`` escape
    instead of failing the command halfway through its output (in JSON output the escape is valid JSON)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="backslashreplace")


def stop_exit_status(signum: int) -> int:
    """The exit status of a command stopped by signal ``signum``: 128 + its number (130 Ctrl-C, 143 SIGTERM)."""
    return 128 + int(signum)


_BY: dict[int, str] = {signal.SIGINT: "", signal.SIGTERM: " on SIGTERM"}
"""How a stop message names the signal (a Ctrl-C is the usual case and goes unnamed)."""

SHOW_CURSOR = "\x1b[?25h"


class CtrlC:
    """What the first Ctrl-C (or SIGTERM) does: cancel the command, or, while ``run``/``resume`` consume the
    checkpoints of a run (``stop`` and ``display`` are set by :func:`graphckpt.cli.commands._drive`), ask it to stop
    once the running task(s) committed. :meth:`restore_terminal` undoes the live display for an exit that skips it."""

    def __init__(self, task: asyncio.Task[Any] | None) -> None:
        self.task = task
        self.stop: asyncio.Event | None = None
        self.display: Any = None
        """The run's live display (it has ``stop()``), while there is one."""
        self.signum: int | None = None
        """The signal that asked to stop (``SIGINT`` or ``SIGTERM``), once one did."""
        self.release: Callable[[], Awaitable[None]] | None = None
        """Gives up this process's lease on the run's thread (set while a run is under way): a quit at once calls
        it, so the thread is free for a ``resume`` (its last commit is durable) from any host."""
        self.quitting = False
        self.quitter: asyncio.Future[None] | None = None

    def first(self, signum: int = signal.SIGINT) -> None:
        self.signum = signum
        if self.stop is not None:
            self.stop.set()
        elif self.task is not None:
            self.task.cancel()

    def restore_terminal(self) -> None:
        """Stop the live display (its spinner line is erased) and show the cursor again."""
        display, self.display = self.display, None
        if display is not None:
            with contextlib.suppress(Exception):  # on the way out: restoring the cursor below matters more
                display.stop()
        with contextlib.suppress(OSError, ValueError):
            if sys.stderr.isatty():
                sys.stderr.write(SHOW_CURSOR)
            sys.stderr.flush()


def _stop_on_ctrl_c(ctrl_c: CtrlC, thread: str | None) -> None:
    """First Ctrl-C or SIGTERM (``docker stop``, systemd): say so at once and stop the run after the running task(s)
    (their step is committed; before a run is under way, the command is cancelled); a second one: restore the
    terminal and quit now. Either way every committed checkpoint is already durable. Exit status 130 for Ctrl-C,
    143 for SIGTERM."""
    signals = 0

    def on_signal(signum: int) -> None:
        nonlocal signals
        signals += 1
        hint = f"; `graphckpt resume {shlex.quote(thread)}` continues it" if thread else ""
        if signals == 1:
            what = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
            sys.stderr.write(
                f"graphckpt: {what}: stopping after the running task(s){hint} (Ctrl-C again to quit now)\n"
            )
            sys.stderr.flush()
            ctrl_c.first(signum)
        elif ctrl_c.release is None or ctrl_c.quitting:  # a third one: quit even if the release hangs
            _quit(ctrl_c, hint, signum)
        else:
            ctrl_c.quitting = True
            ctrl_c.quitter = asyncio.ensure_future(_release_and_quit(ctrl_c, ctrl_c.release, hint, signum))

    with contextlib.suppress(NotImplementedError, RuntimeError):  # no signal handlers here (not the main thread)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal, signum)


RELEASE_WAIT = 2.0
"""How long a quit at once (a second Ctrl-C) waits for the store to take its lease back (seconds)."""


async def _release_and_quit(ctrl_c: CtrlC, release: Callable[[], Awaitable[None]], hint: str, signum: int) -> None:
    """A second Ctrl-C: give the lease up (at most :data:`RELEASE_WAIT` seconds; the store may be unreachable, and
    the lease then ends with this process, see :mod:`graphckpt.savers._owners`), then quit."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(release(), RELEASE_WAIT)
    _quit(ctrl_c, hint, signum)


def _quit(ctrl_c: CtrlC, hint: str, signum: int) -> None:
    ctrl_c.restore_terminal()
    sys.stderr.write(f"graphckpt: quit without waiting for the running task(s){hint}\n")
    sys.stderr.flush()
    os._exit(stop_exit_status(signum))


def _dispatch(args: argparse.Namespace) -> int:
    from graphckpt.cli.commands import ASYNC_COMMANDS, SYNC_COMMANDS, Stopped
    from graphckpt.cli.session import CliError, Session, scrub_password
    from graphckpt.errors import CorruptCheckpointError, GraphckptError
    from graphckpt.targets import Database

    debug = bool(os.environ.get("GRAPHCKPT_DEBUG"))
    db_url = getattr(args, "db", None) or os.environ.get("GRAPHCKPT_DB")
    try:
        if args.command in SYNC_COMMANDS:
            return SYNC_COMMANDS[args.command](args)
        handler = ASYNC_COMMANDS[args.command]

        async def run() -> int:
            def note(message: str) -> None:
                sys.stderr.write(f"graphckpt: note: {message}\n")

            args.ctrl_c = CtrlC(asyncio.current_task())
            _stop_on_ctrl_c(args.ctrl_c, getattr(args, "thread", None))
            db = Database(args.db)
            if args.command not in CREATING_COMMANDS:
                await db.require_tables()  # PostgreSQL: never set up (create) tables for a command that needs them
            async with Session(db, note=note) as session:
                result: int = await handler(args, session)
                return result

        return asyncio.run(run())
    except Stopped as exc:  # not an error: the user asked for it
        sys.stderr.write(f"graphckpt: {exc}\n")
        return exc.exit_code
    except CliError as exc:
        if debug:
            raise
        return _fail(scrub_password(str(exc), db_url), exc.exit_code)
    except GraphckptError as exc:
        if debug:
            raise
        message = scrub_password(str(exc), db_url)  # a driver may quote the part of the URL it cannot parse
        if isinstance(exc, CorruptCheckpointError) and getattr(args, "graph", None) and not getattr(args, "raw", True):
            message += " (--raw reads the stored values without the graph code)"
        return _fail(message, 1)
