"""Subgraphs: a compiled graph (an :class:`~graphckpt.app.App`) used as a node of another graph,
``builder.add_node("sub", child_app)``. The node (:class:`SubgraphNode`) keeps the child's compiled graph and codec,
and the engine runs it inside the parent's run (:class:`~graphckpt.engine.RunsInParent`).

**State.** The child reads the parent's state fields it declares (a ``Send`` payload instead, when the task has one)
as its input; when it is done, its final values of the fields the parent also has (the child's ``output_schema``'s,
when it has one) are the parent node's update, applied through the parent's reducers, as in LangGraph.

**Storage.** Each task of a subgraph node runs the child graph as its own thread in the *parent's* saver (the child
app's saver is not used), with the child's schema: no saver schema change. The child thread's id derives from the
parent's thread, the planning checkpoint and the task (:func:`child_thread_id`: ``"{parent}|{node}:{task_id}"``, the
task id holding the checkpoint id), so a re-run of the task (after a crash, a failure or with an answer) finds the
same child thread and continues it from its head: finished inner steps do not run again. Every checkpoint of a child
thread carries ``metadata["subgraph"]`` (:data:`LINK`: the parent's thread, checkpoint, task, node and the whole
namespace), which hides it from ``App.threads`` and lets history, ``get_state`` and ``diff`` find and decode it.

**The parent task's own journal** (its pending writes) holds what must survive the parent's crash: effect
:data:`PARENT_COMMAND` is a ``Command(graph=Command.PARENT)`` a child node returned, and effect ``ASKED + j`` names the
child interrupt the parent's interrupt ``j`` stands for (so an answer reaches that one, and only once).

**Interrupts.** A child stopped by interrupts stops the parent task with as many interrupts of the parent (the
child's payloads): the parent thread is ``interrupted``; once they are answered (``resume(parent, answer)`` /
``Command(resume={id: answer, ...})``) the parent task runs again, hands the answers to the child and resumes it
from inside.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from graphckpt import begin
from graphckpt.codec import Codec
from graphckpt.context import Context, NodeInterrupt
from graphckpt.control import Command, ParentCommand, Send
from graphckpt.errors import CorruptCheckpointError, GraphckptError
from graphckpt.records import NO_ANSWER
from graphckpt.savers.waits import WaitTable
from graphckpt.serde import Serializer, types_in
from graphckpt.store import ThreadStore
from graphckpt.sync import InlineRunner

if TYPE_CHECKING:
    from graphckpt.checkpoint import Snapshot, Task
    from graphckpt.compiled import CompiledGraph
    from graphckpt.engine import Run, Step
    from graphckpt.savers.base import Saver, ThreadRecord

__all__ = [
    "ASKED",
    "LINK",
    "PARENT_COMMAND",
    "SEPARATOR",
    "SubEvent",
    "SubgraphNode",
    "child_thread_id",
    "codec_for",
    "level_for",
    "link_of",
    "store_for",
    "subgraph_heads",
    "subgraph_threads",
    "with_subgraphs",
]

SEPARATOR = "|"
"""Between a parent thread's id and a child's namespace entry in a child thread's id."""
LINK = "subgraph"
"""The metadata key of a child thread's checkpoints: ``{"thread_id", "checkpoint_id", "task_id", "node", "ns"}``."""
PARENT_COMMAND = 0
"""Effect index, in the parent task's journal, of a ``Command(graph=Command.PARENT)`` returned inside the child."""
ASKED = 1
"""Effect index ``ASKED + j``, in the parent task's journal: the child interrupt the parent's interrupt ``j`` stands
for (``[child checkpoint id, child task id, index]``)."""


def child_thread_id(parent_thread_id: str, node: str, task_id: str) -> str:
    """The thread a subgraph task of ``parent_thread_id`` runs on (the same for every re-run of the task)."""
    return f"{parent_thread_id}{SEPARATOR}{node}:{task_id}"


