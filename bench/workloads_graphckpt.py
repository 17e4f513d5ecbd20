"""graphckpt side of the benchmark: the same three graphs as :mod:`bench.workloads_langgraph`, built with graphckpt's
public API, behind the same small interface.

Savers: ``MemorySaver``; ``SqliteSaver(path, synchronous="FULL")`` (WAL, as LangGraph's); ``PostgresSaver(dsn,
schema=...)`` on the run's own schema. graphckpt commits each super-step's checkpoint before the next one starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from bench import common
from bench.storage import SQLITE_SYNCHRONOUS, Store
from graphckpt import END, START, StateGraph, append

NAME = "graphckpt"


class LoopState(TypedDict):
    n: int
    stop: int


class MessagesState(TypedDict):
    n: int
    stop: int
    messages: Annotated[list[str], append]


FanoutState = TypedDict(  # type: ignore[misc]
    "FanoutState", {"i": int, "stop": int, "j": int, **dict.fromkeys(common.WORKER_KEYS, int)}
)


def version() -> str:
    from importlib.metadata import version as dist_version

    return f"graphckpt {dist_version('graphckpt')}"


def _plain(values: Any) -> dict[str, Any]:
    if hasattr(values, "model_dump"):
        return dict(values.model_dump())
    return dict(values)


class App:
    """A compiled graphckpt app; it owns its saver and releases it in :meth:`close`."""

    def __init__(self, app: Any, recursion_limit: int) -> None:
        self.app = app
        self._limit = recursion_limit

    def invoke(self, inputs: dict[str, Any], thread_id: str) -> dict[str, Any]:
        return _plain(self.app.invoke(inputs, thread_id=thread_id, recursion_limit=self._limit).values)

    def resume(self, thread: Any) -> dict[str, Any]:
        return _plain(self.app.resume(thread, recursion_limit=self._limit).values)

    def history(self, thread_id: str) -> list[Any]:
        return list(self.app.history(thread_id, limit=None))

    def get_state(self, thread_id: str, ref: Any) -> Any:
        return self.app.get_state(thread_id, ref)

    def fork(self, thread_id: str, ref: Any, update: dict[str, Any], new_thread_id: str) -> Any:
        self.app.fork(thread_id, ref, update=update, new_thread_id=new_thread_id)
        return new_thread_id

    @staticmethod
    def ref(snapshot: Any) -> Any:
        return snapshot.checkpoint_id

    @staticmethod
    def values(snapshot: Any) -> dict[str, Any]:
        return _plain(snapshot.values)

    def close(self) -> None:
        self.app.close()


def _saver(store: Store | None) -> Any:
    if store is None or store.kind == "none":
        return None
    if store.kind == "memory":
        from graphckpt.savers.memory import MemorySaver

        return MemorySaver(events=store.events)
    if store.kind == "sqlite":
        from graphckpt.savers.sqlite import SqliteSaver

        return SqliteSaver(store.path, synchronous=SQLITE_SYNCHRONOUS, events=store.events)
    if store.kind == "postgres":
        from graphckpt.savers.postgres import PostgresSaver

        return PostgresSaver(store.dsn, schema=store.schema, events=store.events)
    raise ValueError(f"unknown saver kind {store.kind!r}")


def build_loop(store: Store | None, steps: int) -> App:
    """W1/W4/W7: ``step`` loops on itself ``steps`` times."""
    g = StateGraph(LoopState)
    g.add_node("step", common.loop_step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", common.make_loop_router(END))
    return App(g.compile(saver=_saver(store)), 2 * steps + 10)


def build_messages(
    store: Store | None, steps: int, size: int = common.MESSAGE_BYTES, on_step: Callable[[int], None] | None = None
) -> App:
    """W2/W4/W5/W6: ``step`` appends one ``size``-byte message per step."""
    g = StateGraph(MessagesState)
    g.add_node("step", common.make_message_step(size, on_step))
    g.add_edge(START, "step")
    g.add_conditional_edges("step", common.make_loop_router(END))
    return App(g.compile(saver=_saver(store)), 2 * steps + 10)


def build_chat(
    store: Store | None, steps: int, size: int = common.MESSAGE_BYTES, on_step: Callable[[int], None] | None = None
) -> App:
    """W5C: the W5 message loop with a ``chat_node`` (the offline model, journaled) making each step's message.

    ``size`` is ignored: the message is the model's answer. The ready-made nodes are imported here, so the W5C child
    process pays for ``import nodes`` inside the measured time, as a user's program does."""
    from nodes import chat_node

    chat = chat_node("Step {n}: say something.", output_key="answer", offline=True)

    async def step(state: MessagesState, ctx: Any) -> dict[str, Any]:
        n = state["n"]
        if on_step is not None:
            on_step(n)
        answer = (await chat(state, ctx))["answer"]
        return {"n": n + 1, "messages": [answer]}

    g = StateGraph(MessagesState)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", common.make_loop_router(END))
    return App(g.compile(saver=_saver(store)), 2 * steps + 10)


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
    return App(g.compile(saver=_saver(store)), 3 * iterations + 10)
