"""Recovery of crashed threads (DESIGN.md §6): the confirm-first and automatic strategies' building blocks.

A thread is ``crashed`` when it is ``running`` and its lease expired: the process that ran it died (or was paused
past its lease). :func:`crashed` describes each one for a person (graph, last step, what it was running, tokens spent
so far, how long ago its last heartbeat was); :func:`recover` continues the chosen ones from their last checkpoint,
each one through ``resume`` (which takes the thread over: a thread some other process recovered first, or whose
process came back, is skipped with its reason, never run twice).

Strategies: manual (``resume`` after looking), confirm-first (``crashed`` then ``recover`` of the ones a person
chose: ``graphckpt recover`` asks per thread), automatic (``recover`` of all: ``graphckpt recover --yes``, at a
service's start). See docs/workers.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from graphckpt import ids
from graphckpt.errors import GraphckptError, ThreadConflictError
from graphckpt.records import CrashedThread, RecoveryResult
from graphckpt.store import lineage_segments
from graphckpt.subgraph import link_of

if TYPE_CHECKING:
    from graphckpt.checkpoint import Snapshot
    from graphckpt.savers.base import ThreadRecord
    from graphckpt.store import ThreadStore

__all__ = ["CrashedThread", "RecoveryResult", "crashed", "recover"]


async def crashed(store: ThreadStore, records: Sequence[ThreadRecord] | None = None) -> list[CrashedThread]:
    """Every crashed thread of ``store``'s saver, most recently updated first; or those of ``records`` (thread rows
    read as crashed). Each is described from its own row and lineage, read once: its head checkpoint (what it was
    running, its lineage) and the lineage's other checkpoints (metadata only: tokens, the graph recorded); no
    values, no second read of the thread row."""
    found = []
    now = ids.now()
    for record in await store.saver.list_threads(status="crashed") if records is None else records:
        if record.lease is None:  # pragma: no cover - crashed implies an expired lease
            continue
        if link_of(record.metadata) is not None:  # a subgraph's child thread: its parent's recovery continues it
            continue
        head = await store.checkpoint(record.thread_id, record.head_checkpoint_id)
        body = store.codec.decode_body(head)
        lineage = [head]
        for tid, first, below in lineage_segments(body.lineage, record.head_step):  # the head is read already
            lineage += [cp for cp in await store.saver.list_checkpoints(tid, before_step=below) if cp.step >= first]
        tokens = sum(_tokens(cp.metadata) for cp in lineage)
        metadatas = [record.metadata, *(cp.metadata for cp in lineage)]
        graph = next((g for m in metadatas if isinstance(g := _graph(m), str)), None)
        running = tuple(t.node for t in body.tasks)
        ago = max(0.0, now - record.lease.heartbeat_at)
        found.append(CrashedThread(record.thread_id, graph, record.head_step, running, tokens, record.lease, ago))
    return found


async def recover(resume: Callable[[str], Awaitable[Snapshot]], thread_ids: Sequence[str]) -> list[RecoveryResult]:
    """Continue each of ``thread_ids`` from its last checkpoint (``resume(thread_id)``, one after the other; an
    app's ``aresume``). A thread another process holds now is ``skipped`` ("taken by <owner>") and not run; a run
    that fails is reported with its error (the thread is ``failed``, as after any ``resume``)."""
    results = []
    for thread_id in thread_ids:
        try:
            results.append(RecoveryResult(thread_id, await resume(thread_id)))
        except ThreadConflictError as exc:  # another process holds it now: it goes on there, nothing failed
            owner = getattr(getattr(exc, "lease", None), "owner", None)
            why = f"taken by {owner}" if owner is not None else f"taken by another process ({exc})"
            results.append(RecoveryResult(thread_id, None, why, skipped=True))
        except GraphckptError as exc:
            results.append(RecoveryResult(thread_id, None, f"{type(exc).__name__}: {exc}"))
    return results


def _graph(metadata: Any) -> Any:
    """The graph reference a checkpoint's tags record (``tags.graph``), or ``None``."""
    tags = metadata.get("tags") if hasattr(metadata, "get") else None
    return tags.get("graph") if isinstance(tags, dict) else None


def _tokens(metadata: Any) -> int:
    usage = metadata.get("usage") if hasattr(metadata, "get") else None
    if not isinstance(usage, dict):
        return 0
    total = 0
    for entry in usage.values():
        if isinstance(entry, dict):
            for key in ("prompt_tokens", "completion_tokens"):
                value = entry.get(key, 0)
                total += value if isinstance(value, int) else 0
    return total
