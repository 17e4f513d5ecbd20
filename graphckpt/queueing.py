"""The run queue of an app (mixed into :class:`~graphckpt.app.App`; the work is :mod:`graphckpt.runs`, run by
:mod:`graphckpt.worker`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from graphckpt import runs
from graphckpt.codec import Codec
from graphckpt.compiled import CompiledGraph
from graphckpt.prune import with_ttl
from graphckpt.records import NO_ANSWER
from graphckpt.savers.base import Saver
from graphckpt.savers.queue import RunRecord, RunStatus
from graphckpt.sync import SyncFacade, sync_twin

__all__ = ["RunQueueing"]


class RunQueueing(SyncFacade):
    """Submitting, listing and cancelling queued runs; needs ``saver``, ``graph``, ``codec`` and ``graph_ref``."""

    saver: Saver
    graph: CompiledGraph
    codec: Codec
    graph_ref: str | None

    async def asubmit(
        self,
        input: Any = None,
        *,
        thread_id: str | None = None,
        multitask: runs.Multitask = "reject",
        resume: bool = False,
        answer: Any = NO_ANSWER,
        graph: str | None = None,
        tags: Mapping[str, Any] | None = None,
        recursion_limit: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        ttl: Any = None,
    ) -> RunRecord:
        """Queue a run for a worker (see :func:`graphckpt.runs.submit`): ``multitask="reject"`` raises
        :class:`ThreadBusyError` at once when the thread is busy, ``"enqueue"`` runs it after the current one;
        ``tags`` (not ``None``) are its checkpoints' tags instead of the thread's; ``recursion_limit`` caps the
        run's super-steps (its worker applies it); ``metadata`` is the run's own; ``ttl`` sets the thread's
        time-to-live (as :meth:`~graphckpt.app.App.ainvoke`'s)."""
        queue, ref = runs.queue_of(self.saver), graph or self.graph_ref
        tags = await with_ttl(tags, ttl, self.saver, thread_id)
        return await runs.submit(
            queue,
            self.graph,
            self.codec.serde,
            input,
            thread_id=thread_id,
            multitask=multitask,
            resume=resume,
            answer=answer,
            graph=ref,
            tags=tags,
            recursion_limit=recursion_limit,
            metadata=metadata,
        )

    async def aruns(self, *, thread_id: str | None = None, status: RunStatus | None = None) -> list[RunRecord]:
        """Queued, running and ended runs, oldest first."""
        return await runs.list_runs(runs.queue_of(self.saver), thread_id=thread_id, status=status)

    async def acancel_run(self, run_id: str) -> bool:
        """Cancel a queued run; ``False`` when it is not queued any more."""
        return await runs.cancel(runs.queue_of(self.saver), run_id)

    submit, runs, cancel_run = sync_twin(asubmit), sync_twin(aruns), sync_twin(acancel_run)
