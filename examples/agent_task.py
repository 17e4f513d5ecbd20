"""The graphckpt demo: a four-step agent task that fails, resumes in another process, and forks.

The task ("write a weather lookup function") is a graph of four model calls: analyse the request, write the code,
check it for errors, write the tests. Every super-step is checkpointed to a SQLite file. The demo proves:

1. **Failure keeps finished work.** A timeout is simulated at step 3 (``check``, first attempt only, armed by a flag
   file next to the database, so it is deterministic). The thread is ``failed``; the checkpoint after step 2 is saved.
2. **Resume is durable and free.** A *new process* (this script with ``--resume THREAD``) opens the same database file
   and resumes the thread: steps 1-2 are not executed again and make zero model calls (the process-wide
   ``nodes.llm_calls`` counter says so); only steps 3-4 call the model; the task completes.
3. **Forks are cheap and pure.** The thread is forked from the checkpoint after step 2 with a different instruction
   ("Fahrenheit"), re-routed to rewrite the code; the branch completes, the original thread is untouched, and the
   demo prints the diff of the two results and the tokens each branch spent (steps 1-2 are shared, not re-spent).

The model is the deterministic built-in ``graphckpt-offline`` unless ``--online`` is given (then the OpenAI-compatible
endpoint from ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` is used): a key in your shell is never spent by accident.
Offline, its answers are the demo's canned ones, in ``demo_answers.py`` next to this file.
Apart from timings, ids and paths, the output is the same on every run. The threads record their graph as
``graphckpt.cli.demo:graph`` (:func:`build_graph`, loadable by the CLI), and the demo ends with the ``graphckpt``
commands to paste next (``--db`` in them only when the CLI would not find the file by itself).

    python examples/agent_task.py [--db PATH] [--online]
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import itertools
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import BaseModel

from graphckpt import END, START, App, Context, NodeError, Snapshot, StateGraph
from graphckpt.savers.sqlite import SqliteSaver
from nodes import OFFLINE_MODEL, chat_node, llm_calls

__all__ = [
    "FORK_INSTRUCTION",
    "GRAPH_REF",
    "INSTRUCTION",
    "REQUEST",
    "STEPS",
    "AgentTask",
    "build_app",
    "build_graph",
    "fault_file",
    "main",
    "next_commands",
]

REQUEST = "write a weather lookup function"
INSTRUCTION = "Keep it simple: standard library only, temperatures in Celsius."
FORK_INSTRUCTION = "Report the temperature in Fahrenheit instead of Celsius."
STEPS = ("analyse", "write", "check", "tests")
"""The nodes, in order: super-steps 1-4 of a run."""
FAILING_STEP = "check"
ASYNC_INSTRUCTION = "Make it async with asyncio."
"""The instruction of the fork the closing commands suggest."""
GRAPH_REF = "graphckpt.cli.demo:graph"
"""What the demo's threads record as their graph: a zero-argument factory of :func:`build_graph` that the CLI can
load, so ``graphckpt resume`` and ``graphckpt fork`` work on them."""
TAGS = {"graph": GRAPH_REF}


def _sibling(name: str) -> ModuleType:
    """The module ``name.py`` next to this file. Loaded by path: the demo runs as a script and as ``graphckpt demo``
    (which loads this file by path too), so this directory need not be on ``sys.path``."""
    spec = importlib.util.spec_from_file_location(
        f"graphckpt_demo_{name}", Path(__file__).resolve().with_name(f"{name}.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


demo_answer = _sibling("demo_answers").demo_answer
"""The canned answers of the offline model for the four steps."""


class AgentTask(BaseModel):
    """The state: the request, the instruction, and what each step wrote."""

    request: str
    instruction: str = INSTRUCTION
    analysis: str = ""
    code: str = ""
    review: str = ""
    tests: str = ""


_HEADER = "Request: {request}\nInstruction: {instruction}\n\n"
_PROMPTS: dict[str, tuple[str, str, str]] = {  # node -> (system prompt, user prompt template, output field)
    "analyse": (
        "You are a senior Python engineer. Analyse the request: requirements, edge cases and a plan.",
        _HEADER.rstrip(),
        "analysis",
    ),
    "write": (
        "You are a senior Python engineer. Implement the request as one Python code block.",
        _HEADER + "Notes:\n{analysis}",
        "code",
    ),
    "check": (
        "You are a careful reviewer. Check the code for errors and bugs; end with 'Verdict: ok' or 'Verdict: fix'.",
        _HEADER + "{code}",
        "review",
    ),
    "tests": (
        "You are a senior Python engineer. Write pytest unit tests for the code, with the network mocked.",
        _HEADER + "{code}\n\nReview:\n{review}",
        "tests",
    ),
}

EXECUTED: Counter[str] = Counter()
"""How many times each node ran in this process."""
MODEL_CALLS: Counter[str] = Counter()
"""Model calls each node made in this process (``nodes.llm_calls`` deltas: journaled answers are not calls)."""

Node = Callable[[AgentTask, Context], Awaitable[dict[str, Any]]]


def fault_file(db: Path) -> Path:
    """The flag file that arms the simulated timeout: it holds a node name, and that node's next run consumes it."""
    return db.with_name(db.name + ".fault")


