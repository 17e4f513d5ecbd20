"""A thread's fork tree as the UI's thread page draws it: found by indexed reads (each ancestor by id, each member's
forks by the saver's parent-thread pages), never by reading every thread of the store."""

from __future__ import annotations

from collections.abc import Callable

from graphckpt.checkpoint import ThreadInfo
from graphckpt.errors import ThreadNotFoundError
from graphckpt.listing import iter_threads
from graphckpt.reader import RawReader
from graphckpt.views import thread_info

__all__ = ["fork_family"]


async def fork_family(
    reader: RawReader, info: ThreadInfo, mine: Callable[[str], bool]
) -> tuple[ThreadInfo, list[ThreadInfo]]:
    """The root of ``info``'s fork tree (its oldest ancestor that ``mine`` accepts) and every thread of the tree
    that ``mine`` accepts, root first: one read per ancestor, and one indexed page read of each member's forks."""
    root, seen = info, {info.thread_id}
    while root.forked_from is not None and root.forked_from.thread_id not in seen:
        up = root.forked_from.thread_id
        if not mine(up):
            break
        try:
            root = await reader.athread(up)
        except ThreadNotFoundError:
            break
        seen.add(up)
    found, todo = {root.thread_id: root}, [root.thread_id]
    while todo:
        async for record in iter_threads(reader.saver, parent_thread_id=todo.pop()):
            if record.thread_id not in found and mine(record.thread_id):
                found[record.thread_id] = thread_info(record)
                todo.append(record.thread_id)
    return root, list(found.values())
