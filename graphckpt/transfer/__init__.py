"""Moving a thread, with its whole lineage, between savers as JSON lines: :func:`export_thread`, :func:`import_thread`.

The export is raw: stored bytes travel base64-encoded and unchanged, so no state schema is needed on either side and
a thread imported elsewhere resumes exactly where it was. (A chunk travels as the deltas it packs, each with the
checkpoint of its step.) Lines, in order::

    {"kind": "header", "format": "graphckpt-thread", "version": 1, "thread_id": ...}
    {"kind": "checkpoint", ...}   one per checkpoint, oldest first: ancestors' (up to each fork point) then the thread's
    {"kind": "writes", ...}       the pending writes of each thread's head, with its status and error
    {"kind": "end", "checkpoints": N}

An export is untrusted input. Import checks all of it before it writes anything (see :func:`import_thread` and
:mod:`graphckpt.transfer.checks`), then commits the new checkpoints in order through the normal compare-and-set path.
A checkpoint the target already has is skipped only when it is identical there, every field and every blob (so two
forks of one thread can be imported one after the other); anything else at that place is a
:class:`ThreadConflictError`, as is a file that would change an existing thread's status or pending writes.

**Thread ids.** A file names threads as its writer chose to (``rename`` on export: a server writes the ids a token
sees, not its namespace-prefixed stored ones) and the importer maps them into its own naming (``rename`` on import).
A thread id appears in: the header; each checkpoint's ``thread_id`` and ``parent_thread_id``; the lineage in each
checkpoint's body (which thread stores which steps); the links of its metadata (:data:`RENAMED_LINKS`: a subgraph
child's parent, a fork's source); each ``writes`` line. A child thread of a subgraph is named after its parent
(``parent|node:task``), so a prefix mapping keeps it one. Nothing else in a file names a thread.

The modules, bottom up: :mod:`~graphckpt.transfer.checks` (what every field and byte of an import must pass),
:mod:`~graphckpt.transfer.lines` (what export and import share: the format's name, renaming, chunks as deltas),
:mod:`~graphckpt.transfer.export`, :mod:`~graphckpt.transfer.parse` (an import's file on its own) and
:mod:`~graphckpt.transfer.imports` (an import against the target, then the writes).
"""

from graphckpt.transfer.export import export_thread
from graphckpt.transfer.imports import import_thread
from graphckpt.transfer.lines import RENAMED_LINKS, Rename

__all__ = ["RENAMED_LINKS", "Rename", "export_thread", "import_thread"]
