"""The ``graphckpt`` subcommands. Each takes the parsed arguments and a :class:`Session` and returns the exit status.

Human output goes through :mod:`graphckpt.cli.render` (rich, imported on use); ``--json`` prints
:mod:`graphckpt.plain` data. Progress and notes go to stderr, results to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib.util
import inspect
import json
import os
import shlex
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

from graphckpt import ids, lease, plain
from graphckpt.app import App
from graphckpt.checkpoint import Snapshot
from graphckpt.cli import lifecycle
from graphckpt.cli.cron import cmd_cron
from graphckpt.cli.exits import WAITING
from graphckpt.cli.lgimport import cmd_import_langgraph
from graphckpt.cli.output import prices_of as _prices
from graphckpt.cli.output import print_json as _print_json
from graphckpt.cli.output import renderer as _render
from graphckpt.cli.recover import cmd_recover
from graphckpt.cli.rekey import cmd_rekey
from graphckpt.cli.serve import cmd_serve
from graphckpt.cli.service import cmd_runs, cmd_submit, cmd_worker
from graphckpt.cli.session import (
    DEFAULT_DB,
    CliError,
    Database,
    Session,
    UsageError,
    load_target,
    parse_assignments,
    parse_json,
)
from graphckpt.cli.threads import cmd_threads
from graphckpt.errors import (
    CheckpointNotFoundError,
    GraphckptError,
    LeaseLostError,
    ThreadBusyError,
    ThreadNotFoundError,
)
from graphckpt.lease import LEASE_ENV
from graphckpt.savers.base import thread_busy

__all__ = ["ASYNC_COMMANDS", "SYNC_COMMANDS", "Stopped"]


class Stopped(CliError):
    """The run stopped after its running task(s), as a Ctrl-C (exit status 130) or SIGTERM (143) asked. Reported as
    a stop, not an error (and not as "interrupted", which is a thread status: waiting for a person)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _payload_text(payload: Any) -> str:
    """An interrupt's payload as one line of JSON, its text as written (not as ``\\uXXXX`` escapes)."""
    return json.dumps(plain.to_jsonable(payload), ensure_ascii=False)


def _lease_option(args: argparse.Namespace) -> None:
    """``--lease-seconds``: the lease length of every app this process builds (as ``$GRAPHCKPT_LEASE_SECONDS``)."""
    if getattr(args, "lease_seconds", None) is not None:
        os.environ[LEASE_ENV] = repr(args.lease_seconds)


def _resume_hint(thread_id: str, extra: str = "") -> str:
    """``graphckpt resume ID`` with ``ID`` quoted for the shell."""
    return f"graphckpt resume {shlex.quote(thread_id)}{extra}"


# -- run / resume ------------------------------------------------------------------------------------------------------


async def cmd_run(args: argparse.Namespace, s: Session) -> int:
    """Start a thread of graph ``MODULE:ATTR`` with ``--input`` and run it to the end (or an interrupt)."""
    update = parse_json(args.input, "--input")
    _lease_option(args)
    app = s.app(args.target, create=True)
    thread_id = args.thread or ids.new_id()
    record = await app.saver.get_thread(thread_id)
    if record is not None and record.status == "running" and record.lease is not None:
        raise CliError(str(thread_busy(thread_id, record.lease, ids.now())))
    if record is not None and record.status != "done":
        answer = " --answer JSON" if record.status == "interrupted" else ""
        raise CliError(f"thread {thread_id!r} is {record.status}; continue it with `{_resume_hint(thread_id, answer)}`")
    if record is not None:
        tags = record.metadata.get("tags")
        recorded = tags.get("graph") if isinstance(tags, Mapping) else None
        if recorded is not None and recorded != args.target:
            raise CliError(
                f"thread {thread_id!r} belongs to graph {recorded}, not {args.target}; pick another --thread "
                "(or fork it)"
            )
        s.note(f"thread {thread_id!r} is done at step {record.head_step}: this input starts a new turn on top of it")
    stream = app.astream(
        update,
        thread_id=thread_id,
        mode="checkpoints",
        recursion_limit=args.recursion_limit,
        tags={"graph": args.target},
    )
    await _drive(s, app, stream, thread_id, args, verb="running")
    return 0


