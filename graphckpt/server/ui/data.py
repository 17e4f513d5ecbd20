"""What the web UI reads and does, as plain records: :class:`UIBackend` (the seam) and :class:`LocalBackend`.

The handlers in :mod:`graphckpt.server.ui.routes` call only the methods of :class:`UIBackend` and render what they
return; no handler touches a saver or an :class:`~graphckpt.App` itself. :class:`LocalBackend` implements it over one
saver: reading goes through :class:`~graphckpt.reader.RawReader` (values as plain data, so every thread of the
database can be shown whether or not its graph code is loaded); running (fork, resume, answer) goes through the
:class:`~graphckpt.App` of the thread's graph, looked up by the ``MODULE:ATTR`` the thread records in its tags
(``tags.graph``, as ``graphckpt run`` and the demo record it). A thread whose graph is not loaded can be read, not run.

Every run the UI starts carries ``{"via": "ui", "ui_action": ...}`` in its checkpoints' tags (merged into the tags
the thread already had, so its recorded graph stays): the thread's audit record says who forked, resumed or
answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from graphckpt.app import App
from graphckpt.audit import Prices
from graphckpt.checkpoint import Snapshot, ThreadInfo
from graphckpt.compat._lgread import written_by_langgraph
from graphckpt.compiled import CompiledGraph
from graphckpt.diff import Change, Diff
from graphckpt.errors import GraphckptError, InvalidCursorError
from graphckpt.plain import (
    audit_of,
    duration_ms,
    graph_of,
    metadata_of,
    ran_nodes,
    source_of,
    thread_trees,
    to_jsonable,
    tokens,
)
from graphckpt.reader import RawReader
from graphckpt.records import NO_ANSWER
from graphckpt.savers.base import Saver
from graphckpt.server.ui.family import fork_family
from graphckpt.server.ui.filters import kept
from graphckpt.server.ui.liveness import liveness, pending_items
from graphckpt.server.ui.pages import CheckpointPage, InterruptItem, StepRow, ThreadRow, ThreadView
from graphckpt.server.ui.records import interrupt_record, pending_rows
from graphckpt.server.ui.thread_list import ThreadPage, walk_page
from graphckpt.server.ui.workbench import Comparison, Conversation, StepView, compare, conversation, step_view
from graphckpt.subgraph import SEPARATOR

__all__ = [
    "CheckpointPage",
    "InterruptItem",
    "LocalBackend",
    "StepRow",
    "ThreadPage",
    "ThreadRow",
    "ThreadView",
    "UIBackend",
    "UIError",
]

UI_TAG = "via"
"""The tag key that marks a run started from the UI (value ``"ui"``); ``ui_action`` says which action."""


RECORD = {
    "replayed": "replayed_ms",  # checkpoint metadata: {node: ms of the journaled calls replayed}
    "audit": "audit",  # checkpoint metadata: {calls: [...], attempts: [...], answers: [...]} (graphckpt.audit)
}
"""The names of the audit-record fields the UI reads, in one place (leases: :mod:`~graphckpt.server.ui.liveness`)."""


CLAIM_WAIT = 5.0
"""How long :meth:`LocalBackend.resume` waits (at most) for the run it started to claim the thread."""


class UIError(GraphckptError, ValueError):
    """A UI action that cannot be done as asked (a field that is not JSON, a thread whose graph is not loaded)."""


class UIBackend(Protocol):
    """What the UI's handlers need. The server may implement it over its own query layer (namespaces, tokens)."""

    async def thread_page(
        self, *, status: str | None, graph: str | None, q: str | None, after: str | None, per_page: int
    ) -> ThreadPage[ThreadRow]: ...

    async def thread_view(self, thread_id: str) -> ThreadView: ...

    async def created_thread(self, thread_id: str) -> Mapping[str, Any] | None: ...

    async def checkpoint_page(self, thread_id: str, checkpoint_id: str) -> CheckpointPage: ...

    async def checkpoints_of(self, thread_id: str) -> list[StepRow]: ...

    async def all_thread_ids(self) -> list[str]: ...

    async def diff(self, a: tuple[str, str | None], b: tuple[str, str | None]) -> Diff: ...

    async def inbox(self) -> list[InterruptItem]: ...

    async def fork_and_run(
        self, thread_id: str, checkpoint_id: str, update: Mapping[str, Any], new_thread_id: str | None
    ) -> str: ...

    async def resume(self, thread_id: str) -> None: ...

    async def answer(self, thread_id: str, interrupt_id: str, answer: Any) -> None: ...

    async def cancel(self, thread_id: str) -> None: ...

    async def step_view(self, thread_id: str, checkpoint_id: str) -> StepView: ...

    async def conversation(self, thread_id: str) -> Conversation | None: ...

    async def compare(self, a: str, b: str) -> Comparison: ...

    async def edit_message(
        self, thread_id: str, checkpoint_id: str, message_id: str, text: str, new_thread_id: str | None
    ) -> str: ...

    async def take_over(self, thread_id: str) -> None: ...


