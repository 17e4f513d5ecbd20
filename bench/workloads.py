"""The benchmark workloads, written once against the engine interface both adapters implement.

An *engine* is :mod:`bench.workloads_langgraph` or :mod:`bench.workloads_graphckpt`: a module with ``NAME`` and
``build_loop``/``build_messages``/``build_fanout`` returning an app with ``invoke``, ``resume``, ``history``,
``get_state``, ``fork``, ``ref``, ``values`` and ``close``. Each workload takes the engine, a fresh
:class:`~bench.storage.Store`, the sizes and a scratch directory, and returns named figures (milliseconds, bytes,
ratios). Only the operation being measured sits inside the timer; building threads to measure against does not.
A workload raises ``AssertionError`` when the engine computed a wrong result.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from bench import common, storage
from bench.common import Sizes
from bench.storage import Store

Figures = dict[str, float]
Workload = Callable[[ModuleType, Store, Sizes, str], Figures]

W6_MESSAGE_BYTES = common.MESSAGE_BYTES

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "w5_child.py")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and its wall time in milliseconds, after a collection so garbage from setup is not charged."""
    gc.collect()
    start = time.perf_counter()
    result = fn()
    return result, 1e3 * (time.perf_counter() - start)


def w1_loop(engine: ModuleType, store: Store, sizes: Sizes, tmpdir: str) -> Figures:
    """W1 (W7 when the store is ``none``): one node looping on itself, tiny state. Time per super-step."""
    steps = sizes.w1_steps
    app = engine.build_loop(store, steps)
    try:
        out, ms = _timed(lambda: app.invoke(common.loop_inputs(steps), "w1"))
    finally:
        app.close()
    assert out["n"] == steps, f"W1 ended at n={out['n']}, expected {steps}"
    return {"ms_per_step": ms / steps}


def w2_messages(engine: ModuleType, store: Store, sizes: Sizes, tmpdir: str) -> Figures:
    """W2: append a 1 KiB message per step. Time per step (all, first and last window) and bytes stored."""
    steps = sizes.w2_steps
    clock = common.StepClock()
    app = engine.build_messages(store, steps, common.MESSAGE_BYTES, clock)
    try:
        out, ms = _timed(lambda: app.invoke(common.messages_inputs(steps), "w2"))
    finally:
        app.close()
    assert out["n"] == steps and len(out["messages"]) == steps, "W2 lost or repeated messages"
    first, last = clock.window_ms(sizes.w2_window)
    figures = {"ms_per_step": ms / steps, "first_ms": first, "last_ms": last, "last_over_first": last / first}
    message_bytes = steps * common.MESSAGE_BYTES
    disk, payload = storage.disk_bytes(store), storage.payload_bytes(store)
    if disk is not None and payload is not None:
        figures |= {
            "disk_bytes": disk,
            "payload_bytes": payload,
            "disk_over_messages": disk / message_bytes,
            "payload_over_messages": payload / message_bytes,
        }
    return figures


def w2_quiet(engine: ModuleType, store: Store, sizes: Sizes, tmpdir: str) -> Figures:
    """W2Q: W2 on savers made with ``events=False`` (no durable event log of the steps); graphckpt only."""
    return w2_messages(engine, dataclasses.replace(store, events=False), sizes, tmpdir)


def w3_fanout(engine: ModuleType, store: Store, sizes: Sizes, tmpdir: str) -> Figures:
    """W3: 16 parallel nodes and a join, repeated. Time per super-step (three per iteration)."""
    iterations = sizes.w3_iterations
    app = engine.build_fanout(store, iterations)
    try:
        out, ms = _timed(lambda: app.invoke(common.fanout_inputs(iterations), "w3"))
    finally:
        app.close()
    assert out["j"] == iterations and all(out[k] == iterations for k in common.WORKER_KEYS), "W3 wrong final state"
    return {"ms_per_step": ms / (3 * iterations)}


def w4_history(engine: ModuleType, store: Store, sizes: Sizes, tmpdir: str) -> Figures:
    """W4: list the whole history of a 1,000-step thread; read the state at random past checkpoints of a W2 thread."""
    steps = sizes.w4_steps
    app = engine.build_loop(store, steps)
    try:
        app.invoke(common.loop_inputs(steps), "w4-list")
        history, list_ms = _timed(lambda: app.history("w4-list"))
    finally:
        app.close()
    assert len(history) >= steps, f"W4 history has {len(history)} checkpoints, expected at least {steps}"

    read_steps = sizes.w4_read_steps
    app = engine.build_messages(store, read_steps)
    try:
        app.invoke(common.messages_inputs(read_steps), "w4-read")
        by_n: dict[int, Any] = {}
        for snap in app.history("w4-read"):
            by_n.setdefault(app.values(snap).get("n"), app.ref(snap))
        picks = random.Random(5).sample(range(1, read_steps), min(sizes.w4_reads, read_steps - 1))
        reads = []
        for n in picks:
            snap, ms = _timed(lambda n=n: app.get_state("w4-read", by_n[n]))
            values = app.values(snap)
            assert values["n"] == n and len(values["messages"]) == n, f"W4 get_state at n={n} read {values['n']}"
            reads.append(ms)
    finally:
        app.close()
    return {"list_ms": list_ms, "checkpoints": len(history), "get_state_ms": statistics.median(reads)}


def _child(engine: ModuleType, store: Store, steps: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        CHILD,
        "--engine",
        engine.NAME,
        "--store",
        json.dumps(dataclasses.asdict(store)),
        "--steps",
        str(steps),
        *extra,
    ]