async def cmd_resume(args: argparse.Namespace, s: Session) -> int:
    """Continue a thread from its head (after a crash, a failure or an interrupt)."""
    answer = parse_json(args.answer, "--answer") if args.answer is not None else None
    _lease_option(args)
    app, ref = await s.app_for(args.thread, args.graph, action="resume")
    head = await app.aget_state(args.thread)
    asks = [i for i in head.interrupts if i.when == "inside"]
    if asks and args.answer is None:
        raise CliError(
            f"thread {args.thread!r} is waiting for an answer to {_payload_text(asks[0].payload)} "
            f"(node {asks[0].node!r}); give it with `{_resume_hint(args.thread, ' --answer JSON')}`"
        )
    record = await app.saver.get_thread(args.thread)
    old = record.metadata.get("tags") if record is not None else None
    tags = {**(old if isinstance(old, Mapping) else {}), "graph": ref}
    given: dict[str, Any] = {"answer": answer} if args.answer is not None else {}
    if args.take_over and record is not None and record.lease is not None and record.lease.live(ids.now()):
        if not await _confirmed(args, f"take thread {args.thread!r} over from {record.lease.describe(ids.now())}"):
            return 1
        given["take_over"] = True
    stream = app.astream(
        None,
        thread_id=args.thread,
        mode="checkpoints",
        recursion_limit=args.recursion_limit,
        tags=tags,
        resume=True,
        **given,
    )
    final = await _drive(s, app, stream, args.thread, args, verb="resuming")
    return WAITING if final.status == "interrupted" else 0


async def _release_own_lease(app: App, thread_id: str) -> None:
    """Give up the lease this process holds on ``thread_id`` (a quit at once: its last commit is durable)."""
    record = await app.saver.get_thread(thread_id)
    if record is not None and record.lease is not None and record.lease.owner.worker_id == lease.owner().worker_id:
        await app.saver.release(thread_id, run_id=record.run_id)


async def _drive(
    s: Session, app: App, stream: AsyncIterator[Any], thread_id: str, args: argparse.Namespace, *, verb: str
) -> Snapshot:
    """Consume the checkpoint stream with a live display, then print where the thread stands; returns its head."""
    display = None if args.json or args.quiet else _render().StepDisplay(thread_id)
    seen: list[Snapshot] = []
    stop = asyncio.Event()  # set by the first Ctrl-C: stop once the running task(s) committed their step
    ctrl_c = getattr(args, "ctrl_c", None)
    if ctrl_c is not None:
        ctrl_c.stop = stop
        ctrl_c.display = display
        ctrl_c.release = functools.partial(_release_own_lease, app, thread_id)
    try:
        with display.running(verb) if display is not None else contextlib.nullcontext():
            async for snap in stream:
                seen.append(snap)
                if display is not None:
                    display.checkpoint(snap)
                if stop.is_set():
                    break
    except (ThreadBusyError, LeaseLostError) as exc:
        raise CliError(str(exc)) from exc  # another process runs the thread: nothing to fix or resume here
    except GraphckptError as exc:
        record = await app.saver.get_thread(thread_id)
        if record is not None and record.status in ("failed", "running"):
            raise CliError(
                f"{exc}; its checkpoints are kept: fix the cause, then run `{_resume_hint(thread_id)}`"
            ) from exc
        raise
    finally:
        if ctrl_c is not None:
            ctrl_c.stop = ctrl_c.display = ctrl_c.release = None
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()  # a stream left midway stops its run (the next step's tasks are cancelled)
    if stop.is_set() and seen and seen[-1].status == "running":  # else the run ended anyway: report it
        last, signum = seen[-1], getattr(ctrl_c, "signum", None) or signal.SIGINT
        by = " on SIGTERM" if signum == signal.SIGTERM else ""
        raise Stopped(f"stopped after step {last.step}{by} (resume with: {_resume_hint(thread_id)})", 128 + signum)
    final = await app.aget_state(thread_id)
    used = sum(plain.tokens(plain.metadata_of(snap)) for snap in seen)
    if args.json:
        _print_json({**plain.snapshot_record(final, raw=False), "run": {"checkpoints": len(seen), "tokens": used}})
        return final
    out = _render().console()
    summary = f"thread {thread_id}: {final.status} at step {final.step} (checkpoint {final.checkpoint_id})"
    summary += f"; {len(seen)} new checkpoint{'s' if len(seen) != 1 else ''}"
    summary += f", {used:,} tokens" if used else ""
    out.print(summary, markup=False)
    waiting = [i for i in final.interrupts if i.when == "inside"]
    for i in final.interrupts:
        what = (
            f"node {i.node!r} asks: {_payload_text(i.payload)}"
            if i.when == "inside"
            else (f"stopped {i.when} node {i.node!r}")
        )
        out.print(what, markup=False)
    if final.status == "interrupted":
        hint = " --answer JSON" if waiting else ""
        out.print(f"continue with: {_resume_hint(thread_id, hint)}", markup=False)
    return final