def link_of(metadata: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The parent link of a child thread's checkpoint metadata; ``None`` for a thread of its own (and for a row
    whose stored metadata does not parse: a tampered database's reading commands show it, they do not fail)."""
    try:
        link = metadata.get(LINK) if isinstance(metadata, Mapping) else None
    except CorruptCheckpointError:
        return None
    return link if isinstance(link, Mapping) else None


@dataclass(frozen=True, slots=True)
class SubEvent:
    """What a subgraph run shows a stream of its parent: a committed child step or an ephemeral child event, with
    the child's namespace and what it takes to render the step (its graph and store)."""

    namespace: tuple[str, ...]
    item: Step | tuple[str, Any]
    graph: CompiledGraph
    store: ThreadStore


class SubgraphNode:
    """The node function of ``add_node(name, child_app)``: the child's compiled ``graph`` and ``codec``. The engine
    runs it inside the parent's run (:meth:`run_in`): the child graph runs on its child thread (see the module
    docstring) and its output is the node's update, or the command a child node sent to the parent."""

    def __init__(self, name: str, graph: CompiledGraph, codec: Codec) -> None:
        self.name, self.graph, self.codec = name, graph, codec
        self.runner = InlineRunner({})
        """How the child's sync nodes are called (their durations measured apart from the parent's nodes)."""
        self.__name__ = name

    async def __call__(self, state: Any, ctx: Context) -> Any:
        """A subgraph runs only inside its parent's run (the engine calls :meth:`run_in`)."""
        raise GraphckptError(f"subgraph node {self.name!r} runs only as a node of its parent graph")

    async def run_in(self, parent: Run, task: Task, state: Any, ctx: Context) -> Any:
        """Run ``task`` of the parent run ``parent``: the child thread from its head, to its end or its stop."""
        found, sent = parent.journal.recorded_effect(task, PARENT_COMMAND)
        if found:
            return _command(sent)
        thread_id = child_thread_id(parent.thread_id, self.name, task.id)
        namespace = (*parent.namespace, f"{self.name}:{task.id}")
        store = ThreadStore(parent.store.saver, self.codec)
        options = begin.RunOptions(self.graph, store, parent.recursion_limit)
        options.configurable, options.context = parent.configurable, parent.context  # the parent run's, as LangGraph
        link = {
            "thread_id": parent.thread_id,
            "checkpoint_id": parent.head.cp.checkpoint_id,
            "task_id": task.id,
            "node": self.name,
            "ns": list(namespace),
        }
        extra = {LINK: link}
        runner, tags = self.runner, parent.tags
        while True:
            record = await store.get_thread(thread_id)
            if record is None:
                run = await begin.start(
                    options, self._input(state), thread_id, None, tags, runner, streamed=parent.streamed, extra=extra
                )
            elif record.status == "done":
                head, _ = await store.load_head(record)
                return self._output(head.values, parent)
            else:  # interrupted, or running (the parent crashed inside it), or failed: go on from the child's head
                answer = await self._answer(parent, task, store, record, thread_id)
                run = await begin.resume(
                    options, thread_id, answer, None, tags, runner, streamed=parent.streamed, extra=extra
                )
            run.namespace = namespace
            try:
                await _drive(run, parent, self.graph, store)
            except ParentCommand as sent_up:
                return await self._to_parent(parent, task, store, run, sent_up.command)
            if run.status != "interrupted":
                return self._output(run.head.values, parent)

    async def _answer(self, parent: Run, task: Task, store: ThreadStore, record: ThreadRecord, thread_id: str) -> Any:
        """What resuming the child takes: nothing when no interrupt of it is open; else the parent's answers to the
        parent interrupts that stand for the child's open ones (``{child interrupt id: answer}``), or, while one of
        them has no answer yet, the parent's interrupts carrying the child's questions (all at once).

        Parent interrupt ``j`` stands for the child interrupt noted in effect ``ASKED + j`` (its checkpoint, task
        and index; noted before the parent asks), so the same child question keeps its parent interrupt across
        re-runs, a new one gets a new index, and an answer reaches exactly the child interrupt it was given for. An
        answer the child has recorded closes its interrupt there: a re-run never hands it over twice."""
        journal = parent.journal
        head, recorded = await store.load_head(record)
        asked = recorded.open_interrupts(head.body.tasks)
        if record.status != "interrupted" and not asked:
            return NO_ANSWER  # running or failed: the child only needs resuming
        cp = head.cp.checkpoint_id
        # interrupt_before/after in the child: the checkpoint alone names it, and resuming needs no answer
        questions = [([cp, t.id, i], f"{t.id}:{i}", p) for t, i, p in asked] or [([cp, "", -1], "", None)]
        noted: list[Any] = []
        while (found := journal.recorded_effect(task, ASKED + len(noted)))[0]:
            noted.append(list(found[1]))
        mine: list[tuple[int, str, Any]] = []
        for which, child_id, payload in questions:
            if which not in noted:
                noted.append(which)
                await journal.record_effect(task, ASKED + len(noted) - 1, which)
            mine.append((noted.index(which), child_id, payload))
        answers = {child_id: journal.answer(task, j) for j, child_id, _ in mine}
        waiting = [(j, payload) for j, child_id, payload in mine if not answers[child_id][0]]
        if waiting:
            (first, question), *others = waiting
            raise NodeInterrupt(question, first, others, wait=await _held(store, head.cp.checkpoint_id, thread_id))
        if not asked:
            return NO_ANSWER
        return {child_id: value for child_id, (_, value) in answers.items()}

    async def _to_parent(self, parent: Run, task: Task, store: ThreadStore, run: Run, command: Command) -> Command:
        """Journal the command in the parent task (so a crash after this returns it again), then end the child."""
        goto = [[g.node, True, g.payload] if isinstance(g, Send) else [g, False, None] for g in command.targets()]
        sent = {"u": dict(command.update or {}), "g": goto}
        await parent.journal.record_effect(task, PARENT_COMMAND, sent)
        await store.record_writes(run.head.cp, [], run_id=run.run_id, status="done")
        return _command(sent)

    def _input(self, state: Any) -> dict[str, Any]:
        graph = self.graph
        fields = (graph.input_schema or graph.state).channels
        return {k: v for k, v in _as_dict(state).items() if k in fields}

    def _output(self, values: Mapping[str, Any], parent: Run) -> dict[str, Any]:
        """The child's final values of its output fields that the parent's state has too."""
        graph = self.graph
        fields, shared = (graph.output_schema or graph.state).channels, parent.codec.state.channels
        return {k: v for k, v in values.items() if k in fields and k in shared}


async def _held(store: ThreadStore, checkpoint_id: str, thread_id: str) -> tuple[None, float, Any] | None:
    """The durable wait the child thread stopped with at ``checkpoint_id`` (a ``ctx.sleep`` or an interrupt deadline
    in the subgraph), as the parent task's own: ``(None, wake-up time, the waker's answer)``. Its row is the record
    (the waker never fires a child's); the parent thread waits for the same time and, woken, hands the answer down."""
    saver = store.saver
    if not isinstance(saver, WaitTable):
        return None
    for wait in await saver.list_waits(thread_id=thread_id):
        if wait.checkpoint_id == checkpoint_id and wait.status != "fired":
            answer = store.codec.serde.loads(wait.answer) if wait.answer is not None else None
            if isinstance(answer, dict) and answer:  # {the child's interrupt ids: answer}: the parent's interrupts
                answer = next(iter(answer.values()))  # stand for those; the parent binds its own ids
            return None, wait.wake_at, answer
    return None


def _command(sent: Mapping[str, Any]) -> Command:
    goto: list[str | Send] = [Send(n, p) if is_send else n for n, is_send, p in sent["g"]]
    return Command(update=dict(sent["u"]), goto=goto)


def _as_dict(state: Any) -> dict[str, Any]:
    if isinstance(state, Mapping):
        return dict(state)
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
    fields = getattr(type(state), "model_fields", None)
    if fields is not None:
        return {k: getattr(state, k) for k in fields}
    raise TypeError(f"a subgraph's input must be a state or a mapping, not {type(state).__name__}")


async def _drive(run: Run, parent: Run, graph: CompiledGraph, store: ThreadStore) -> None:
    """Run the child to its end; a parent that is streamed sees its steps and events as :class:`SubEvent`."""
    if parent.listener is None:
        await run.drain()
        return
    namespace = run.namespace

    def forward(mode: str, payload: Any) -> None:
        if mode == "subgraph":  # a grandchild's, already wrapped with its whole namespace
            parent.emit(mode, payload)
        else:
            parent.emit("subgraph", SubEvent(namespace, (mode, payload), graph, store))

    run.listener = forward
    run.wanted = parent.wanted if "subgraph" in parent.wanted else frozenset()
    async for step in run.steps():
        parent.emit("subgraph", SubEvent(namespace, step, graph, store))


def codec_for(graph: CompiledGraph, snapshot_every: int) -> Codec:
    """The codec of ``graph``'s threads. Its serializer knows the types of the state, of each node's input (a
    ``Send`` payload may carry a model named nowhere else) and of its subgraphs' states (a subgraph's values become
    this graph's updates and journal entries)."""
    serde = Serializer()
    annotations = [c.annotation for c in graph.state.channels.values()] + _input_annotations(graph)
    for spec in graph.nodes.values():
        if isinstance(spec.fn, SubgraphNode):
            annotations += [c.annotation for c in spec.fn.graph.state.channels.values()]
    for annotation in annotations:
        for tp in types_in(annotation):
            serde.register(tp)
    return Codec(graph.state, serde, version=graph.version, snapshot_every=snapshot_every, migrations=graph.migrations)


def _input_annotations(graph: CompiledGraph) -> list[Any]:
    """The annotation of each node's first parameter."""
    found: list[Any] = []
    for spec in graph.nodes.values():
        try:
            params = list(inspect.signature(spec.fn).parameters.values())
            hints = typing.get_type_hints(spec.fn)
        except Exception:
            continue  # builtins, partials of C functions, unresolvable forward references: nothing to register
        if params and params[0].name in hints:
            found.append(hints[params[0].name])
    return found


# -- reading: finding and decoding child threads -------------------------------------------------------------------


async def subgraph_threads(saver: Saver, thread_ids: Sequence[str]) -> list[ThreadRecord]:
    """The child threads (at any depth) of the threads ``thread_ids``: one listing of the saver's threads."""
    prefixes = tuple(f"{t}{SEPARATOR}" for t in thread_ids)
    return [r for r in await saver.list_threads() if r.thread_id.startswith(prefixes) and link_of(r.metadata)]


async def subgraph_heads(
    saver: Saver,
    graph: CompiledGraph,
    snap: Snapshot,
    get_state: Callable[..., Awaitable[Snapshot]],
) -> dict[str, Snapshot]:
    """The heads (with their own subgraphs) of the child threads that ``snap``'s frontier's subgraph tasks have
    started, by task id: ``get_state(child_id, subgraphs=True)`` for each. ``graph`` runs the root threads."""
    level = level_for(graph, snap.namespace)
    if level is None:
        return {}
    heads: dict[str, Snapshot] = {}
    for task in snap.tasks:
        spec = level[0].nodes.get(task.node)
        if spec is None or not isinstance(spec.fn, SubgraphNode):
            continue
        child = child_thread_id(snap.thread_id, task.node, task.id)
        if await saver.get_thread(child) is not None:
            heads[task.id] = await get_state(child, subgraphs=True)
    return heads


def level_for(graph: CompiledGraph, namespace: Sequence[str]) -> tuple[CompiledGraph, Codec | None] | None:
    """The graph that runs the threads at ``namespace`` under ``graph``'s, with its codec (``None``: ``graph``'s own,
    for ``()``); ``None`` when there is no such subgraph."""
    codec: Codec | None = None
    for entry in namespace:
        spec = graph.nodes.get(str(entry).split(":", 1)[0])
        if spec is None or not isinstance(spec.fn, SubgraphNode):
            return None
        graph, codec = spec.fn.graph, spec.fn.codec
    return graph, codec


def store_for(store: ThreadStore, graph: CompiledGraph, namespace: Sequence[str]) -> ThreadStore | None:
    """The store (``store``'s saver, the subgraph's codec) that decodes a child thread at ``namespace`` of the
    threads that ``graph`` runs with ``store``; ``None`` when ``graph`` has no such subgraph."""
    level = level_for(graph, namespace)
    if level is None:
        return None
    return store if level[1] is None else ThreadStore(store.saver, level[1])


async def with_subgraphs(
    saver: Saver, snaps: list[Snapshot], history_of: Callable[[ThreadRecord], Awaitable[list[Snapshot]]]
) -> list[Snapshot]:
    """``snaps`` (a lineage, newest first) with the checkpoints of the child threads that ran its subgraph tasks,
    newest first (checkpoint ids sort by time). A child belongs when the checkpoint that planned its task is shown
    and the thread that ran the task is the one of the next checkpoint shown (the queried thread for the head)."""
    if not snaps:
        return snaps
    ran_by = {s.checkpoint_id: (snaps[i - 1].thread_id if i else snaps[0].thread_id) for i, s in enumerate(snaps)}
    out = list(snaps)
    for record in await subgraph_threads(saver, sorted({s.thread_id for s in snaps})):
        link = link_of(record.metadata)
        assert link is not None
        if len(link.get("ns", ())) != 1 + _depth(snaps[0]):
            continue  # a grandchild: its own child's history brings it
        if ran_by.get(str(link.get("checkpoint_id"))) != link.get("thread_id"):
            continue
        out += await history_of(record)
    out.sort(key=lambda s: s.checkpoint_id, reverse=True)
    return out


def _depth(snap: Snapshot) -> int:
    link = link_of(snap.metadata)
    return len(link.get("ns", ())) if link else 0
