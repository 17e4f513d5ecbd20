"""What export and import share: the format's name and version, thread renaming, chunks as the deltas they pack.

See :mod:`graphckpt.transfer` for the file's lines and where a thread id appears in them.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable, Mapping

from graphckpt.codec import Body, replace_lineage, split_chunk
from graphckpt.errors import CorruptCheckpointError
from graphckpt.reader import RawCodec
from graphckpt.savers.base import Blob, StoredCheckpoint

__all__ = ["BODIES", "FORMAT", "RENAMED_LINKS", "VERSION", "Rename", "b64", "channels_of", "renamed", "unpacked"]

FORMAT, VERSION = "graphckpt-thread", 1
"""The header's ``format`` and ``version``: an export is format 1, and an import reads format 1 only."""

BODIES = RawCodec()
"""Reads a stored body's structure (lineage, channel table) without the schema: nothing it names is looked up."""

Rename = Callable[[str], str]
"""Maps a thread id from one naming to another (stored ids to a file's, a file's to stored ones); raises
``ValueError`` (saying why) for an id that has no name on the other side."""

RENAMED_LINKS = ("subgraph", "forked_from")
"""The checkpoint metadata keys whose ``thread_id`` names another thread (a subgraph child's parent, a fork's
source): renamed with the checkpoint's own ids."""


def renamed(cp: StoredCheckpoint, body: Body, rename: Rename) -> tuple[StoredCheckpoint, Body]:
    """``cp`` (with its decoded ``body``) with every thread id it names renamed: its own, its parent's, its body's
    lineage (the body's other bytes unchanged) and the links of its metadata."""
    thread_id = rename(cp.thread_id)
    lineage = [(rename(tid), first) for tid, first in body.lineage]
    metadata = dict(cp.metadata)
    for key in RENAMED_LINKS:
        link = metadata.get(key)
        if isinstance(link, Mapping) and isinstance(link.get("thread_id"), str):
            metadata[key] = {**link, "thread_id": rename(link["thread_id"])}
    out = dataclasses.replace(
        cp,
        thread_id=thread_id,
        parent_thread_id=None if cp.parent_thread_id is None else rename(cp.parent_thread_id),
        metadata=metadata,
        body=cp.body if lineage == body.lineage else replace_lineage(cp.body, lineage),
        blobs=[dataclasses.replace(b, thread_id=thread_id) for b in cp.blobs],
    )
    return out, dataclasses.replace(body, lineage=lineage)


def unpacked(chunk: Blob, last: int) -> list[Blob]:
    """The deltas a chunk packs (each one's bytes unchanged), up to step ``last``. Each travels with the checkpoint
    of its own step: a chunk can reach past the end of the exported segment (a fork point), and the target may
    already hold the checkpoint at the chunk's first step (an earlier import), which the import skips."""
    try:
        deltas = split_chunk(chunk.data)
    except ValueError as exc:
        raise CorruptCheckpointError(
            f"thread {chunk.thread_id!r} has a corrupt chunk of {chunk.channel!r} at step {chunk.step} ({exc})",
            thread_id=chunk.thread_id,
        ) from None
    return [Blob(chunk.thread_id, chunk.channel, step, "delta", data) for step, data in deltas if step <= last]


def channels_of(cp: StoredCheckpoint) -> list[str]:
    """The channels ``cp``'s body stores in blobs (its channel table)."""
    return list(BODIES.decode_body(cp).channels)


def b64(data: bytes) -> str:
    """Stored bytes as the file carries them."""
    return base64.b64encode(data).decode("ascii")