# -- reading -----------------------------------------------------------------------------------------------------------


async def cmd_history(args: argparse.Namespace, s: Session) -> int:
    """A thread's checkpoints, oldest first (its lineage, through the fork points); ``--tree``: the fork tree."""
    reader = s.reader()
    if args.tree:
        return await _history_tree(args, s)
    snaps = list(reversed(await reader.ahistory(args.thread, limit=args.limit, subgraphs=True)))
    if args.json:
        _print_json([plain.step_record(snap) for snap in snaps])
        return 0
    render = _render()
    out = render.console()
    out.print(render.history_table(snaps, args.thread, out.width))
    for line in render.audit_lines(await reader.aaudit(args.thread, prices=_prices(args))):
        out.print(line)
    return 0


async def _history_tree(args: argparse.Namespace, s: Session) -> int:
    reader = s.reader()
    infos = await reader.athreads()
    by_id = {i.thread_id: i for i in infos}
    if args.thread not in by_id:
        raise ThreadNotFoundError(f"no thread {args.thread!r}")
    root, seen = args.thread, {args.thread}
    while (up := by_id[root].forked_from) is not None and up.thread_id in by_id and up.thread_id not in seen:
        root = up.thread_id
        seen.add(root)
    family, todo = [], [root]
    while todo:
        tid = todo.pop()
        family.append(tid)
        todo += [
            i.thread_id
            for i in infos
            if i.forked_from
            and i.forked_from.thread_id == tid
            and i.thread_id not in family
            and i.thread_id not in todo
        ]
    own = {tid: [x for x in reversed(await reader.ahistory(tid)) if x.thread_id == tid] for tid in family}
    # --limit: each thread's newest N (a fork from a checkpoint left out hangs off its thread); totals count them all
    tree = plain.thread_trees([by_id[t] for t in family], own, root, limit=args.limit)
    if args.json:
        _print_json(tree)
        return 0
    render = _render()
    render.console().print(render.history_tree([tree], args.thread))
    return 0


async def cmd_show(args: argparse.Namespace, s: Session) -> int:
    """A checkpoint's state as JSON (the head unless ``--checkpoint``)."""
    reader, raw = await s.values_reader([args.thread], args.graph, raw=args.raw)
    checkpoint = await _checkpoint_of(s, args.thread, args.checkpoint, args.step, "--step")
    snap = await reader.aget_state(args.thread, checkpoint)
    if args.json:
        shown = plain.snapshot_record(snap, raw=raw)
        if checkpoint is None:  # the head: also the record of the step that has not committed (failed, crashed)
            audit = await s.reader().aaudit(args.thread)
            shown["pending"] = {
                k: [e for e in audit[k] if e.get("pending")] for k in ("calls", "requests", "attempts", "answers")
            }
        _print_json(shown)
        return 0
    _render().print_snapshot(_render().console(), snap, raw=raw)
    return 0


async def _checkpoint_of(
    s: Session, thread_id: str, spec: str | None, step: int | None, step_option: str
) -> str | None:
    """The checkpoint id that ``spec`` (an id or unique prefix) or ``step`` names in the thread's lineage; ``None``
    (the head) when neither is given. A spec of digits that names no checkpoint suggests ``--step``."""
    if step is not None:
        return await s.checkpoint_at_step(thread_id, step)
    if spec is None:
        return None
    try:
        return await s.checkpoint_id(thread_id, spec)
    except CheckpointNotFoundError as exc:
        if spec.isdigit():
            raise CheckpointNotFoundError(
                f"{exc} (for the checkpoint of step {spec}, pass {step_option} {spec})"
            ) from None
        raise


async def _split_spec(s: Session, spec: str) -> tuple[str, str | None]:
    """``(thread, checkpoint or None)`` of a diff side. A spec that names an existing thread is that thread's head
    (thread ids may contain ``@``); else it splits at its last ``@`` (``THREAD@CHECKPOINT``), and a trailing ``@``
    (``THREAD@``) means the head."""
    if "@" not in spec or await s.reader().saver.get_thread(spec) is not None:
        return spec, None
    thread, _, checkpoint = spec.rpartition("@")
    if not thread:
        raise UsageError(f"{spec!r} is not THREAD, THREAD@ or THREAD@CHECKPOINT")
    return thread, checkpoint or None


