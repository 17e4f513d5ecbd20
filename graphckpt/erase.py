"""Erasure: deleting a thread with everything that holds its data (child threads of its subgraphs, and with
``cascade`` the forks that depend on it), refusing a delete that would leave forks on a lineage nobody asked to keep.
"""

from __future__ import annotations

from graphckpt.errors import ThreadHasForksError, ThreadNotFoundError
from graphckpt.savers.base import Saver, brief
from graphckpt.subgraph import subgraph_threads

__all__ = ["erase_thread", "refuse_forked"]


async def erase_thread(saver: Saver, thread_id: str, *, cascade: bool = False) -> list[str]:
    """Delete ``thread_id`` and the child threads its subgraphs ran; returns the ids of the threads deleted.

    A thread that live forks depend on (see :meth:`Saver.thread_forks`) is refused with
    :class:`~graphckpt.errors.ThreadHasForksError` naming them, unless ``cascade``: then the forks (and theirs) are
    deleted first. A fork made after the check, in a race, keeps what it needs (the saver's delete never breaks a
    fork), so the thread's rows up to that fork point stay until it is deleted too."""
    if await saver.get_thread(thread_id) is None:
        raise ThreadNotFoundError(f"thread {brief(thread_id)!r} does not exist")
    forks = await saver.thread_forks(thread_id)
    if not cascade:
        refuse_forked(thread_id, forks)
    deleted: list[str] = []
    for target in [*forks, thread_id]:
        for child in await subgraph_threads(saver, [target]):
            deleted += await _delete(saver, child.thread_id)
        deleted += await _delete(saver, target)
    return deleted


def refuse_forked(thread_id: str, forks: list[str]) -> None:
    """Raise :class:`~graphckpt.errors.ThreadHasForksError` naming ``forks`` (the first ten) when there are any."""
    if forks:
        named = ", ".join(repr(brief(f)) for f in forks[:10]) + (", ..." if len(forks) > 10 else "")
        raise ThreadHasForksError(
            f"thread {brief(thread_id)!r} has {len(forks)} fork(s) that depend on its checkpoints: {named}; "
            "delete them first or pass cascade=True (CLI --cascade, HTTP ?cascade=true) to delete them too",
            forks,
        )


async def _delete(saver: Saver, thread_id: str) -> list[str]:
    try:
        await saver.delete_thread(thread_id)
    except ThreadNotFoundError:  # deleted meanwhile by somebody else
        return []
    return [thread_id]