class LocalBackend:
    """:class:`UIBackend` over one saver and the apps of the graphs the server loaded (``apps``: graph id, i.e. the
    ``MODULE:ATTR`` threads record in ``tags.graph``, to the app). ``default_graph`` names the app used for threads
    that record no graph. Runs started by :meth:`resume`, :meth:`answer` and :meth:`fork_and_run` continue in the
    background (the action returns once the run claimed the thread; the thread's page follows it live)."""

    def __init__(
        self,
        saver: Saver,
        apps: Mapping[str, App] | None = None,
        *,
        default_graph: str | None = None,
        prices: Prices | None = None,
    ) -> None:
        self.reader = RawReader(saver)
        self.prices = prices if prices is not None else Prices.from_env()
        self.apps = {name: app.with_saver(saver) for name, app in (apps or {}).items()}
        self.default_graph = default_graph
        self._running: set[asyncio.Task[Any]] = set()

    # -- reading -----------------------------------------------------------------------------------------------------

    async def thread_page(
        self, *, status: str | None, graph: str | None, q: str | None, after: str | None, per_page: int
    ) -> ThreadPage[ThreadRow]:
        """One keyset page of the list (see :mod:`~graphckpt.server.ui.thread_list`): the status filtered in SQL,
        the graph, ``q`` and the namespace on the threads read."""

        def keep(info: ThreadInfo) -> bool:
            return self._mine(info.thread_id) and kept(info, status, graph, q)

        try:
            return await walk_page(
                self.reader.saver,
                status=status,
                after=after,
                per_page=per_page,
                keep=keep,
                searching=bool(graph or q),
                row=self._row,
                graphs=self.apps,
            )
        except InvalidCursorError as exc:
            raise UIError(f"after: {exc}") from None
        except ValueError as exc:  # a status the saver does not know
            raise UIError(f"status: {exc}") from None

    async def _infos(self, status: str | None = None) -> list[ThreadInfo]:
        """The threads this backend shows (every one of the saver; the server's backend keeps its namespace's)."""
        return await self.reader.athreads(status=status)  # type: ignore[arg-type]

    async def _row(self, info: ThreadInfo, own: Sequence[Snapshot] | None = None) -> ThreadRow:
        # (``own`` is not read here: the list's rows need no history, one read of the row and the spend each)
        record = await self.reader.store.thread(info.thread_id)
        lease = liveness(record)
        owner = self._owner(info.thread_id, record) or lease.owner
        spent = await self.reader.aspend(info.thread_id, prices=self.prices)
        total = spent.get("own", {})  # a fork's inherited tokens are its parent's row's (the spend has both)
        return ThreadRow(
            thread_id=info.thread_id,
            graph=graph_of(metadata_of(info)),
            status=info.status,
            owner=owner,
            step=info.step,
            tokens=int(total.get("tokens", 0)),
            cost=total.get("cost"),
            updated_at=info.updated_at,
            forked_from=f"{info.forked_from.thread_id}@{info.forked_from.checkpoint_id}" if info.forked_from else None,
            error=info.error,
            metadata=info.metadata,
            spend=spent,
            stopped=self._stopped(info.thread_id, info.status, metadata_of(info)),
            lease=lease,
            wake_at=info.wake_at,
        )

    async def _own(self, thread_id: str) -> list[Snapshot]:
        """The thread's own checkpoints (not its ancestors'), newest first."""
        return [s for s in await self.reader.ahistory(thread_id) if s.thread_id == thread_id]

    async def _family(self, info: ThreadInfo) -> tuple[ThreadInfo, list[ThreadInfo]]:
        return await fork_family(self.reader, info, self._mine)

    def _mine(self, thread_id: str) -> bool:
        """Whether this backend shows ``thread_id`` (every thread of the saver here; a namespace's on the server)."""
        return True

    async def all_thread_ids(self) -> list[str]:
        return [i.thread_id for i in await self._infos()]

    async def checkpoints_of(self, thread_id: str) -> list[StepRow]:
        return [_step_row(s, thread_id) for s in reversed(await self.reader.ahistory(thread_id))]

    async def thread_view(self, thread_id: str) -> ThreadView:
        info = await self.reader.athread(thread_id)
        history = await self.reader.ahistory(thread_id)
        head = await self.reader.aget_state(thread_id)
        own = [s for s in history if s.thread_id == thread_id]
        root, members = await self._family(info)  # indexed reads: the ancestors, then each member's forks
        owns = dict(
            zip(
                [i.thread_id for i in members],
                await asyncio.gather(*(self._own_oldest_first(i.thread_id) for i in members)),
                strict=True,
            )
        )
        tree = thread_trees(members, owns, root.thread_id)
        app = self._app_or_none(graph_of(metadata_of(info)))
        done: set[str] = set()
        for s in history:
            done.update(ran_nodes(metadata_of(s)))
        record = await self.reader.store.thread(thread_id)
        alive = liveness(record)
        in_flight = alive.live or self._cancellable(thread_id, info.status)
        pending: list[dict[str, Any]] = []
        if info.status != "done":
            pending = pending_items(await self.reader.aaudit(thread_id, prices=self.prices), in_flight)
        return ThreadView(
            info=info,
            row=await self._row(info, own),
            steps=[_step_row(s, thread_id) for s in reversed(history)],
            head=head,
            errors=[str(e) for e in head.errors],
            graph=app.graph if app is not None else None,
            done_nodes=done,
            tree=tree,
            runnable=app is not None,
            pending=pending,
            cancellable=self._cancellable(thread_id, info.status) and info.status in ("running", "crashed"),
            stopped=self._stopped(thread_id, info.status, metadata_of(head)),
        )

    async def created_thread(self, thread_id: str) -> Mapping[str, Any] | None:
        """A thread created without a checkpoint yet (``POST /threads``: the server's), else ``None``."""
        return None

    def _stopped(self, thread_id: str, status: str, head_metadata: Mapping[str, Any] | None) -> bool:
        """Whether a ``running`` thread is known to have no run going (a stand-alone UI cannot know that)."""
        return False

    def _owner(self, thread_id: str, record: Any) -> str | None:
        return None  # the lease's owner (liveness) unless this process runs it

    def _cancellable(self, thread_id: str, status: str) -> bool:
        """Whether :meth:`cancel` can stop a run of the thread (a stand-alone UI cannot: it runs no queue)."""
        return False

    async def _own_oldest_first(self, thread_id: str) -> list[Snapshot]:
        return list(reversed(await self._own(thread_id)))

    async def checkpoint_page(self, thread_id: str, checkpoint_id: str) -> CheckpointPage:
        info = await self.reader.athread(thread_id)
        graph_ref = graph_of(metadata_of(info))
        app = None if await written_by_langgraph(self.reader.store, thread_id) else self._app_or_none(graph_ref)
        reading: App | RawReader = app if app is not None else self.reader  # the schema fills defaults in
        snap = await reading.aget_state(thread_id, checkpoint_id)
        values = _plain(snap.values)
        changes: list[Change] = []
        if snap.parent is not None:
            before = await reading.aget_state(snap.parent.thread_id, snap.parent.checkpoint_id)
            changes = list((await reading.adiff(before, snap)).changes())
        stored = await self.reader.store.checkpoint(snap.thread_id, snap.checkpoint_id)
        recorded = await self.reader.store.recorded(stored, snap.tasks)
        is_head = info.head.checkpoint_id == snap.checkpoint_id and snap.thread_id == thread_id
        return CheckpointPage(
            snap=snap,
            values=values,
            changes=changes,
            parent=f"{snap.parent.thread_id}@{snap.parent.checkpoint_id}" if snap.parent else None,
            tasks=[
                {"id": t.id, "node": t.node, "payload": to_jsonable(t.payload) if t.has_payload else None}
                for t in snap.tasks
            ],
            interrupts=[interrupt_record(i) for i in snap.interrupts],
            pending=pending_rows(recorded),
            metadata=_plain(dict(metadata_of(snap) or {})),
            is_head=is_head,
            status=info.status if is_head else snap.status,
            runnable=app is not None,
            graph_ref=graph_ref,
            nodes=list(app.graph.nodes) if app is not None else [],
            audit=audit_of(metadata_of(snap)),
            replayed=_step_row(snap, thread_id).replayed,
            cancellable=is_head and self._cancellable(thread_id, info.status),
        )

    async def diff(self, a: tuple[str, str | None], b: tuple[str, str | None]) -> Diff:
        """Through the graph's schema when both threads record the same loaded graph (a field at its default is a
        value, not a missing one), else schema-free."""
        ga, gb = [graph_of(metadata_of(await self.reader.athread(t))) for t, _ in (a, b)]
        app = self._app_or_none(ga) if ga == gb and not await written_by_langgraph(self.reader.store, a[0]) else None
        return await (app.adiff(a, b) if app is not None else self.reader.adiff(a, b))

    async def inbox(self) -> list[InterruptItem]:
        """The open interrupts, the longest waiting first, each with its deadline when a durable wait has one."""
        items: list[InterruptItem] = []
        waits = {(w.thread_id, w.checkpoint_id): w.wake_at for w in await self._pending_waits()}
        for info in await self._infos("interrupted"):
            head = await self.reader.aget_state(info.thread_id)
            wake = waits.get((info.thread_id, head.checkpoint_id))
            runnable = self._app_or_none(graph_of(metadata_of(info))) is not None
            for it in head.interrupts:
                payload = to_jsonable(it.payload)
                fields = payload if isinstance(payload, dict) else {}
                items.append(
                    InterruptItem(
                        thread_id=info.thread_id,
                        checkpoint_id=head.checkpoint_id,
                        interrupt=it,
                        payload=payload,
                        question=_text(fields.get("question")) or (payload if isinstance(payload, str) else None),
                        error=_text(fields.get("error")),
                        expects=_text(fields.get("expects")),
                        approval="approved" in str(fields.get("expects", "")) or fields.get("key") == "approved",
                        runnable=runnable,
                        waiting_since=head.created_at,
                        deadline=dt.datetime.fromtimestamp(wake, dt.UTC) if wake is not None else None,
                    )
                )
        items.sort(key=lambda i: (i.waiting_since or dt.datetime.max.replace(tzinfo=dt.UTC), i.thread_id))
        return items

    async def _pending_waits(self) -> list[Any]:
        """The saver's pending durable waits (none for a saver without a waits table)."""
        list_waits = getattr(self.reader.store.saver, "list_waits", None)
        if list_waits is None:
            return []
        try:
            found: list[Any] = await list_waits(status="pending")
        except NotImplementedError:
            return []
        return found

    # -- running ------------------------------------------------------------------------------------------------------

    def _app_or_none(self, graph_ref: str | None) -> App | None:
        if graph_ref is None:
            return self.apps.get(self.default_graph) if self.default_graph is not None else None
        return self.apps.get(graph_ref)

    async def _app_for(self, thread_id: str, action: str) -> tuple[App, dict[str, Any]]:
        """The app that runs ``thread_id`` and the tags a UI ``action`` on it records."""
        head = await self.reader.aget_state(thread_id)
        found = (metadata_of(head) or {}).get("tags")
        recorded: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        ref = graph_of(metadata_of(head))
        app = self._app_or_none(ref)
        if app is None:
            loaded = ", ".join(sorted(self.apps)) or "none"
            raise UIError(
                f"cannot {action} thread {thread_id!r}: its graph {ref or '(none recorded)'} is not loaded by this "
                f"server (loaded: {loaded})"
            )
        return app, {**recorded, UI_TAG: "ui", "ui_action": action}

    async def fork_and_run(
        self, thread_id: str, checkpoint_id: str, update: Mapping[str, Any], new_thread_id: str | None
    ) -> str:
        app, tags = await self._app_for(thread_id, "fork")
        source = await self.reader.aget_state(thread_id, checkpoint_id)
        recorded = (metadata_of(source) or {}).get("tags")
        tags = {**(recorded if isinstance(recorded, Mapping) else {}), **tags}
        snap = await app.afork(thread_id, checkpoint_id, update=update or None, new_thread_id=new_thread_id, tags=tags)
        self._background(app.aresume(snap.thread_id, tags=tags))  # the new branch's page (running) follows it
        return snap.thread_id

    def _background(self, run: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(_run_quietly(run))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return task

    async def _until_claimed(self, thread_id: str, before: ThreadInfo, task: asyncio.Task[Any]) -> None:
        """Wait (at most :data:`CLAIM_WAIT`) until the run ``task`` claimed the thread or ended."""
        deadline = asyncio.get_running_loop().time() + CLAIM_WAIT
        while not task.done() and asyncio.get_running_loop().time() < deadline:
            now = await self.reader.athread(thread_id)
            if now.status != before.status or now.head != before.head:
                break
            await asyncio.sleep(0.01)

    async def resume(self, thread_id: str) -> None:
        await self._resume(thread_id, "resume")

    async def _resume(self, thread_id: str, action: str) -> None:
        app, tags = await self._app_for(thread_id, action)
        before = await self.reader.athread(thread_id)
        # the page shown next must see the run (status running, or its outcome), else it would not follow it
        await self._until_claimed(thread_id, before, self._background(app.aresume(thread_id, tags=tags)))

    async def answer(self, thread_id: str, interrupt_id: str, answer: Any) -> None:
        """Answer the open interrupt ``interrupt_id`` and run the thread on (``NO_ANSWER``: just continue)."""
        app, tags = await self._app_for(thread_id, "answer")
        head = await self.reader.aget_state(thread_id)
        ids = [i.id for i in head.interrupts]
        if interrupt_id not in ids:
            raise UIError(
                f"thread {thread_id!r} has no open interrupt {interrupt_id!r} (open: {', '.join(ids) or 'none'})"
            )
        before = await self.reader.athread(thread_id)
        if answer is NO_ANSWER:  # a stop before/after a node: continue, nothing to answer
            run = app.aresume(thread_id, tags=tags)
        else:
            run = app.aresume(thread_id, {interrupt_id: answer}, tags=tags)  # this interrupt's, or refused
        await self._until_claimed(thread_id, before, self._background(run))

    # -- the workbench: a step, a conversation, two branches, a take-over ----------------------------------------------

    def _check(self, thread_id: str) -> None:
        """Refuse (404) a thread this backend does not show (every thread shows here; the server's namespaces)."""

    async def _graph_for(self, thread_id: str) -> CompiledGraph | None:
        """The loaded graph of ``thread_id`` (a subgraph's child thread: its root thread's graph)."""
        root = thread_id.split(SEPARATOR, 1)[0]
        app = self._app_or_none(graph_of(metadata_of(await self.reader.athread(root))))
        return app.graph if app is not None else None

    async def step_view(self, thread_id: str, checkpoint_id: str) -> StepView:
        self._check(thread_id)
        graph = await self._graph_for(thread_id)
        return await step_view(self.reader, thread_id, checkpoint_id, graph=graph, prices=self.prices, differ=self.diff)

    async def _reading(self, thread_id: str) -> App | RawReader:
        """The thread's app when its graph is loaded (its schema folds values: defaults, message ids), else raw."""
        info = await self.reader.athread(thread_id)
        if await written_by_langgraph(self.reader.store, thread_id):
            return self.reader
        app = self._app_or_none(graph_of(metadata_of(info)))
        return app if app is not None else self.reader

    async def conversation(self, thread_id: str) -> Conversation | None:
        self._check(thread_id)
        return await conversation(await self._reading(thread_id), thread_id)

    async def compare(self, a: str, b: str) -> Comparison:
        self._check(a)
        self._check(b)
        return await compare(self.reader, a, b, self.diff)

    async def edit_message(
        self, thread_id: str, checkpoint_id: str, message_id: str, text: str, new_thread_id: str | None
    ) -> str:
        """Fork ``thread_id`` at ``checkpoint_id`` with message ``message_id``'s content replaced by ``text`` (the
        ``messages`` reducer replaces a message by its id), then run the new branch."""
        self._check(thread_id)
        snap = await (await self._reading(thread_id)).aget_state(thread_id, checkpoint_id)
        values = to_jsonable(snap.values)
        found = values.get("messages") if isinstance(values, Mapping) else None
        old = next((m for m in found or [] if isinstance(m, Mapping) and str(m.get("id")) == message_id), None)
        if old is None:
            raise UIError(f"checkpoint {checkpoint_id!r} of thread {thread_id!r} holds no message {message_id!r}")
        if not text.strip():
            raise UIError("field 'content': the edited message is empty")
        edited = {**old, "content": text.replace("\r\n", "\n")}
        return await self.fork_and_run(thread_id, checkpoint_id, {"messages": [edited]}, new_thread_id)

    async def take_over(self, thread_id: str) -> None:
        """Resume a ``crashed`` thread (its owner gone or its lease expired): the claim takes its lease over."""
        self._check(thread_id)
        info = await self.reader.athread(thread_id)
        if self._cancellable(thread_id, info.status):  # this server's recovery took it over first: done
            return
        alive = liveness(await self.reader.store.thread(thread_id))
        if info.status != "crashed" or alive.live:
            who = f" (held by {alive.owner})" if alive.owner else ""
            raise UIError(f"thread {thread_id!r} is {info.status}{who}: only a crashed thread can be taken over")
        await self._resume(thread_id, "take-over")

    async def cancel(self, thread_id: str) -> None:
        raise UIError(f"cannot cancel thread {thread_id!r}: only `graphckpt serve` runs a cancellable run queue")

    async def aclose(self) -> None:
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        await self.reader.aclose()


async def _run_quietly(run: Any) -> None:
    """Await a run; a node failure is the thread's state (``failed``, shown on its page), not an HTTP error."""
    from graphckpt.errors import NodeError

    with contextlib.suppress(NodeError):
        await run


def _step_row(s: Snapshot, thread_id: str) -> StepRow:
    meta = metadata_of(s) or {}
    usage = meta.get("usage")
    models = sorted(
        {str(u["model"]) for u in usage.values() if isinstance(u, Mapping) and u.get("model")}
        if isinstance(usage, Mapping)
        else set()
    )
    replayed = meta.get(RECORD["replayed"])
    record = audit_of(meta)
    attempts: dict[str, int] = {}
    failures = []
    for a in record["attempts"]:
        node = str(a.get("node", "?"))
        attempts[node] = attempts.get(node, 0) + 1
        failures.append(f"{node} (attempt {a.get('attempt', '?')}): {a.get('type', 'Error')}: {a.get('message', '')}")
    lost: dict[str, int] = {}
    for c in record["calls"]:
        if c.get("status") == "lost":
            lost[str(c.get("node", "?"))] = lost.get(str(c.get("node", "?")), 0) + 1
    tags = meta.get("tags")
    via = tags.get("ui_action") if isinstance(tags, Mapping) and tags.get(UI_TAG) == "ui" else None
    return StepRow(
        thread_id=s.thread_id,
        checkpoint_id=s.checkpoint_id,
        step=s.step,
        source=source_of(meta),
        nodes=ran_nodes(meta),
        duration_ms=round(duration_ms(meta), 1),
        models=models,
        tokens=tokens(meta),
        next=list(s.next),
        created_at=s.created_at,
        own=s.thread_id == thread_id,
        replayed={str(k): round(float(v), 1) for k, v in replayed.items() if isinstance(v, int | float)}
        if isinstance(replayed, Mapping)
        else {},
        attempts=attempts,
        lost=lost,
        failures=failures,
        via_ui=str(via) if via else None,
    )


def _plain(values: Any) -> dict[str, Any]:
    out = to_jsonable(values)
    return out if isinstance(out, dict) else {"value": out}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