async def cmd_diff(args: argparse.Namespace, s: Session) -> int:
    """What differs between the state of two checkpoints (each THREAD for its head, or THREAD@CHECKPOINT)."""
    (ta, ca), (tb, cb) = await _split_spec(s, args.a), await _split_spec(s, args.b)
    reader, raw = await s.values_reader([ta, tb], args.graph, raw=args.raw)
    ca = await s.checkpoint_id(ta, ca) if ca else None
    cb = await s.checkpoint_id(tb, cb) if cb else None
    diff = plain.without_nan_changes(await reader.adiff((ta, ca), (tb, cb)))
    if raw:  # a field only one side's stored state holds is at its default on the other: changed, as with --graph
        diff = plain.unset_as_changes(diff)
    if args.format == "patch":
        _print_json(plain.json_patch(diff))
        return 0
    if args.json:
        _print_json(plain.diff_record(diff, raw=raw))
        return 0
    _render().print_diff(_render().console(), diff)
    return 0


# -- writing -----------------------------------------------------------------------------------------------------------


async def cmd_fork(args: argparse.Namespace, s: Session) -> int:
    """Branch a thread at a checkpoint into a new thread (the source never changes); ``resume`` runs the branch."""
    update = parse_assignments(args.set or [])
    if (args.checkpoint is None) == (args.step is None):
        raise UsageError("fork needs a CHECKPOINT or --step N (one of them): `graphckpt fork ID --step 2`")
    app, ref = await s.app_for(args.thread, args.graph, action="fork")
    checkpoint = await _checkpoint_of(s, args.thread, args.checkpoint, args.step, "--step")
    assert checkpoint is not None
    snap = await app.afork(
        args.thread,
        checkpoint,
        update=update or None,
        new_thread_id=args.new_thread,
        goto=args.goto or None,
        tags={"graph": ref},
    )
    if args.json:
        _print_json(plain.snapshot_record(snap, raw=False))
        return 0
    out = _render().console()
    out.print(
        f"forked {args.thread}@{checkpoint} -> thread {snap.thread_id} (step {snap.step}, next: "
        f"{', '.join(snap.next) or 'END'})",
        markup=False,
    )
    out.print(f"run it with: {_resume_hint(snap.thread_id)}", markup=False)
    return 0


