"""What both engines share: workload sizes, state field names, and the node and router code.

Node functions are defined once here and handed to both engines, so any difference in a measurement comes from the
engine and its saver, never from the work a node does. Nodes read the state as a mapping (both engines pass a dict
for a ``TypedDict`` schema) and return a partial update. Routers are built per engine only to return that engine's
``END`` sentinel.

Nothing here imports LangGraph or graphckpt: the W5 child process imports only the engine it measures.
"""

from __future__ import annotations

import dataclasses
import random
import string
import time
from collections.abc import Callable, Mapping
from typing import Any

MESSAGE_BYTES = 1024
"""Size of the message W2 (and W4's read thread, W6) appends per step."""
SQLITE_WAL_AHEAD = 4 * 1024 * 1024
"""Bytes of WAL the SQLite FLOOR variant writes ahead: ``SqliteSaver``'s default ``preallocate_wal``."""

W5_MESSAGE_BYTES = 32
"""W5 appends small messages: it measures start-up and resume, not serialization."""

FANOUT = 16
"""Number of parallel worker nodes in W3."""

WORKER_KEYS = tuple(f"v{k}" for k in range(FANOUT))
"""W3 state fields, one per worker, so parallel writes never touch the same channel."""

State = Mapping[str, Any]
Update = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Workload sizes. :data:`FULL` matches the performance targets; :data:`QUICK` is for the smoke test."""

    w1_steps: int = 1000
    w2_steps: int = 300
    w2_window: int = 50
    w3_iterations: int = 50
    w4_steps: int = 1000
    w4_read_steps: int = 300
    w4_reads: int = 20
    w5_steps: int = 500
    w5_kill_at: int = 250
    w6_steps: int = 500
    w6_fork_at: int = 250
    w6_more: int = 10
    w6_warm_forks: int = 15
    floor_commits: int = 1000
    floor_row_bytes: int = 256


FULL = Sizes()
QUICK = Sizes(
    w1_steps=20,
    w2_steps=12,
    w2_window=4,
    w3_iterations=3,
    w4_steps=20,
    w4_read_steps=10,
    w4_reads=3,
    w5_steps=12,
    w5_kill_at=6,
    w6_steps=12,
    w6_fork_at=6,
    w6_more=3,
    w6_warm_forks=2,
    floor_commits=20,
)


_ALPHABET = string.ascii_letters + string.digits + string.punctuation + " "


def message(n: int, size: int = MESSAGE_BYTES) -> str:
    """The deterministic ``size``-byte message appended at step ``n``: printable characters drawn at random (seeded
    by ``n``), so storage figures measure overhead, not how well a repeated character compresses."""
    head = f"msg {n:08d} "
    return head + "".join(random.Random(n).choices(_ALPHABET, k=size - len(head)))


# --- loop graph (W1, W4, W7): one node "step" looping on itself -----------------------------------------------------


def loop_inputs(stop: int) -> Update:
    """Input for a loop thread that runs ``stop`` steps."""
    return {"n": 0, "stop": stop}


def loop_step(state: State) -> Update:
    """Count one step."""
    return {"n": state["n"] + 1}


def make_loop_router(end: str) -> Callable[[State], str]:
    """Route ``step`` back to itself until ``n`` reaches ``stop``."""

    def route(state: State) -> str:
        return "step" if state["n"] < state["stop"] else end

    return route


# --- message graph (W2, W4 reads, W5, W6): "step" appends one message per step --------------------------------------


def messages_inputs(stop: int) -> Update:
    """Input for a message thread that runs ``stop`` steps."""
    return {"n": 0, "stop": stop, "messages": []}


def make_message_step(size: int = MESSAGE_BYTES, on_step: Callable[[int], None] | None = None) -> Callable[..., Update]:
    """A node appending ``message(n, size)``; ``on_step(n)`` runs first when given (step clock, W5 hooks)."""

    def step(state: State) -> Update:
        n = state["n"]
        if on_step is not None:
            on_step(n)
        return {"n": n + 1, "messages": [message(n, size)]}

    return step


class StepClock:
    """Records ``perf_counter()`` each time a node starts; step ``i`` took ``times[i + 1] - times[i]``."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __call__(self, _n: int) -> None:
        self.times.append(time.perf_counter())

    def window_ms(self, window: int) -> tuple[float, float]:
        """Mean milliseconds per step over the first and the last ``window`` steps."""
        gaps = [b - a for a, b in zip(self.times, self.times[1:], strict=False)]
        window = max(1, min(window, len(gaps) // 2))
        return 1e3 * sum(gaps[:window]) / window, 1e3 * sum(gaps[-window:]) / window


# --- fan-out graph (W3): fan -> 16 workers in parallel -> join -> fan ... --------------------------------------------


def fanout_inputs(stop: int) -> Update:
    """Input for a fan-out thread that runs ``stop`` iterations (three super-steps each)."""
    return {"i": 0, "stop": stop, "j": 0, **dict.fromkeys(WORKER_KEYS, 0)}


def fan(state: State) -> Update:
    """Start an iteration."""
    return {"i": state["i"] + 1}


def make_worker(key: str) -> Callable[[State], Update]:
    """A worker writing the iteration number to its own field."""

    def work(state: State) -> Update:
        return {key: state["i"]}

    return work


def join(state: State) -> Update:
    """Runs once all workers finished."""
    return {"j": state["i"]}


def make_fanout_router(end: str) -> Callable[[State], str]:
    """Route ``join`` back to ``fan`` until ``i`` reaches ``stop``."""

    def route(state: State) -> str:
        return "fan" if state["i"] < state["stop"] else end

    return route