W5_LEASE = 0.2
"""Seconds: the lease of W5's killed run (see :func:`w5_crash_resume`)."""


def w5_crash_resume(engine: ModuleType, store: Store, sizes: Sizes, tmpdir: str, graph: str = "messages") -> Figures:
    """W5: SIGKILL a run mid-way, then time a fresh process from spawn to its first resumed super-step."""
    steps, kill_at = sizes.w5_steps, sizes.w5_kill_at
    build = engine.build_chat if graph == "chat" else engine.build_messages
    reference = build(None, steps, common.W5_MESSAGE_BYTES)
    try:
        expected = reference.invoke(common.messages_inputs(steps), "w5-reference")
    finally:
        reference.close()

    pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    # graphckpt's killed run holds a lease on the thread until it expires: a short one, waited out before the resume
    # is spawned (its expiry is a wall-clock time, so after the wait the thread is crashed, hence resumable)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*pythonpath, REPO]), "GRAPHCKPT_LEASE_SECONDS": str(W5_LEASE)}
    killed = subprocess.run(
        _child(engine, store, steps, "--graph", graph, "--kill-at", str(kill_at)),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, f"W5 first run was not killed: rc={killed.returncode} {killed.stderr}"
    time.sleep(W5_LEASE * 1.5)

    marker = os.path.join(tmpdir, f"w5-marker-{os.getpid()}-{time.monotonic_ns()}")
    cmd = _child(engine, store, steps, "--graph", graph, "--resume", "--marker", marker)
    spawned = time.time()
    resumed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    finished = time.time()
    assert resumed.returncode == 0, f"W5 resume failed: {resumed.stderr[-2000:]}"
    with open(marker) as f:
        first_step, cpu_to_first_step = map(float, f.read().split())
    os.remove(marker)
    final = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert final == expected, f"W5 resumed state differs from an uninterrupted run: n={final.get('n')}"

    python_start = _python_start_ms(env)
    return {
        "start_to_first_step_ms": 1e3 * (first_step - spawned),
        "start_to_first_step_cpu_ms": 1e3 * cpu_to_first_step,  # the child's own CPU time: less sensitive to load
        "resume_total_ms": 1e3 * (finished - spawned),
        "python_start_ms": python_start,
    }


def w5_chat_crash_resume(engine: ModuleType, store: Store, sizes: Sizes, tmpdir: str) -> Figures:
    """W5C: W5 on a ``chat_node`` graph (offline model, every call journaled); graphckpt only. The child imports
    ``nodes`` on the measured path, so an eager import there (``openai``: ~0.6 s) shows as a missed target."""
    return w5_crash_resume(engine, store, sizes, tmpdir, graph="chat")


def _python_start_ms(env: dict[str, str]) -> float:
    """Spawn-to-first-statement time of a bare interpreter, for reference."""
    spawned = time.time()
    out = subprocess.run(
        [sys.executable, "-c", "import time; print(time.time())"], env=env, capture_output=True, text=True, timeout=60
    )
    return 1e3 * (float(out.stdout) - spawned)


def w6_fork(engine: ModuleType, store: Store, sizes: Sizes, tmpdir: str) -> Figures:
    """W6: fork a 500-step thread at step 250, run 10 more steps; time of finding and forking (one fork, cold, right
    after a collection: the target's figure; then the median of repeated forks, warm), bytes added."""
    steps, fork_at, more = sizes.w6_steps, sizes.w6_fork_at, sizes.w6_more
    app = engine.build_messages(store, steps, W6_MESSAGE_BYTES)
    try:
        app.invoke(common.messages_inputs(steps), "w6")

        def find() -> Any:
            return next(app.ref(s) for s in app.history("w6") if app.values(s).get("n") == fork_at)

        ref, find_ms = _timed(find)
        before = storage.payload_bytes(store)
        fork, fork_ms = _timed(lambda: app.fork("w6", ref, {"stop": fork_at + more}, "w6-fork"))
        after_fork = storage.payload_bytes(store)
        out, more_ms = _timed(lambda: app.resume(fork))
        after_more = storage.payload_bytes(store)
        warm = []  # context for the cold figure above: the same fork repeated back to back in a warm process
        for i in range(sizes.w6_warm_forks):
            started = time.perf_counter()
            app.fork("w6", ref, {"stop": fork_at + more}, f"w6-warm-{i}")
            warm.append(1e3 * (time.perf_counter() - started))
    finally:
        app.close()
    assert out["n"] == fork_at + more and len(out["messages"]) == fork_at + more, f"W6 fork ended at n={out['n']}"
    figures = {"find_ms": find_ms, "fork_ms": fork_ms, "more_ms_per_step": more_ms / more}
    if warm:
        figures["fork_warm_ms"] = statistics.median(warm)
    if before is not None and after_fork is not None and after_more is not None:
        figures |= {"fork_bytes": after_fork - before, "more_bytes_per_step": (after_more - after_fork) / more}
    return figures


WORKLOADS: dict[str, Workload] = {
    "W1": w1_loop,
    "W2": w2_messages,
    "W2Q": w2_quiet,
    "W3": w3_fanout,
    "W4": w4_history,
    "W5": w5_crash_resume,
    "W5C": w5_chat_crash_resume,
    "W6": w6_fork,
    "W7": w1_loop,
}
"""Workload name -> driver. W7 is W1 run without a saver; W5C is W5 on a ``chat_node`` graph; W2Q is W2 without the
event log."""

ENGINES_OF: dict[str, tuple[str, ...]] = {"W5C": ("graphckpt",), "W2Q": ("graphckpt",)}
"""Workloads only some engines have (the ready-made nodes are graphckpt's); every other workload runs on all."""