def _tracked(name: str, inner: Callable[[Any, Any], Any], fault: Path | None) -> Node:
    """``inner`` counted in :data:`EXECUTED` and :data:`MODEL_CALLS`, failing once if ``fault`` names this node."""

    async def node(state: AgentTask, ctx: Context) -> dict[str, Any]:
        EXECUTED[name] += 1
        if fault is not None and _consume_fault(fault, name):
            raise TimeoutError("simulated timeout: the model did not answer within 60 s (first attempt only)")
        before = llm_calls.calls
        try:
            return dict(await inner(state, ctx))
        finally:
            MODEL_CALLS[name] += llm_calls.calls - before

    node.__name__ = node.__qualname__ = name
    return node


def _consume_fault(fault: Path, name: str) -> bool:
    try:
        armed = fault.read_text().strip() == name
    except FileNotFoundError:
        return False
    if armed:
        fault.unlink(missing_ok=True)
    return armed


def build_graph(fault: Path | None = None, *, online: bool = False) -> StateGraph:
    """The agent task graph (analyse -> write -> check -> tests), offline (the deterministic ``graphckpt-offline``
    model) unless ``online``. With ``fault``, a node fails once when that flag file names it (:func:`fault_file`).
    Called without arguments it is the graph the CLI loads for the demo's threads (:data:`GRAPH_REF`)."""
    g = StateGraph(AgentTask)
    for name in STEPS:
        system, prompt, output = _PROMPTS[name]
        g.add_node(
            name,
            _tracked(
                name,
                chat_node(prompt, system=system, output_key=output, offline=not online, offline_answer=demo_answer),
                fault,
            ),
        )
    g.add_edge(START, STEPS[0])
    for a, b in itertools.pairwise(STEPS):
        g.add_edge(a, b)
    g.add_edge(STEPS[-1], END)
    return g


def build_app(db: str | os.PathLike[str], *, online: bool = False) -> App:
    """:func:`build_graph` on a :class:`SqliteSaver` at ``db``; ``check`` fails once when :func:`fault_file`
    names it."""
    return build_graph(fault_file(Path(db)), online=online).compile(saver=SqliteSaver(db))


# -- printing -----------------------------------------------------------------------------------------------------


def _tokens(meta: Any, node: str | None = None) -> tuple[int, int]:
    """(tokens, model calls) of one checkpoint's metadata, for ``node`` or all nodes."""
    usage: dict[str, Any] = dict(meta.get("usage") or {})
    picked = list(usage.values()) if node is None else [usage[node]] if node in usage else []
    tokens = sum(int(u.get("prompt_tokens", 0)) + int(u.get("completion_tokens", 0)) for u in picked)
    return tokens, sum(int(u.get("calls", 0)) for u in picked)


