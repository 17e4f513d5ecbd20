"""Keeping the last N checkpoints of a thread (``prune(keep_last=N)``, ``graphckpt prune --keep-last N``).

A thread's checkpoints under its last N go with their pending writes and events, in one transaction of the saver
(:meth:`~graphckpt.savers.base.Saver.drop_steps`). What stays still reads exactly as before:

- a kept checkpoint reads each channel from its last snapshot on (the body's channel table says which step): those
  blob rows stay, even under the cut (the delta base is kept instead of compacted, so nothing is rewritten);
- the head keeps its pending writes and effect journal (an interrupted, failed or crashed thread resumes as before);
- every step at or under a fork point that another thread's lineage needs stays (the saver checks it in the same
  transaction, so a fork made meanwhile is safe);
- only the thread's own rows go: the steps its lineage reads from the thread it was forked from stay with that
  thread, and the child threads of its subgraphs are left whole.

Reads then start at the oldest kept checkpoint: history lists the kept ones, a fork or a diff names a kept one, and
a stream reconnecting with the id of a removed event is told so (``lost: pruned``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from graphckpt.reader import RawCodec
from graphckpt.savers.base import BlobRange, Saver, ThreadRecord

__all__ = ["Trim", "trim_thread"]

_BODIES = RawCodec()
"""Reads a body's channel table without the state schema."""


@dataclasses.dataclass(frozen=True)
class Trim:
    """What keeping the last checkpoints of one thread removes (or, in a dry run, would remove)."""

    checkpoints: int
    bytes: int
    """The bodies and blob rows that go (an estimate of the freed bytes; the prune measures the real drop)."""


async def trim_thread(
    saver: Saver, record: ThreadRecord, keep: int, forks: Iterable[ThreadRecord], *, dry_run: bool
) -> Trim:
    """Keep the last ``keep`` (1 or more) checkpoints of ``record``'s thread (see the module docstring); ``forks``
    are the live threads forked from it (a dry run's estimate keeps their fork points; the saver checks them all)."""
    below = record.head_step - keep + 1
    tid = record.thread_id
    own = await saver.list_checkpoints(tid) if below > 0 else []
    steps = {cp.checkpoint_id: cp.step for cp in own}
    above = max((steps.get(f.parent_checkpoint_id or "", -1) for f in forks), default=-1)
    dropped = [cp for cp in own if above < cp.step < below]
    if not dropped:
        return Trim(0, 0)
    blobs_from: dict[str, int] = {}
    for cp in own:
        if cp.step >= below:
            for channel, (snapshot, _) in _BODIES.decode_body(cp).channels.items():
                blobs_from[channel] = min(snapshot, blobs_from.get(channel, snapshot))
    first = max(above + 1, min(cp.step for cp in own))
    ranges = [BlobRange(tid, ch, first, min(start, below) - 1) for ch, start in blobs_from.items() if start > first]
    blobs = await saver.get_blobs(ranges) if ranges else []
    size = sum(len(cp.body) for cp in dropped) + sum(len(b.data) for b in blobs)
    if dry_run:
        return Trim(len(dropped), size)
    count = await saver.drop_steps(tid, below, blobs_from)
    return Trim(count, size if count else 0)
