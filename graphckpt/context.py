"""What a node sees besides the state: ``ctx.effect``, ``ctx.interrupt``, ``ctx.idempotency_key``, usage reporting.

A node declared ``(state)`` reaches its task's context through :func:`interrupt` (LangGraph's spelling of
``ctx.interrupt``): creating a :class:`Context` makes it the current one of the asyncio task or worker-thread context
that goes on to call the node (a weak reference, so it dies with the attempt and never keeps a finished run alive).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from graphckpt import _hook, ids
from graphckpt.audit import CallInfo, call_info
from graphckpt.errors import GraphckptError
from graphckpt.waiting import TIMED_OUT, WOKE, OnTimeout, wait_payload, wake_time

if TYPE_CHECKING:
    from graphckpt.checkpoint import NodeUsage, Task
    from graphckpt.items import ScopedItems
    from graphckpt.node_store import NodeStore

__all__ = ["Context", "NodeInterrupt", "current_context", "get_stream_writer", "interrupt"]

_CURRENT_EFFECT: contextvars.ContextVar[tuple[Context, int] | None] = contextvars.ContextVar(
    "graphckpt_current_effect", default=None
)
"""The context and index of the effect whose function is running (see :attr:`Context.idempotency_key`)."""

_CURRENT: contextvars.ContextVar[weakref.ref[Context] | None] = contextvars.ContextVar(
    "graphckpt_current_context", default=None
)
"""The context of the attempt being run here (see :func:`current_context`)."""


class NodeInterrupt(BaseException):
    """Raised by ``ctx.interrupt`` to stop the node. A ``BaseException`` so that ``except Exception`` in node code
    does not swallow it; the engine catches it and marks the thread ``interrupted``."""

    def __init__(
        self,
        payload: Any,
        index: int,
        others: Sequence[tuple[int, Any]] = (),
        wait: tuple[int | None, float, Any] | None = None,
    ) -> None:
        super().__init__(payload)
        self.payload = payload
        self.index = index
        self.others = others
        """More interrupts open at once in the same task, ``(index, payload)`` (a subgraph's several questions)."""
        self.wait = wait
        """A durable wait: ``(effect index to journal the wake-up time at or None, wake-up time, waker's answer)``;
        the engine records it before the thread stops (see :mod:`graphckpt.waiting`)."""


class Journal(Protocol):
    """The engine side of a task's context."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...
    @property
    def thread_id(self) -> str: ...
    @property
    def step(self) -> int: ...
    @property
    def namespace(self) -> tuple[str, ...]: ...

    def emit(self, mode: str, payload: Any) -> None: ...
    def wants(self, mode: str) -> bool: ...
    def recorded_effect(self, task: Task, index: int) -> tuple[bool, Any]: ...
    async def start_call(self, task: Task, index: int, attempt: int, info: CallInfo, key: str) -> int: ...
    async def record_effect(
        self,
        task: Task,
        index: int,
        value: Any,
        *,
        seq: int = -1,
        ms: float = 0.0,
        info: CallInfo | None = None,
        requests: list[dict[str, Any]] | None = None,
    ) -> None: ...
    async def record_request(self, task: Task, entry: dict[str, Any]) -> None: ...
    async def call_failed(self, task: Task, seq: int, ms: float, exc: BaseException) -> None: ...
    def answer(self, task: Task, index: int) -> tuple[bool, Any]: ...
    def lease_fresh(self) -> bool: ...
    async def check_lease(self) -> None: ...
    async def hold(self, task: Task, index: int | None, wake_at: float, answers: dict[str, Any]) -> None: ...
    @property
    def items(self) -> ScopedItems: ...


class _Call:
    """A call under way: its start marker's number once written (``-1`` before), its clock, its HTTP attempts."""

    __slots__ = ("index", "info", "ok", "requests", "seq", "started")

    def __init__(self, index: int, info: CallInfo) -> None:
        self.index, self.info, self.seq, self.requests = index, info, -1, 0
        self.started = time.perf_counter()
        self.ok: list[dict[str, Any]] = []
        """The answering attempt's entry: written with the journal entry, in its transaction."""

    def ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000


REQUEST_OUTCOMES = ("ok", "http_error", "timeout", "connection_error", "error")
"""What an HTTP attempt of a call can come to (see :meth:`Context.record_request`)."""


class Context:
    """Passed as the second argument to nodes declared ``fn(state, ctx)``. One per attempt of a task."""

    def __init__(
        self,
        journal: Journal,
        task: Task,
        attempt: int,
        usage: NodeUsage,
        configurable: Mapping[str, Any] | None = None,
        context: Any = None,
    ) -> None:
        self._journal = journal
        self._configurable = configurable or {}
        self.context = context
        """The run's context (LangGraph's ``context=`` of a run, its ``Runtime.context``); ``None`` when none was
        given. Not stored: a run resumed later (after a crash, an interrupt) gets its own run's."""
        self._task = task
        self._effects = 0
        self._interrupts = 0
        self._usage = usage
        self._abandoned = False
        self._calls: dict[int, _Call] = {}
        self.attempt = attempt
        """1 for the first attempt, 2 for the first retry, ..."""
        _CURRENT.set(weakref.ref(self))  # the engine calls the node next, in this context or a copy of it

    @property
    def thread_id(self) -> str:
        return self._journal.thread_id

    @property
    def config(self) -> Mapping[str, Any]:
        """LangGraph's ``RunnableConfig`` as a node sees it: ``{"configurable": {..., "thread_id": ...}}`` with the
        run's ``configurable`` values (``config={"configurable": ...}`` of a server run); read-only."""
        return MappingProxyType({"configurable": {**self._configurable, "thread_id": self.thread_id}})

    @property
    def node(self) -> str:
        return self._task.node

    @property
    def task_id(self) -> str:
        return self._task.id

    @property
    def task(self) -> Task:
        """The task this attempt runs (its id, node and ``Send`` payload)."""
        return self._task

    @property
    def step(self) -> int:
        """The super-step this task belongs to."""
        return self._journal.step

    @property
    def namespace(self) -> tuple[str, ...]:
        """``()`` in a thread's own graph; inside a subgraph, ``"node:task_id"`` of each subgraph node from the root
        thread down (see :attr:`Snapshot.namespace`)."""
        return self._journal.namespace

    @property
    def store(self) -> NodeStore:
        """The long-term item store shared across threads (:class:`~graphckpt.node_store.NodeStore`): every call
        is a journaled effect, so a re-run of this task sees the same reads and repeats no write."""
        from graphckpt.node_store import NodeStore

        return NodeStore(self, self._journal.items, self._journal.loop)

    @property
    def idempotency_key(self) -> str:
        """``thread:task:n`` for the n-th effect of this task (the current one while an effect runs, else the next).

        The same on every re-run of the task, so an outside service can drop the duplicate of a call that was
        repeated because a crash fell between the call returning and its result being journaled."""
        current = _CURRENT_EFFECT.get()
        index = current[1] if current is not None and current[0] is self else self._effects
        return self._key(index)

    def _key(self, index: int) -> str:
        return f"{self.thread_id}:{self._task.id}:{index}"

    async def aeffect(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Call ``fn(*args, **kwargs)`` (sync or async) once per task, ever: its result is journaled before this
        returns, and every re-run of the task (resume, retry, resume after an interrupt) gets the journaled result
        without calling ``fn``. The result must be storable (plain data or schema types).

        Each call takes its index (call order) when it is made, so effects awaited concurrently (``asyncio.gather``)
        each have their own journal entry and idempotency key."""
        index = self._effects
        self._effects = index + 1
        found, value = self._journal.recorded_effect(self._task, index)
        tracing = _hook.TRACING
        if found:
            if tracing is not None:
                self._trace_replay(tracing, call_info(fn, args, kwargs), index, value)
            return value
        self._check_alive()
        if not self._journal.lease_fresh():  # paused past a heartbeat: still ours? (else LeaseLostError)
            await self._journal.check_lease()
        info = call_info(fn, args, kwargs)
        call = self._calls[index] = _Call(index, info)
        if not info.deferred_start:
            await self._start(call)
        span = tracing.call_span(info, self._key(index), replayed=False) if tracing is not None else None
        token = _CURRENT_EFFECT.set((self, index))
        try:
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:
            if tracing is not None:
                tracing.end_call(span, info, None, exc)
            if not self._abandoned and call.seq >= 0:  # never started: it failed before reaching anything
                await self._journal.call_failed(self._task, call.seq, call.ms(), exc)
            raise
        finally:
            _CURRENT_EFFECT.reset(token)
            self._calls.pop(index, None)
        if tracing is not None:
            tracing.end_call(span, info, value, None)
        self._check_alive()
        if call.seq < 0:  # a deferred start that was never signalled: started and finished now
            await self._start(call)
        ms = call.ms()
        await self._journal.record_effect(
            self._task, index, value, seq=call.seq, ms=ms, info=info, requests=call.ok or None
        )
        return value

    async def _start(self, call: _Call) -> None:
        call.seq = await self._journal.start_call(
            self._task, call.index, self.attempt, call.info, self._key(call.index)
        )
        call.started = time.perf_counter()

    def _current_call(self, what: str) -> _Call:
        current = _CURRENT_EFFECT.get()
        call = self._calls.get(current[1]) if current is not None and current[0] is self else None
        if call is None:
            raise GraphckptError(f"node {self.node!r}: {what} works only inside the function of a ctx.aeffect call")
        return call

    async def call_ready(self) -> None:
        """Inside the function of an effect described with ``deferred_start=True`` (see
        :func:`~graphckpt.audit.describe_call`): everything that can fail before the call leaves the process is done
        (imports, clients, the request), so its start marker is written now and its duration counted from here. A
        call that fails before this is not recorded as started. Does nothing the second time."""
        call = self._current_call("ctx.call_ready()")
        if call.seq < 0:
            self._check_alive()
            await self._start(call)

    async def record_request(
        self,
        outcome: str,
        *,
        status: int | None = None,
        usage: tuple[int, int] | None = None,
        ms: float = 0.0,
        error: str | None = None,
    ) -> None:
        """Record one HTTP attempt of the call running here (inside its ``ctx.aeffect`` function), each attempt its
        own audit entry: ``outcome`` is one of :data:`REQUEST_OUTCOMES` (``ok``: it answered, and its entry is
        written with the journal entry; any other is written at once, before a retry), ``status`` the HTTP status,
        ``usage`` ``(prompt_tokens, completion_tokens)`` when the server sent it (``None``: unknown, e.g. a request
        the client gave up on: the server may have billed it, the client never learns how much)."""
        if outcome not in REQUEST_OUTCOMES:
            raise ValueError(f"outcome must be one of {', '.join(REQUEST_OUTCOMES)}, not {outcome!r}")
        call = self._current_call("ctx.record_request()")
        if call.seq < 0:  # a request went out: the call started
            await self._start(call)
        call.requests += 1
        entry: dict[str, Any] = {
            "effect": call.index,
            "call": call.seq,
            "key": self._key(call.index),
            "request": call.requests,
            "outcome": outcome,
            "ms": round(float(ms), 3),
            "at": time.time(),
        }
        if status is not None:
            entry["status"] = int(status)
        if usage is not None:
            entry["usage"] = {"prompt_tokens": int(usage[0]), "completion_tokens": int(usage[1])}
        if error:
            entry["error"] = error
        if call.info.model is not None:
            entry["model"] = call.info.model
        if outcome == "ok":
            call.ok.append(entry)
        elif not self._abandoned:
            await self._journal.record_request(self._task, entry)

    def _trace_replay(self, tracing: _hook.Tracing, info: CallInfo, index: int, value: Any) -> None:
        """A span for a call the journal answered: marked replayed, with no token attributes."""
        tracing.end_call(tracing.call_span(info, self._key(index), replayed=True), info, value, None)

    def effect(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """:meth:`aeffect` for sync nodes (which run in worker threads). ``fn`` must be sync."""
        loop = self._journal.loop
        if _running_in(loop):
            raise GraphckptError(
                f"node {self.node!r}: ctx.effect() blocks, so it cannot be called on the event loop; "
                "use `await ctx.aeffect(...)` in async nodes"
            )
        index = self._effects
        self._effects = index + 1
        found, value = self._journal.recorded_effect(self._task, index)
        tracing = _hook.TRACING
        if found and tracing is not None:
            self._trace_replay(tracing, call_info(fn, args, kwargs), index, value)
        if not found:
            self._check_alive()
            if not self._journal.lease_fresh():  # paused past a heartbeat: still ours? (else LeaseLostError)
                asyncio.run_coroutine_threadsafe(self._journal.check_lease(), loop).result()
            info = call_info(fn, args, kwargs)
            start = self._journal.start_call(self._task, index, self.attempt, info, self._key(index))
            seq = asyncio.run_coroutine_threadsafe(start, loop).result()
            span = tracing.call_span(info, self._key(index), replayed=False) if tracing is not None else None
            token = _CURRENT_EFFECT.set((self, index))
            started = time.perf_counter()
            try:
                value = fn(*args, **kwargs)
            except Exception as exc:
                if tracing is not None:
                    tracing.end_call(span, info, None, exc)
                if not self._abandoned:
                    failed = self._journal.call_failed(self._task, seq, (time.perf_counter() - started) * 1000, exc)
                    asyncio.run_coroutine_threadsafe(failed, loop).result()
                raise
            finally:
                _CURRENT_EFFECT.reset(token)
            ms = (time.perf_counter() - started) * 1000
            if tracing is not None:
                tracing.end_call(span, info, value, None)
            if inspect.isawaitable(value):
                raise GraphckptError(f"node {self.node!r}: ctx.effect() got an async function; use ctx.aeffect()")
            self._check_alive()
            record = self._journal.record_effect(self._task, index, value, seq=seq, ms=ms, info=info)
            asyncio.run_coroutine_threadsafe(record, loop).result()
        return value

    def abandon(self) -> None:
        """Called by the engine when this attempt timed out or was cancelled while its code may still be running
        (a sync node in a worker thread cannot be stopped): from now on its effects neither run nor are recorded,
        so an effect can never run after its task failed, nor twice across a retry."""
        self._abandoned = True

    def _check_alive(self) -> None:
        if self._abandoned:
            raise GraphckptError(
                f"node {self.node!r}: this attempt was abandoned (timed out or cancelled); its effects do not run"
            )

    def interrupt(
        self,
        payload: Any = None,
        *,
        timeout: float | None = None,
        deadline: datetime | float | None = None,
        on_timeout: OnTimeout | None = None,
    ) -> Any:
        """Stop here and mark the thread ``interrupted`` with ``payload``. After ``resume(thread_id, answer)`` the
        task runs again and this call returns ``answer`` (effects journaled before it are not repeated).

        With ``timeout`` (seconds) or ``deadline`` (an aware datetime or epoch seconds) the thread waits at most that
        long: a worker wakes it at the deadline (see :mod:`graphckpt.waiting`) and ``on_timeout`` decides
        (:class:`~graphckpt.waiting.OnTimeout`: answer with a default, go to a node, or fail; default: fail)."""
        if timeout is None and deadline is None:
            index = self._interrupts
            self._interrupts += 1
            found, answer = self._journal.answer(self._task, index)
            if found:
                return answer
            raise NodeInterrupt(payload, index)
        wake, record = self._wake(wake_time(ids.now(), seconds=timeout, when=deadline))
        policy = on_timeout if on_timeout is not None else OnTimeout.fail()
        while True:  # woken before its deadline (a parallel task's earlier wait fired): ask again, a new interrupt
            index = self._interrupts
            self._interrupts += 1
            found, answer = self._journal.answer(self._task, index)
            if found and answer != TIMED_OUT:
                return answer
            if ids.now() >= wake:
                return policy.apply(self.node, wake)
            if not found:
                raise NodeInterrupt(payload, index, wait=(record, wake, TIMED_OUT))

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` durably: the thread stops ``interrupted`` (reads call it ``waiting``) holding no process
        or lease, and a worker resumes it at the time; this call then returns. Usable in sync and async nodes (it
        never blocks). The wake-up time is journaled: a re-run of the task waits for the same time."""
        self._sleep(wake_time(ids.now(), seconds=seconds))

    def wait_until(self, when: datetime | float) -> None:
        """:meth:`sleep` until ``when`` (an aware datetime, or seconds since the epoch)."""
        self._sleep(wake_time(ids.now(), when=when))

    def _wake(self, wake: float) -> tuple[float, int | None]:
        """The journaled wake-up time of this wait, and the effect index to journal it at (``None``: it is)."""
        index = self._effects
        self._effects = index + 1
        found, value = self._journal.recorded_effect(self._task, index)
        return (float(value), None) if found else (wake, index)

    def _sleep(self, wake: float) -> None:
        wake, record = self._wake(wake)
        while ids.now() < wake:  # answered before the time (an early resume): wait again, a new interrupt
            index = self._interrupts
            self._interrupts += 1
            if not self._journal.answer(self._task, index)[0]:
                raise NodeInterrupt(wait_payload("sleep", wake), index, wait=(record, wake, WOKE))

    def write(self, payload: Any) -> None:
        """Send ``payload`` to the readers of the run's ``custom`` stream (progress, partial results). Ephemeral: it
        is not stored, and a re-run of the task sends it again. Callable from sync nodes in their worker thread
        too; without a ``custom`` reader it is dropped."""
        self._journal.emit("custom", payload)

    @property
    def streams_messages(self) -> bool:
        """Whether a ``messages`` stream reads this run: a model call may then stream its answer and hand each piece
        to :meth:`stream_message` (it still journals the whole completion)."""
        return self._journal.wants("messages")

    def stream_message(self, piece: str, *, id: str | None = None) -> None:
        """Send a piece of a model's answer to the readers of the run's ``messages`` stream, as
        ``({"role": "assistant", "content": piece, "id": id}, metadata)`` (LangGraph's ``(message_chunk,
        metadata)``; the metadata names node, step, thread, task and namespace). Ephemeral, like :meth:`write`."""
        if not self._journal.wants("messages"):
            return
        chunk = {"role": "assistant", "content": piece, "id": id}
        metadata = {
            "langgraph_node": self.node,
            "langgraph_step": self.step,
            "thread_id": self.thread_id,
            "task_id": self.task_id,
            "langgraph_checkpoint_ns": "|".join(self.namespace),
        }
        self._journal.emit("messages", (chunk, metadata))

    def report_usage(self, model: str, prompt_tokens: int = 0, completion_tokens: int = 0) -> None:
        """Record a model call's usage; it lands in the checkpoint metadata under ``usage[node]``."""
        entry = self._usage
        entry["model"] = model
        entry["prompt_tokens"] = entry.get("prompt_tokens", 0) + int(prompt_tokens)
        entry["completion_tokens"] = entry.get("completion_tokens", 0) + int(completion_tokens)
        entry["calls"] = entry.get("calls", 0) + 1


def _running_in(loop: asyncio.AbstractEventLoop) -> bool:
    """On ``loop``'s thread, as a coroutine or callback of it (a sync node's worker thread has no running loop)."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def current_context() -> Context:
    """The :class:`Context` of the node running here, for code that was not handed one (a node declared
    ``(state)``, a helper it calls). Raises :class:`~graphckpt.errors.GraphckptError` outside a node."""
    ref = _CURRENT.get()
    ctx = ref() if ref is not None else None
    if ctx is None:
        raise GraphckptError(
            "interrupt() and current_context() work only inside a node while it runs (not in a router, nor outside "
            "a run)"
        )
    return ctx


def get_stream_writer() -> Callable[[Any], None]:
    """The ``custom`` stream writer of the node running here (:meth:`Context.write`), for nodes declared
    ``(state)`` (LangGraph's ``get_stream_writer``)."""
    return current_context().write


def interrupt(value: Any = None) -> Any:
    """``ctx.interrupt(value)`` for the node running here: stop the thread as ``interrupted`` with ``value``; after
    ``resume(thread_id, answer)`` the node runs again and this call returns ``answer``. Usable in a node declared
    ``(state)``, sync or async, and in the functions it calls."""
    return current_context().interrupt(value)