def _step_line(snap: Snapshot) -> str:
    meta = snap.metadata
    source = meta.get("source")
    if source == "input":
        return f"   step {snap.step}  {'input':<8} {'':>9}  request saved, next: {', '.join(snap.next)}"
    if source == "fork":
        parent = snap.parent.checkpoint_id if snap.parent else "?"
        return f"   step {snap.step}  {'fork':<8} {'':>9}  from {parent}, next: {', '.join(snap.next) or 'END'}"
    parts = []
    for node, ms in dict(meta.get("durations_ms") or {}).items():
        tokens, calls = _tokens(meta, node)
        parts.append(f"   step {snap.step}  {node:<8} {ms:>6.1f} ms  {tokens:>4} tokens, {calls} model call(s)")
    return "\n".join(parts) or f"   step {snap.step}  (no tasks)"


def _run_steps(snapshots: Iterable[Snapshot]) -> Snapshot | None:
    """Print one line per committed checkpoint; return the last one."""
    last = None
    for snap in snapshots:
        print(_step_line(snap), flush=True)
        last = snap
    return last


class Spend:
    """Model usage summed over some checkpoints."""

    def __init__(self) -> None:
        self.tokens = self.calls = 0
        self.steps: list[int] = []

    def add(self, snap: Snapshot) -> None:
        tokens, calls = _tokens(snap.metadata)
        if calls:
            self.tokens, self.calls, self.steps = self.tokens + tokens, self.calls + calls, [snap.step, *self.steps]

    def where(self) -> str:
        first, last = (self.steps[0], self.steps[-1]) if self.steps else (0, 0)
        return f"steps {first}-{last}" if first != last else f"step {first}"


def _branch_spend(app: App, thread_id: str) -> tuple[Spend, Spend]:
    """Usage of the thread's own checkpoints, and of the ancestors it shares with the thread it was forked from."""
    own, shared = Spend(), Spend()
    for snap in app.history(thread_id):
        (own if snap.thread_id == thread_id else shared).add(snap)
    return own, shared


def _print_diff(app: App, a: str, b: str, max_lines: int = 4) -> None:
    """``app.diff`` of the two heads; multi-line text as a short line diff (the model's per-prompt tag lines, which
    differ whenever the prompt does, are left out)."""
    diff = app.diff((a, None), (b, None))
    print(f"   {diff.a.thread_id}@{diff.a.checkpoint_id} -> {diff.b.thread_id}@{diff.b.checkpoint_id}")
    if not diff:
        print("   (no differences)")
    for key, value in diff.added.items():
        print(f"   + {key} = {value!r}")
    for key, value in diff.removed.items():
        print(f"   - {key} = {value!r}")
    for key, change in diff.changed.items():
        before, after = str(change.before), str(change.after)
        if "\n" not in before + after:
            print(f"   ~ {key}: {before!r} -> {after!r}")
            continue
        lines = [
            f"{line[0]} {line[1:].strip()}"
            for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---")) and OFFLINE_MODEL not in line
        ]
        if not lines:
            print(f"   ~ {key}: same content (only the model's per-prompt tag line differs)")
            continue
        print(f"   ~ {key}: {len(lines)} line(s) differ:")
        for line in _elide(lines[:max_lines]):
            print(f"       {line}")
        if len(lines) > max_lines:
            print(f"       ... {len(lines) - max_lines} more")


def _elide(lines: list[str], width: int = 100) -> list[str]:
    """Shorten long lines; a ``-``/``+`` pair is cut at the same place, just before where the two start to differ."""
    out = list(lines)
    for i, line in enumerate(lines):
        if len(line) <= width:
            continue
        partner = lines[i + 1] if line[0] == "-" and i + 1 < len(lines) else lines[i - 1] if i else ""
        common = 0
        if partner[:1] in ("+", "-") and partner[0] != line[0]:
            pairs = enumerate(zip(line[2:], partner[2:], strict=False), start=2)
            common = next((k for k, (x, y) in pairs if x != y), len(line))
        start = max(2, common - 20)
        text = line[start:] if start == 2 else "..." + line[start:]
        out[i] = f"{line[0]} {text if len(text) <= width - 2 else text[: width - 5] + '...'}"
    return out


# -- the two processes --------------------------------------------------------------------------------------------