async def _confirmed(args: argparse.Namespace, question: str) -> bool:
    """``--yes``, or a yes to ``question`` on a terminal (elsewhere: a usage error asking for ``--yes``)."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise UsageError(f"not going to {question} without confirmation: pass --yes (not a terminal)")
    sys.stderr.write(f"{question}? [y/N] ")
    sys.stderr.flush()
    if (await asyncio.to_thread(sys.stdin.readline)).strip().lower() in ("y", "yes"):
        return True
    sys.stderr.write("graphckpt: not taken over\n")
    return False


async def cmd_delete(args: argparse.Namespace, s: Session) -> int:
    """Erase a thread and its subgraphs' child threads (refused when forks depend on it, unless --cascade); on a
    terminal, after a yes; else with --yes."""
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError(f"not deleting thread {args.thread!r} without confirmation: pass --yes (not a terminal)")
        info = await s.reader().saver.get_thread(args.thread)
        if info is None:
            raise ThreadNotFoundError(f"no thread {args.thread!r}")
        sys.stderr.write(f"delete thread {args.thread!r} ({info.status} at step {info.head_step})? [y/N] ")
        sys.stderr.flush()
        answer = await asyncio.to_thread(sys.stdin.readline)
        if answer.strip().lower() not in ("y", "yes"):
            sys.stderr.write("graphckpt: not deleted\n")
            return 1
    from graphckpt.erase import erase_thread

    deleted = await erase_thread(s.reader().saver, args.thread, cascade=args.cascade)  # and its subgraphs' threads
    if args.json:
        _print_json({"deleted": args.thread, "threads": deleted})
    else:
        others = deleted[:-1]
        print(f"deleted thread {args.thread}" + (f" and {len(others)} other(s): {', '.join(others)}" if others else ""))
    return 0


async def cmd_export(args: argparse.Namespace, s: Session) -> int:
    """Write a thread and the ancestor checkpoints its lineage needs as JSON lines (stdout or ``-o FILE``)."""
    from graphckpt.transfer import export_thread

    saver = s.saver()
    if args.output in (None, "-"):
        async for line in export_thread(saver, args.thread, decrypt=args.decrypt):
            sys.stdout.write(line if line.endswith("\n") else line + "\n")
        return 0
    path = Path(args.output)
    tmp = path.with_name(path.name + ".part")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            async for line in export_thread(saver, args.thread, decrypt=args.decrypt):
                f.write(line if line.endswith("\n") else line + "\n")
        tmp.replace(path)
    except OSError as exc:
        raise CliError(f"cannot write {args.output!r}: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    print(f"exported thread {args.thread} to {path}", file=sys.stderr)
    return 0


async def cmd_import(args: argparse.Namespace, s: Session) -> int:
    """Store a thread exported by ``graphckpt export`` (from FILE, or stdin for ``-``); nothing is overwritten."""
    from graphckpt.transfer import import_thread

    try:
        path = Path(args.file)
        text = await asyncio.to_thread(sys.stdin.read if args.file == "-" else lambda: path.read_text("utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read {args.file!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        what = "stdin" if args.file == "-" else repr(args.file)
        raise UsageError(
            f"{what} is not a graphckpt export: not UTF-8 text (byte {exc.start}); `graphckpt export` writes UTF-8 "
            "JSON lines"
        ) from None
    thread_id = await import_thread(s.saver(create=True), text.splitlines())
    if args.json:
        _print_json({"imported": thread_id})
    else:
        print(f"imported thread {thread_id}")
    return 0


# -- no database -------------------------------------------------------------------------------------------------------


def cmd_graph(args: argparse.Namespace) -> int:
    """Print the graph of ``MODULE:ATTR`` as mermaid text."""
    target = load_target(args.target)
    sys.stdout.write(target.to_mermaid())
    return 0


def demo_path() -> Path:
    """Where the demo lives: ``examples/agent_task.py`` of the source tree this package runs from."""
    return Path(__file__).resolve().parents[2] / "examples" / "agent_task.py"


def _demo_argv(args: argparse.Namespace) -> list[str]:
    """The demo's own arguments, with the database: the global ``--db`` (a SQLite file), else ``graphckpt.db`` in
    the current directory, where the other commands look by default. The demo does not read ``$GRAPHCKPT_DB`` (it
    would write demo threads into that database): it notes that it ignores it."""
    argv = list(args.demo_args)
    own = [a for a in argv if a == "--db" or a.startswith("--db=")]
    if args.db is None:
        if own or "-h" in argv or "--help" in argv:
            return argv
        if os.environ.get("GRAPHCKPT_DB"):
            print(
                f"graphckpt: note: the demo ignores $GRAPHCKPT_DB and writes {DEFAULT_DB} in the current directory; "
                "choose its file with `graphckpt --db FILE demo`",
                file=sys.stderr,
            )
        return [*argv, "--db", DEFAULT_DB]
    if own:
        raise UsageError("give the demo's database once: `graphckpt --db FILE demo` or `graphckpt demo --db FILE`")
    db = Database(args.db)
    if db.is_postgres:
        raise UsageError(f"the demo needs a SQLite file, not {db.display}: `graphckpt --db demo.db demo`")
    return [*argv, "--db", db.path]


def load_demo() -> Any:
    """The demo module (``examples/agent_task.py`` of the source tree), loaded by path once per process."""
    name = "graphckpt_demo_agent_task"
    if name in sys.modules:
        return sys.modules[name]
    path = demo_path()
    if not path.is_file():
        raise CliError(f"the demo is not here: {path} does not exist (it ships with the source checkout)")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CliError(f"cannot load the demo from {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look the module up by name while it executes
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[spec.name]
        raise
    return module


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the multi-step agent demo (fail, resume, fork, diff), offline unless a model endpoint is configured."""
    module = load_demo()
    main = getattr(module, "main", None)
    if not callable(main):
        raise CliError(f"the demo {demo_path()} has no main()")
    argv = _demo_argv(args)
    if inspect.signature(main).parameters:
        result = main(argv)
    else:
        sys.argv = [str(demo_path()), *argv]
        result = main()
    return result if isinstance(result, int) else 0


ASYNC_COMMANDS: dict[str, Callable[[argparse.Namespace, Session], Any]] = {
    "run": cmd_run,
    "resume": cmd_resume,
    "threads": cmd_threads,
    "history": cmd_history,
    "show": cmd_show,
    "diff": cmd_diff,
    "fork": cmd_fork,
    "delete": cmd_delete,
    "export": cmd_export,
    "rekey": cmd_rekey,
    "import": cmd_import,
    "recover": cmd_recover,
    "submit": cmd_submit,
    "runs": cmd_runs,
    "worker": cmd_worker,
    "cron": cmd_cron,  # wave3 issue 29
    "stats": lifecycle.cmd_stats,
    "prune": lifecycle.cmd_prune,
}
SYNC_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "graph": cmd_graph,
    "demo": cmd_demo,
    "serve": cmd_serve,
    "import-langgraph": cmd_import_langgraph,  # wave3 issue 27
}
