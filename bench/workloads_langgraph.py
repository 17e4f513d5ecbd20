"""LangGraph side of the benchmark: builds the three graphs of :mod:`bench.common` with LangGraph and wraps them in
the small interface :mod:`bench.workloads` drives.

Savers are the ones a LangGraph user would pick, used the documented way: ``InMemorySaver``; the sync
``SqliteSaver`` on a connection set to ``journal_mode=WAL`` and ``synchronous=FULL`` (the same level graphckpt uses);
the sync ``PostgresSaver`` from ``from_conn_string``. Every run passes ``durability="sync"``, so a super-step's
checkpoint is durable before the next super-step starts.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from bench import common
from bench.storage import SQLITE_SYNCHRONOUS, Store

NAME = "langgraph"


class LoopState(TypedDict):
    n: int
    stop: int


class MessagesState(TypedDict):
    n: int
    stop: int
    messages: Annotated[list[str], operator.add]


FanoutState = TypedDict(  # type: ignore[misc]
    "FanoutState", {"i": int, "stop": int, "j": int, **dict.fromkeys(common.WORKER_KEYS, int)}
)


def version() -> str:
    """The versions measured; ImportError when a saver package of the ``bench`` extra is missing (the engine is then
    skipped with a note, instead of failing every run on that saver)."""
    from importlib.metadata import version as dist_version
    from importlib.util import find_spec

    missing = [name for name in ("langgraph.checkpoint.sqlite", "langgraph.checkpoint.postgres") if not find_spec(name)]
    if missing:
        raise ImportError(f"{', '.join(missing)} not installed (pip install -e '.[bench]')")

    return f"langgraph {dist_version('langgraph')}, langgraph-checkpoint {dist_version('langgraph-checkpoint')}"


class App:
    """A compiled LangGraph graph and the saver it owns."""

    def __init__(self, graph: Any, saver: Any, stack: contextlib.ExitStack, recursion_limit: int) -> None:
        self.graph = graph
        self.saver = saver
        self._stack = stack
        self._limit = recursion_limit
        self._kwargs: dict[str, Any] = {"durability": "sync"} if saver is not None else {}

    def _config(self, thread: Any) -> dict[str, Any]:
        if isinstance(thread, dict):
            return {**thread, "recursion_limit": self._limit}
        return {"configurable": {"thread_id": thread}, "recursion_limit": self._limit}

    def invoke(self, inputs: dict[str, Any], thread_id: str) -> dict[str, Any]:
        return dict(self.graph.invoke(inputs, self._config(thread_id), **self._kwargs))

    def resume(self, thread: Any) -> dict[str, Any]:
        """Continue ``thread`` (a thread id, or the config :meth:`fork` returned) from its last checkpoint."""
        return dict(self.graph.invoke(None, self._config(thread), **self._kwargs))

    def history(self, thread_id: str) -> list[Any]:
        """The thread's snapshots, newest first (what users call to list a thread)."""
        return list(self.graph.get_state_history(self._config(thread_id)))

    def get_state(self, thread_id: str, ref: Any) -> Any:
        """The snapshot at ``ref``, a past snapshot's ``config`` (thread and checkpoint id)."""
        del thread_id
        return self.graph.get_state(ref)

    def fork(self, thread_id: str, ref: Any, update: dict[str, Any], new_thread_id: str) -> Any:
        """LangGraph forks inside the thread: ``update_state`` on a past config adds a checkpoint whose parent is the
        past one; the returned config is the branch to resume."""
        del thread_id, new_thread_id
        return self.graph.update_state(ref, update)

    @staticmethod
    def ref(snapshot: Any) -> Any:
        return snapshot.config

    @staticmethod
    def values(snapshot: Any) -> dict[str, Any]:
        return dict(snapshot.values)

    def close(self) -> None:
        self._stack.close()


def _saver(store: Store | None, stack: contextlib.ExitStack) -> Any:
    if store is None or store.kind == "none":
        return None
    if store.kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        return InMemorySaver()
    if store.kind == "sqlite":
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        assert store.path is not None
        conn = stack.enter_context(contextlib.closing(sqlite3.connect(store.path, check_same_thread=False)))
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={SQLITE_SYNCHRONOUS}")
        saver = SqliteSaver(conn)
        saver.setup()
        return saver
    if store.kind == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        saver = stack.enter_context(PostgresSaver.from_conn_string(store.dsn_with_search_path()))
        saver.setup()
        return saver
    raise ValueError(f"unknown saver kind {store.kind!r}")


def _compile(builder: Any, store: Store | None, recursion_limit: int) -> App:
    stack = contextlib.ExitStack()
    try:
        saver = _saver(store, stack)
        return App(builder.compile(checkpointer=saver), saver, stack, recursion_limit)
    except BaseException:
        stack.close()
        raise


def build_loop(store: Store | None, steps: int) -> App:
    """W1/W4/W7: ``step`` loops on itself ``steps`` times."""
    g = StateGraph(LoopState)
    g.add_node("step", common.loop_step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", common.make_loop_router(END))
    return _compile(g, store, 2 * steps + 10)


def build_messages(
    store: Store | None, steps: int, size: int = common.MESSAGE_BYTES, on_step: Callable[[int], None] | None = None
) -> App:
    """W2/W4/W5/W6: ``step`` appends one ``size``-byte message per step."""
    g = StateGraph(MessagesState)
    g.add_node("step", common.make_message_step(size, on_step))
    g.add_edge(START, "step")
    g.add_conditional_edges("step", common.make_loop_router(END))
    return _compile(g, store, 2 * steps + 10)


def build_fanout(store: Store | None, iterations: int) -> App:
    """W3: ``fan`` -> 16 workers in parallel -> ``join`` -> ``fan`` ..., ``iterations`` times."""
    g = StateGraph(FanoutState)
    g.add_node("fan", common.fan)
    g.add_node("join", common.join)
    g.add_edge(START, "fan")
    for key in common.WORKER_KEYS:
        g.add_node(key, common.make_worker(key))
        g.add_edge("fan", key)
    g.add_edge(list(common.WORKER_KEYS), "join")
    g.add_conditional_edges("join", common.make_fanout_router(END))
    return _compile(g, store, 3 * iterations + 10)