def _resume_child(db: Path, thread_id: str, online: bool) -> int:
    """``--resume THREAD``: resume the failed thread in this (new) process and report what it re-ran."""
    with build_app(db, online=online) as app:
        found = app.get_state(thread_id)
        print(f"   [pid {os.getpid()}] opened {db.name}: thread {thread_id!r} is {found.status} at step {found.step}")
        head = _run_steps(app.stream(None, thread_id=thread_id, mode="checkpoints", resume=True, tags=TAGS))
        state = app.get_state(thread_id)
    earlier = STEPS[:2]
    reran = sum(EXECUTED[n] for n in earlier)
    calls_before = sum(MODEL_CALLS[n] for n in earlier)
    print(
        f"   -> steps 1-2 ({', '.join(earlier)}) re-executed: {'no' if not reran else f'YES, {reran} time(s)'}; "
        f"their new model calls: {calls_before}"
    )
    later = ", ".join(f"{n} {MODEL_CALLS[n]}" for n in STEPS[2:])
    print(f"   -> model calls made by this process: {llm_calls.calls} ({later})")
    print(f"   -> thread {thread_id!r} is {state.status} at step {state.step}")
    ok = head is not None and state.status == "done" and reran == 0 and calls_before == 0
    return 0 if ok else 1


def _free_thread_ids(app: App) -> tuple[str, str]:
    """``weather`` and ``weather-fahrenheit``, or ``weather-2``... when ``--db`` names a file that has them (or the
    ``-async`` branch the closing commands suggest)."""
    taken = {t.thread_id for t in app.threads()}
    n = 1
    while True:
        base = "weather" if n == 1 else f"weather-{n}"
        if not {base, f"{base}-fahrenheit", f"{base}-async"} & taken:
            return base, f"{base}-fahrenheit"
        n += 1


def next_commands(db: Path, thread: str) -> list[str]:
    """The ``graphckpt`` commands to paste after the demo: its tree, a fork after step 2 with another instruction
    (back to ``write``), and running that fork. ``--db`` only when the CLI would not find ``db`` by itself."""
    default = Path("graphckpt.db").resolve()
    found = db.resolve() == default and not os.environ.get("GRAPHCKPT_DB")
    cli = "graphckpt" if found else f"graphckpt --db {shlex.quote(str(db))}"
    branch = shlex.quote(f"{thread}-async")
    instruction = shlex.quote(json.dumps(ASYNC_INSTRUCTION))
    return [
        f"{cli} history {shlex.quote(thread)} --tree",
        f"{cli} fork {shlex.quote(thread)} --step 2 --goto write --set instruction={instruction} --new-thread {branch}",
        f"{cli} resume {branch}",
    ]


def main(argv: list[str] | None = None) -> int:
    """Run the demo (or, with ``--resume``, its second process). Returns the exit code."""
    parser = argparse.ArgumentParser(prog="agent_task", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--db", help="SQLite file (default: agent_demo.db in a new temporary directory; `graphckpt demo`: graphckpt.db)"
    )
    parser.add_argument("--online", action="store_true", help="call the endpoint from OPENAI_BASE_URL/OPENAI_API_KEY")
    parser.add_argument("--resume", metavar="THREAD", help=argparse.SUPPRESS)  # internal: the resuming process
    args = parser.parse_args(argv)
    if args.online and not (os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_KEY")):
        print("--online needs OPENAI_BASE_URL or OPENAI_API_KEY in the environment", file=sys.stderr)
        return 2
    if args.resume:
        if not args.db:
            parser.error("--resume needs --db")
        return _resume_child(Path(args.db), args.resume, args.online)

    db = Path(args.db) if args.db else Path(tempfile.mkdtemp(prefix="graphckpt-demo-")) / "agent_demo.db"
    if not db.parent.is_dir():
        print(f"--db {db}: directory {db.parent} does not exist", file=sys.stderr)
        return 2
    model = (
        f"{OFFLINE_MODEL} (deterministic built-in model: no key, no network; --online for a real endpoint)"
        if not args.online
        else f"online: {os.environ.get('GRAPHCKPT_MODEL', 'gpt-4o-mini')} at "
        f"{os.environ.get('OPENAI_BASE_URL', 'api.openai.com')}"
    )
    print("graphckpt demo: a four-step agent task that fails, resumes in a new process, and forks")
    print(f"   request   {REQUEST!r}")
    print(f"   model     {model}")
    print(f"   database  {db} (SQLite)")

    with build_app(db, online=args.online) as app:
        thread, fork = _free_thread_ids(app)

        # 1. the run that fails at step 3
        print(f"\n1. Run thread {thread!r}: {' -> '.join(STEPS)} (a timeout is simulated at step 3, {FAILING_STEP!r})")
        fault = fault_file(db)
        fault.write_text(FAILING_STEP)
        try:
            _run_steps(app.stream({"request": REQUEST}, thread_id=thread, mode="checkpoints", tags=TAGS))
        except NodeError as exc:
            cause = exc.__cause__
            print(f"   step {exc.step}  {exc.node:<8} {'FAILED':>9}  {type(cause).__name__}: {cause}")
        finally:
            fault.unlink(missing_ok=True)
        failed = app.get_state(thread)
        if failed.status != "failed":
            print(f"   expected the run to fail at step 3, but thread {thread!r} is {failed.status}")
            return 1
        print(
            f"   -> thread {thread!r} is failed; its checkpoint after step {failed.step} is saved "
            f"({failed.checkpoint_id}, next: {', '.join(failed.next)})"
        )
        print(f"   -> model calls so far: {llm_calls.calls} ({', '.join(f'{n} {MODEL_CALLS[n]}' for n in STEPS)})")

        # 2. resume in a new process, from the same file
        print(f"\n2. Resume {thread!r} in a new process, from the same database file")
        cmd = [sys.executable, str(Path(__file__).resolve()), "--resume", thread, "--db", str(db)]
        child = subprocess.run(
            [*cmd, *(["--online"] if args.online else [])], capture_output=True, text=True, timeout=300, check=False
        )
        print(child.stdout, end="")
        if child.returncode != 0:
            print(f"   the resuming process exited with {child.returncode}:\n{child.stderr}", file=sys.stderr)
            return 1
        done = app.get_state(thread)
        if done.status != "done":
            print(f"   thread {thread!r} is {done.status} after the resume, expected done", file=sys.stderr)
            return 1

        # 3. fork after step 2 with a different instruction
        after_step_2 = next(s for s in app.history(thread) if s.step == 2)
        print(f"\n3. Fork {thread!r} after step 2 into {fork!r}, go back to 'write' with a different instruction:")
        print(f"   {FORK_INSTRUCTION!r}")
        before = {n: MODEL_CALLS[n] for n in STEPS}
        first = app.fork(
            thread,
            after_step_2.checkpoint_id,
            update={"instruction": FORK_INSTRUCTION},
            new_thread_id=fork,
            goto="write",
            tags=TAGS,
        )
        print(_step_line(first))
        _run_steps(app.stream(None, thread_id=fork, mode="checkpoints", resume=True, tags=TAGS))
        branch = app.get_state(fork)
        calls = ", ".join(f"{n} {MODEL_CALLS[n] - before[n]}" for n in STEPS)
        print(f"   -> thread {fork!r} is {branch.status} at step {branch.step}; model calls: {calls}")

        # 4. the diff of the two results
        print(f"\n4. Diff of the two results ({thread!r} vs {fork!r})")
        _print_diff(app, thread, fork)

        # 5. tokens per branch
        print("\n5. Tokens spent per branch (from the checkpoints' usage metadata)")
        for tid in (thread, fork):
            own, shared = _branch_spend(app, tid)
            line = f"   {tid:<20} {own.where():<10} {own.calls} model calls {own.tokens:>5} tokens"
            if shared.calls:
                line += f"  (+ {shared.where()} shared with {thread!r}: {shared.calls} calls, {shared.tokens} tokens"
                line += ", not re-spent)"
            print(line)

        statuses = {t.thread_id: t.status for t in app.threads()}
    print(
        f"\nDone: thread {thread!r} {statuses[thread]}, thread {fork!r} {statuses[fork]}; the database is kept at {db}"
    )
    print("\nNext, with the graphckpt command (paste these; the threads record their graph, " + GRAPH_REF + "):")
    for command in next_commands(db, thread):
        print(f"   $ {command}")
    return 0 if statuses[thread] == statuses[fork] == "done" else 1


if __name__ == "__main__":
    raise SystemExit(main())
